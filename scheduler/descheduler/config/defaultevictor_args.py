"""DefaultEvictorArgs (kubernetes-sigs/descheduler v0.35.1 pkg/framework/plugins/defaultevictor/types.go).

Koordinator's wrapper decodes them itself (they are not a descheduler/v1alpha2 kind of its own scheme) and never
runs descheduler's validator; we decode them strictly and refuse what that validator refuses (a decision:
docs/decisions.md), so a mistake is said at start rather than silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apis.core.labelselector import LabelSelector, SelectorError, parse_selector_string
from scheduler.descheduler.config.common import (
    UINT,
    ConfigError,
    PriorityThreshold,
    args_object,
    boolean,
    check_keys,
    duration,
    integer,
    mapping,
    member,
    priority_threshold,
    selector,
    string,
)

KIND = "DefaultEvictorArgs"
PODS_WITH_LOCAL_STORAGE = "PodsWithLocalStorage"
DAEMONSET_PODS = "DaemonSetPods"
SYSTEM_CRITICAL_PODS = "SystemCriticalPods"
FAILED_BARE_PODS = "FailedBarePods"
PODS_WITH_PVC = "PodsWithPVC"
PODS_WITHOUT_PDB = "PodsWithoutPDB"
PODS_WITH_RESOURCE_CLAIMS = "PodsWithResourceClaims"
DEFAULT_PROTECTIONS = (PODS_WITH_LOCAL_STORAGE, SYSTEM_CRITICAL_PODS, FAILED_BARE_PODS, DAEMONSET_PODS)
EXTRA_PROTECTIONS = (PODS_WITH_PVC, PODS_WITHOUT_PDB, PODS_WITH_RESOURCE_CLAIMS)
NO_EVICTION_POLICIES = ("Preferred", "Mandatory")

_FIELDS = ("nodeSelector", "labelSelector", "namespaceLabelSelector", "priorityThreshold", "nodeFit", "minReplicas",
           "minPodAge", "noEvictionPolicy", "podProtections", "evictLocalStoragePods", "evictDaemonSetPods",
           "evictSystemCriticalPods", "ignorePvcPods", "ignorePodsWithoutPDB", "evictFailedBarePods")
_DEPRECATED = {"evictLocalStoragePods": "evict_local_storage_pods", "evictDaemonSetPods": "evict_daemonset_pods",
               "evictSystemCriticalPods": "evict_system_critical_pods", "ignorePvcPods": "ignore_pvc_pods",
               "ignorePodsWithoutPDB": "ignore_pods_without_pdb", "evictFailedBarePods": "evict_failed_bare_pods"}


@dataclass
class DefaultEvictorArgs:
    node_selector: LabelSelector | None = None  # parsed from the string form
    label_selector: LabelSelector | None = None
    namespace_label_selector: LabelSelector | None = None
    priority_threshold: PriorityThreshold | None = None
    node_fit: bool = False
    min_replicas: int = 0
    min_pod_age: float | None = None
    no_eviction_policy: str = ""
    extra_enabled: list[str] = field(default_factory=list)
    default_disabled: list[str] = field(default_factory=list)
    protected_storage_classes: list[str] = field(default_factory=list)
    evict_local_storage_pods: bool = False
    evict_daemonset_pods: bool = False
    evict_system_critical_pods: bool = False
    ignore_pvc_pods: bool = False
    ignore_pods_without_pdb: bool = False
    evict_failed_bare_pods: bool = False

    def protections(self) -> list[str]:
        """getEffectivePodProtections: the lists when either is given, else the deprecated booleans."""
        if self.extra_enabled or self.default_disabled:
            return [p for p in DEFAULT_PROTECTIONS if p not in self.default_disabled] + list(self.extra_enabled)
        out = []
        if not self.evict_local_storage_pods:
            out.append(PODS_WITH_LOCAL_STORAGE)
        if not self.evict_daemonset_pods:
            out.append(DAEMONSET_PODS)
        if not self.evict_system_critical_pods:
            out.append(SYSTEM_CRITICAL_PODS)
        if not self.evict_failed_bare_pods:
            out.append(FAILED_BARE_PODS)
        if self.ignore_pvc_pods:
            out.append(PODS_WITH_PVC)
        if self.ignore_pods_without_pdb:
            out.append(PODS_WITHOUT_PDB)
        return out


def decode_defaultevictor_args(raw: object, where: str) -> DefaultEvictorArgs:
    m = args_object(raw, where, _FIELDS)
    args = DefaultEvictorArgs(
        label_selector=selector(m, "labelSelector", where),
        namespace_label_selector=selector(m, "namespaceLabelSelector", where),
        priority_threshold=priority_threshold(m, "priorityThreshold", where),
        node_fit=boolean(m, "nodeFit", where),
        min_replicas=integer(m, "minReplicas", where, UINT) or 0,
        min_pod_age=duration(m, "minPodAge", where),
        no_eviction_policy=string(m, "noEvictionPolicy", where),
    )
    text = string(m, "nodeSelector", where)
    if text:
        try:
            args.node_selector = parse_selector_string(text, f"{where}.nodeSelector")
        except SelectorError as e:
            raise ConfigError(str(e)) from None
    for name, attr in _DEPRECATED.items():
        setattr(args, attr, boolean(m, name, where))
    _protections(m, where, args)
    _validate(m, where, args)
    return args


def _protections(m: object, where: str, args: DefaultEvictorArgs) -> None:
    protections = member(mapping(m, where), "podProtections", where, ("extraEnabled", "defaultDisabled", "config"))
    if protections is None:
        return
    pm, at = protections
    for key, attr in (("extraEnabled", "extra_enabled"), ("defaultDisabled", "default_disabled")):
        v = pm.get(key)
        if v is None:
            continue
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{at}.{key}: must be a list of protection names, got {v!r}")
        setattr(args, attr, list(v))
    cfg = member(pm, "config", at, ("PodsWithPVC",))
    if cfg is not None:
        cm, cfg_at = cfg
        pvc_member = member(cm, "PodsWithPVC", cfg_at, ("protectedStorageClasses",))
        if pvc_member is not None:
            pvc, pvc_at = pvc_member
            classes = pvc.get("protectedStorageClasses") or []
            if not isinstance(classes, list):
                raise ConfigError(f"{pvc_at}.protectedStorageClasses: must be a list")
            for i, c in enumerate(classes):
                c_at = f"{pvc_at}.protectedStorageClasses[{i}]"
                cls = mapping(c, c_at)
                check_keys(cls, ("name",), c_at)
                args.protected_storage_classes.append(string(cls, "name", c_at))


def _validate(m: object, where: str, args: DefaultEvictorArgs) -> None:
    """descheduler's ValidateDefaultEvictorArgs."""
    pt = args.priority_threshold
    if pt is not None and pt.value is not None and pt.name:
        raise ConfigError(f"{where}.priorityThreshold: priority threshold misconfigured, only one of "
                          "priorityThreshold fields can be set")
    if args.no_eviction_policy and args.no_eviction_policy not in NO_EVICTION_POLICIES:
        raise ConfigError(f"{where}.noEvictionPolicy: {args.no_eviction_policy!r} is not supported; accepted: "
                          f"{', '.join(NO_EVICTION_POLICIES)}")
    lists = args.extra_enabled or args.default_disabled
    used = [name for name in _DEPRECATED if mapping(m, where).get(name)]
    if lists and used:
        raise ConfigError(f"{where}.{used[0]}: cannot be used together with podProtections")
    for key, names, allowed in (("extraEnabled", args.extra_enabled, EXTRA_PROTECTIONS),
                                ("defaultDisabled", args.default_disabled, DEFAULT_PROTECTIONS)):
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name not in allowed:
                raise ConfigError(f"{where}.podProtections.{key}[{i}]: {name!r} is not a valid pod protection; "
                                  f"accepted: {', '.join(allowed)}")
            if name in seen:
                raise ConfigError(f"{where}.podProtections.{key}[{i}]: duplicate protection {name!r}")
            seen.add(name)
    for i, name in enumerate(args.protected_storage_classes):
        if not name:
            raise ConfigError(f"{where}.podProtections.config.PodsWithPVC.protectedStorageClasses[{i}].name: "
                              "must not be empty")
