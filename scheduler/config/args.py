"""pluginConfig args of every plugin koord-sched knows, typed, defaulted and validated as upstream's v1 types.

Upstream: koordinator `pkg/scheduler/apis/config/v1/{types,defaults}.go` and `validation/validation_pluginargs.go`;
kube-scheduler `pkg/scheduler/apis/config/v1` for NodeResourcesFitArgs, NodeResourcesBalancedAllocationArgs and
DefaultPreemptionArgs. Field names are upstream's JSON names; an unknown field is refused (strict decoding).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.labelselector import SelectorError
from apis.core.nodeaffinity import AffinityError, NodeSelector, Preferred, preferred_terms
from apis.core.objects import JSON
from apis.core.topologyspread import SpreadConstraint, spread_constraint
from apis.extension.resources import (
    RESOURCE_FPGA,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_NPU_CORE,
    RESOURCE_RDMA,
)
from apis.scheduling.gang import MATCH_POLICIES, MATCH_POLICY_ONCE_SATISFIED
from scheduler.config.fields import (
    TYPE_FIELDS,
    ConfigError,
    boolean,
    check_keys,
    check_range,
    choice,
    duration,
    integer,
    mapping,
    object_list,
    quantity_map,
    string,
    string_list,
)
from scheduler.elasticquota.hooks import REGISTRY as HOOKS
from scheduler.elasticquota.model import parse_resources
from scheduler.elasticquota.plugin import ElasticQuotaArgs
from scheduler.plugins.fitplus import FitPlusArgs
from scheduler.plugins.loadaware_args import LoadAwareArgs
from scheduler.plugins.scarce import ScarceArgs

log = logging.getLogger("koord-sched.config")

LEAST_ALLOCATED, MOST_ALLOCATED, BALANCED = "LeastAllocated", "MostAllocated", "BalancedAllocation"
REQUESTED_TO_CAPACITY = "RequestedToCapacityRatio"
DEVICE_SCORING_RESOURCES: tuple[tuple[str, int], ...] = ((RESOURCE_GPU_MEMORY_RATIO, 1), (RESOURCE_GPU_MEMORY, 1),
                                                       (RESOURCE_RDMA, 1), (RESOURCE_FPGA, 1))


def _resource_specs(raw: Mapping[str, object], where: str, default: tuple[tuple[str, int], ...]
                    ) -> tuple[tuple[str, int], ...] | None:
    """[]ResourceSpec {name, weight}; weights in (0, 100] (validateResources). None when absent."""
    if raw.get("resources") is None:
        return None
    out = []
    for i, item in enumerate(object_list(raw, "resources", where)):
        w = f"{where}.resources[{i}]"
        check_keys(item, ("name", "weight"), w)
        name = string(item, "name", w, "")
        if not name:
            raise ConfigError(f"{w}.name: required")
        weight = integer(item, "weight", w, 0)
        if not 0 < weight <= 100:
            raise ConfigError(f"{w}.weight: resource weight of {name} not in valid range (0, 100], got {weight}")
        out.append((name, weight))
    return tuple(out)


@dataclass(frozen=True)
class ScoringStrategy:
    """ScoringStrategy {type, resources} as DeviceShare reads it: the scorer's strategy and per-resource weights."""

    type: str = LEAST_ALLOCATED
    resources: tuple[tuple[str, int], ...] = DEVICE_SCORING_RESOURCES

    @property
    def weights(self) -> dict[str, int]:
        return dict(self.resources)


@dataclass(frozen=True)
class GPUSharedResourceTemplatesConfig:
    config_map_namespace: str = "koordinator-system"
    config_map_name: str = "gpu-shared-resource-templates"
    matched_resources: tuple[str, ...] = (RESOURCE_NPU_CORE,)


@dataclass
class DeviceShareArgs:
    """DeviceShareArgs with SetDefaults_DeviceShareArgs applied."""

    allocator: str = ""  # deprecated upstream, accepted and unused
    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)
    disable_device_numa_topology_alignment: bool = False
    gpu_shared_resource_templates_config: GPUSharedResourceTemplatesConfig = field(
        default_factory=GPUSharedResourceTemplatesConfig)
    gpu_share_unsupported_models: list[tuple[str, str]] = field(default_factory=list)  # (vendor, model)


DEVICESHARE_FIELDS = ("allocator", "scoringStrategy", "disableDeviceNUMATopologyAlignment",
                      "gpuSharedResourceTemplatesConfig", "gpuShareUnsupportedModels")


def device_share_args(raw: Mapping[str, object], where: str) -> DeviceShareArgs:
    check_keys(raw, (*TYPE_FIELDS, *DEVICESHARE_FIELDS), where)
    out = DeviceShareArgs(allocator=string(raw, "allocator", where, ""),
                          disable_device_numa_topology_alignment=boolean(
                              raw, "disableDeviceNUMATopologyAlignment", where, False))
    if out.allocator:
        log.info("%s.allocator: deprecated upstream (adapting allocators is no longer supported); ignored", where)
    if raw.get("scoringStrategy") is not None:
        w = f"{where}.scoringStrategy"
        s = mapping(raw["scoringStrategy"], w)
        check_keys(s, ("type", "resources"), w)
        # upstream New(): only these two have a scorer ("scoring strategy %s is not supported")
        kind = choice(s, "type", w, LEAST_ALLOCATED, (LEAST_ALLOCATED, MOST_ALLOCATED))
        resources = _resource_specs(s, w, DEVICE_SCORING_RESOURCES)
        if resources is None:
            # [decision] upstream keeps an empty list here and then scores every node 0; the evident intent of
            # `scoringStrategy: {type: X}` is "X over the usual resources".
            log.info("%s.resources: not given; using the default device resources %s", w,
                     ", ".join(n for n, _ in DEVICE_SCORING_RESOURCES))
            resources = DEVICE_SCORING_RESOURCES
        out.scoring_strategy = ScoringStrategy(kind, resources)
    if raw.get("gpuSharedResourceTemplatesConfig") is not None:
        w = f"{where}.gpuSharedResourceTemplatesConfig"
        t = mapping(raw["gpuSharedResourceTemplatesConfig"], w)
        check_keys(t, ("configMapNamespace", "configMapName", "matchedResources"), w)
        out.gpu_shared_resource_templates_config = GPUSharedResourceTemplatesConfig(
            string(t, "configMapNamespace", w, ""), string(t, "configMapName", w, ""),
            tuple(string_list(t, "matchedResources", w)))
    for i, m in enumerate(object_list(raw, "gpuShareUnsupportedModels", where)):
        w = f"{where}.gpuShareUnsupportedModels[{i}]"
        check_keys(m, ("vendor", "model"), w)
        out.gpu_share_unsupported_models.append((string(m, "vendor", w, ""), string(m, "model", w, "")))
    return out


@dataclass
class CoschedulingArgs:
    """CoschedulingArgs with SetDefaults_CoschedulingArgs applied; `explicit` names the fields the file set."""

    default_timeout: float = 600.0
    controller_workers: int = 1
    skip_check_schedule_cycle: bool = False
    enable_preemption: bool = False
    aware_network_topology: bool = False
    default_match_policy: str = MATCH_POLICY_ONCE_SATISFIED
    explicit: frozenset[str] = frozenset()


COSCHEDULING_FIELDS = ("defaultTimeout", "controllerWorkers", "skipCheckScheduleCycle", "enablePreemption",
                       "awareNetworkTopology", "defaultMatchPolicy")


def coscheduling_args(raw: Mapping[str, object], where: str) -> CoschedulingArgs:
    names = COSCHEDULING_FIELDS
    check_keys(raw, (*TYPE_FIELDS, *names), where)
    return CoschedulingArgs(
        default_timeout=duration(raw, "defaultTimeout", where, 600.0),
        controller_workers=integer(raw, "controllerWorkers", where, 1, low=1),
        skip_check_schedule_cycle=boolean(raw, "skipCheckScheduleCycle", where, False),
        enable_preemption=boolean(raw, "enablePreemption", where, False),
        aware_network_topology=boolean(raw, "awareNetworkTopology", where, False),
        default_match_policy=choice(raw, "defaultMatchPolicy", where, MATCH_POLICY_ONCE_SATISFIED, MATCH_POLICIES),
        explicit=frozenset(n for n in names if raw.get(n) is not None))


@dataclass
class ReservationArgs:
    """ReservationArgs with SetDefaults_ReservationArgs applied. scheduler.reservation uses enablePreemption; the
    controller/GC/pre-allocation/selector-index fields are validated and otherwise not used."""

    enable_preemption: bool = False
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100
    controller_workers: int = 1
    gc_duration_seconds: int = 86400
    gc_interval_seconds: int = 60
    disable_garbage_collection: bool = False
    resync_interval_seconds: int = 60
    pre_allocation: JSON = field(default_factory=dict)
    ignored_resources: list[str] = field(default_factory=list)
    ignored_resource_groups: list[str] = field(default_factory=list)
    selector_index: JSON = field(default_factory=dict)


_NATIVE = ("cpu", "memory", "pods", "ephemeral-storage")


def _extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a qualified name outside kubernetes.io/ and requests.*."""
    if "/" not in name or name.startswith("requests.") or name in _NATIVE or name.startswith("hugepages-"):
        return False
    prefix = name.split("/", 1)[0]
    return prefix != "kubernetes.io" and not prefix.endswith(".kubernetes.io") and all(prefix.split("."))


RESERVATION_FIELDS = ("enablePreemption", "minCandidateNodesPercentage", "minCandidateNodesAbsolute",
                      "controllerWorkers", "gcDurationSeconds", "gcIntervalSeconds", "disableGarbageCollection",
                      "resyncIntervalSeconds", "preAllocationConfig", "ignoredResources", "ignoredResourceGroups",
                      "reservationSelectorIndex")


def reservation_args(raw: Mapping[str, object], where: str) -> ReservationArgs:
    check_keys(raw, (*TYPE_FIELDS, *RESERVATION_FIELDS), where)
    out = ReservationArgs(
        enable_preemption=boolean(raw, "enablePreemption", where, False),
        min_candidate_nodes_percentage=integer(raw, "minCandidateNodesPercentage", where, 10, low=0, high=100),
        min_candidate_nodes_absolute=integer(raw, "minCandidateNodesAbsolute", where, 100, low=0),
        controller_workers=integer(raw, "controllerWorkers", where, 1),
        disable_garbage_collection=boolean(raw, "disableGarbageCollection", where, False))
    for camel, attr, default in (("gcDurationSeconds", "gc_duration_seconds", 86400),
                                 ("gcIntervalSeconds", "gc_interval_seconds", 60),
                                 ("resyncIntervalSeconds", "resync_interval_seconds", 60)):
        v = integer(raw, camel, where, 0, low=0)
        setattr(out, attr, v or default)  # 0 means "default" upstream
    if raw.get("preAllocationConfig") is not None:
        w = f"{where}.preAllocationConfig"
        p = mapping(raw["preAllocationConfig"], w)
        check_keys(p, ("enableClusterMode", "clusterLabelKey", "clusterPriorityAnnotationKey",
                       "preferNoPreAllocatedPods"), w)
        out.pre_allocation = dict(p)
    out.ignored_resources = string_list(raw, "ignoredResources", where)
    for i, r in enumerate(out.ignored_resources):
        if not _extended(r):
            raise ConfigError(f"{where}.ignoredResources[{i}]: {r!r} must be an extended resource name (e.g. "
                              "example.com/gpu); native resources cannot be ignored")
    out.ignored_resource_groups = string_list(raw, "ignoredResourceGroups", where)
    for i, g in enumerate(out.ignored_resource_groups):
        if "/" in g or not _extended(f"{g}/x"):
            raise ConfigError(f"{where}.ignoredResourceGroups[{i}]: {g!r} must be usable as an extended resource "
                              "prefix (a DNS subdomain without '/', not kubernetes.io)")
    if raw.get("reservationSelectorIndex") is not None:
        w = f"{where}.reservationSelectorIndex"
        s = mapping(raw["reservationSelectorIndex"], w)
        check_keys(s, ("enabled", "keyPrefixes", "keys"), w)
        out.selector_index = {"enabled": boolean(s, "enabled", w, False),
                              "keyPrefixes": string_list(s, "keyPrefixes", w), "keys": string_list(s, "keys", w)}
    return out


ELASTICQUOTA_FIELDS = ("delayEvictTime", "revokePodInterval", "defaultQuotaGroupMax", "systemQuotaGroupMax",
                       "quotaGroupNamespace", "monitorAllQuotas", "enableCheckParentQuota", "enableRuntimeQuota",
                       "enableMinQuotaScale", "disableDefaultQuotaPreemption", "enableQueueHint",
                       "quotaSnapshotUpdateInterval", "hookPlugins")


def elastic_quota_args(raw: Mapping[str, object], where: str) -> ElasticQuotaArgs:
    check_keys(raw, (*TYPE_FIELDS, *ELASTICQUOTA_FIELDS), where)
    out = ElasticQuotaArgs(
        enable_runtime_quota=boolean(raw, "enableRuntimeQuota", where, True),
        enable_check_parent_quota=boolean(raw, "enableCheckParentQuota", where, False),
        enable_min_quota_scale=boolean(raw, "enableMinQuotaScale", where, True),
        disable_default_quota_preemption=boolean(raw, "disableDefaultQuotaPreemption", where, True),
        quota_group_namespace=string(raw, "quotaGroupNamespace", where, "") or "koordinator-system",
        delay_evict_time=duration(raw, "delayEvictTime", where, 120.0),
        revoke_pod_interval=duration(raw, "revokePodInterval", where, 1.0),
        monitor_all_quotas=boolean(raw, "monitorAllQuotas", where, False),
        enable_queue_hint=boolean(raw, "enableQueueHint", where, False),
        quota_snapshot_update_interval=duration(raw, "quotaSnapshotUpdateInterval", where, 120.0))
    for camel, attr in (("defaultQuotaGroupMax", "default_quota_group_max"),
                        ("systemQuotaGroupMax", "system_quota_group_max")):
        q = quantity_map(raw, camel, where)
        if q:  # empty means "default" upstream
            setattr(out, attr, parse_resources(q, f"{where}.{camel}"))
    for i, h in enumerate(object_list(raw, "hookPlugins", where)):
        check_keys(h, ("key", "factoryKey", "factoryArgs"), f"{where}.hookPlugins[{i}]")
        out.hook_plugins.append(dict(h))
    try:
        HOOKS.check(out.hook_plugins)
    except InvalidInput as e:
        raise ConfigError(f"{where}.hookPlugins: {e}") from None
    return out


@dataclass
class NodeResourcesFitArgs:
    """kube-scheduler's NodeResourcesFitArgs, defaulted: LeastAllocated over cpu and memory (weight 1 each)."""

    scoring_type: str = LEAST_ALLOCATED
    resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))


FIT_FIELDS = ("ignoredResources", "ignoredResourceGroups", "scoringStrategy")


def node_resources_fit_args(raw: Mapping[str, object], where: str) -> NodeResourcesFitArgs:
    check_keys(raw, (*TYPE_FIELDS, *FIT_FIELDS), where)
    for name in ("ignoredResources", "ignoredResourceGroups"):
        if string_list(raw, name, where):
            raise ConfigError(f"{where}.{name}: not supported by koord-sched (every requested resource is checked)")
    out = NodeResourcesFitArgs()
    if raw.get("scoringStrategy") is not None:
        w = f"{where}.scoringStrategy"
        s = mapping(raw["scoringStrategy"], w)
        check_keys(s, ("type", "resources", "requestedToCapacityRatio"), w)
        out.scoring_type = choice(s, "type", w, LEAST_ALLOCATED, (LEAST_ALLOCATED, MOST_ALLOCATED))
        out.resources = _resource_specs(s, w, out.resources) or out.resources
        if s.get("requestedToCapacityRatio") is not None:
            raise ConfigError(f"{w}.requestedToCapacityRatio: only valid with type {REQUESTED_TO_CAPACITY}, "
                              "which koord-sched does not support (accepted types: LeastAllocated, MostAllocated)")
    return out


@dataclass
class BalancedAllocationArgs:
    resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))


def balanced_allocation_args(raw: Mapping[str, object], where: str) -> BalancedAllocationArgs:
    check_keys(raw, (*TYPE_FIELDS, "resources"), where)
    # kube's validation: BalancedAllocation weights must be exactly 1
    resources = _resource_specs(raw, where, BalancedAllocationArgs.resources)
    for i, (name, weight) in enumerate(resources or ()):
        if weight != 1:
            raise ConfigError(f"{where}.resources[{i}].weight: must be 1 for {name} (BalancedAllocation)")
    return BalancedAllocationArgs(resources or BalancedAllocationArgs.resources)


@dataclass(frozen=True)
class NodeAffinityArgs:
    """kube-scheduler's NodeAffinityArgs: addedAffinity, applied to every pod of the profile."""

    added_required: NodeSelector | None = None
    added_preferred: tuple[Preferred, ...] = ()


def node_affinity_args(raw: Mapping[str, object], where: str) -> NodeAffinityArgs:
    check_keys(raw, (*TYPE_FIELDS, "addedAffinity"), where)
    added = raw.get("addedAffinity")
    if added is None:
        return NodeAffinityArgs()
    w = f"{where}.addedAffinity"
    a = mapping(added, w)
    check_keys(a, ("requiredDuringSchedulingIgnoredDuringExecution",
                   "preferredDuringSchedulingIgnoredDuringExecution"), w)
    try:
        required = a.get("requiredDuringSchedulingIgnoredDuringExecution")
        return NodeAffinityArgs(NodeSelector.of(required) if required is not None else None,
                                preferred_terms(a.get("preferredDuringSchedulingIgnoredDuringExecution")))
    except AffinityError as e:
        raise ConfigError(f"{w}: {e}") from None


@dataclass(frozen=True)
class InterPodAffinityArgs:
    """kube-scheduler's InterPodAffinityArgs (v1 defaults: hardPodAffinityWeight 1)."""

    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False


def inter_pod_affinity_args(raw: Mapping[str, object], where: str) -> InterPodAffinityArgs:
    check_keys(raw, (*TYPE_FIELDS, *INTER_POD_AFFINITY_FIELDS), where)
    return InterPodAffinityArgs(integer(raw, "hardPodAffinityWeight", where, 1, low=0, high=100),
                                boolean(raw, "ignorePreferredTermsOfExistingPods", where, False))


INTER_POD_AFFINITY_FIELDS = ("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods")
SPREAD_FIELDS = ("defaultConstraints", "defaultingType")
SYSTEM_DEFAULTING, LIST_DEFAULTING = "System", "List"


@dataclass(frozen=True)
class PodTopologySpreadArgs:
    """kube-scheduler's PodTopologySpreadArgs, validated as kube does. The default constraints (System: hostname
    maxSkew 3 and zone maxSkew 5, ScheduleAnyway) select a pod's siblings through its Services, ReplicaSet,
    StatefulSet or ReplicationController, which koord-sched does not read: they are not applied
    (docs/decisions.md)."""

    defaulting_type: str = SYSTEM_DEFAULTING
    default_constraints: tuple[SpreadConstraint, ...] = ()


def pod_topology_spread_args(raw: Mapping[str, object], where: str) -> PodTopologySpreadArgs:
    check_keys(raw, (*TYPE_FIELDS, *SPREAD_FIELDS), where)
    constraints: list[SpreadConstraint] = []
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(object_list(raw, "defaultConstraints", where)):
        w = f"{where}.defaultConstraints[{i}]"
        if c.get("labelSelector") is not None:
            raise ConfigError(f"{w}.labelSelector: constraint must not define a selector, as they deduced for each pod")
        try:
            got = spread_constraint(dict(c), {}, w)
        except SelectorError as e:
            raise ConfigError(str(e)) from None
        if (got.topology_key, got.when_unsatisfiable) in seen:
            raise ConfigError(f"{w}: Duplicate value: {{{got.topology_key!r}, {got.when_unsatisfiable!r}}}")
        seen.add((got.topology_key, got.when_unsatisfiable))
        constraints.append(got)
    default = LIST_DEFAULTING if constraints else SYSTEM_DEFAULTING
    kind = choice(raw, "defaultingType", where, default, (SYSTEM_DEFAULTING, LIST_DEFAULTING))
    if kind == SYSTEM_DEFAULTING and constraints:
        raise ConfigError(f'{where}.defaultingType: Invalid value: "System": when .defaultConstraints are not empty')
    return PodTopologySpreadArgs(kind, tuple(constraints))


@dataclass
class DefaultPreemptionArgs:
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


NUMA_FIELDS = ("defaultCPUBindPolicy", "scoringStrategy", "numaScoringStrategy")


@dataclass
class NodeNUMAResourceArgs:
    """NodeNUMAResourceArgs (upstream v1 defaults: FullPCPUs; both strategies LeastAllocated over cpu and memory,
    weight 1). `scoringStrategy` drives the Score; `numaScoringStrategy` (the order NUMA nodes are filled in) is
    validated only: NUMA nodes are filled in id order here."""

    default_cpu_bind_policy: str = "FullPCPUs"
    scoring_type: str = LEAST_ALLOCATED
    scoring_resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))


def node_numa_resource_args(raw: Mapping[str, object], where: str) -> NodeNUMAResourceArgs:
    check_keys(raw, (*TYPE_FIELDS, *NUMA_FIELDS), where)
    policy = choice(raw, "defaultCPUBindPolicy", where, "FullPCPUs", ("FullPCPUs", "SpreadByPCPUs"))
    out = NodeNUMAResourceArgs(policy)
    for name in ("scoringStrategy", "numaScoringStrategy"):
        if raw.get(name) is None:
            continue
        w = f"{where}.{name}"
        s = mapping(raw[name], w)
        check_keys(s, ("type", "resources"), w)
        if not s.get("type"):  # upstream New: resourceStrategyTypeMap has no "" entry
            raise ConfigError(f"{w}.type: {'numa ' if name.startswith('numa') else ''}scoring strategy  is not "
                              f"supported (accepted: {LEAST_ALLOCATED}, {MOST_ALLOCATED})")
        kind = choice(s, "type", w, LEAST_ALLOCATED, (LEAST_ALLOCATED, MOST_ALLOCATED))
        resources = _resource_specs(s, w, out.scoring_resources)
        if name == "scoringStrategy":
            out.scoring_type = kind
            out.scoring_resources = resources if resources is not None else ()
    return out


PREEMPTION_FIELDS = ("minCandidateNodesPercentage", "minCandidateNodesAbsolute")


def default_preemption_args(raw: Mapping[str, object], where: str) -> DefaultPreemptionArgs:
    check_keys(raw, (*TYPE_FIELDS, *PREEMPTION_FIELDS), where)
    pct = integer(raw, "minCandidateNodesPercentage", where, 10, low=0, high=100)
    absolute = integer(raw, "minCandidateNodesAbsolute", where, 100, low=0)
    if pct == 0 and absolute == 0:
        raise ConfigError(f"{where}: minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be 0")
    return DefaultPreemptionArgs(pct, absolute)


def _wrapped(parse: Callable[[Mapping[str, object]], Any], accepted: tuple[str, ...]
             ) -> Callable[[Mapping[str, object], str], Any]:
    """The plugin modules' own from_dict, with kube's strict field check and the field path in errors."""
    def run(raw: Mapping[str, object], where: str) -> Any:
        check_keys(raw, (*TYPE_FIELDS, *accepted), where)
        try:
            return parse(raw)
        except ConfigError:
            raise
        except InvalidInput as e:
            raise ConfigError(f"{where}: {e}") from None
    return run


def _fitplus(raw: Mapping[str, object]) -> FitPlusArgs:
    res = raw.get("resources")
    if isinstance(res, Mapping):
        for name, spec in res.items():
            w = f"resources.{name}"
            check_keys(mapping(spec, w), ("type", "weight"), w)
            if isinstance(spec, Mapping) and isinstance(spec.get("weight"), int):
                check_range(spec["weight"], f"{w}.weight", 0, None)
    return FitPlusArgs.from_dict(raw)


LOADAWARE_FIELDS = ("filterExpiredNodeMetrics", "nodeMetricExpirationSeconds", "enableScheduleWhenNodeMetricsExpired",
                    "resourceWeights", "dominantResourceWeight", "usageThresholds", "prodUsageThresholds",
                    "prodUsageIncludeSys", "scoreAccordingProdUsage", "estimator", "estimatedScalingFactors",
                    "estimatedSecondsAfterPodScheduled", "estimatedSecondsAfterInitialized",
                    "allowCustomizeEstimation", "aggregated", "supportedResources")


def _loadaware(raw: Mapping[str, object]) -> LoadAwareArgs:
    estimator = raw.get("estimator")
    if estimator not in (None, "", "defaultEstimator"):
        raise ConfigError(f"estimator: {estimator!r} is not supported (accepted: defaultEstimator)")
    return LoadAwareArgs.from_dict({k: v for k, v in raw.items() if k != "estimator"})


@dataclass(frozen=True)
class ArgsType:
    kind: str  # the args' `kind`
    fields: tuple[str, ...]  # its JSON field names (TypeMeta aside)
    parse: Callable[[Mapping[str, object], str], Any]  # (raw args, field path) → typed args; raises ConfigError


ARGS: dict[str, ArgsType] = {
    "LoadAwareScheduling": ArgsType("LoadAwareSchedulingArgs", LOADAWARE_FIELDS,
                                    _wrapped(_loadaware, LOADAWARE_FIELDS)),
    "NodeResourcesFitPlus": ArgsType("NodeResourcesFitPlusArgs", ("resources",), _wrapped(_fitplus, ("resources",))),
    "ScarceResourceAvoidance": ArgsType("ScarceResourceAvoidanceArgs", ("resources",),
                                        _wrapped(ScarceArgs.from_dict, ("resources",))),
    "DeviceShare": ArgsType("DeviceShareArgs", DEVICESHARE_FIELDS, device_share_args),
    "Coscheduling": ArgsType("CoschedulingArgs", COSCHEDULING_FIELDS, coscheduling_args),
    "ElasticQuota": ArgsType("ElasticQuotaArgs", ELASTICQUOTA_FIELDS, elastic_quota_args),
    "Reservation": ArgsType("ReservationArgs", RESERVATION_FIELDS, reservation_args),
    "NodeResourcesFit": ArgsType("NodeResourcesFitArgs", FIT_FIELDS, node_resources_fit_args),
    "NodeResourcesBalancedAllocation": ArgsType("NodeResourcesBalancedAllocationArgs", ("resources",),
                                                balanced_allocation_args),
    "DefaultPreemption": ArgsType("DefaultPreemptionArgs", PREEMPTION_FIELDS, default_preemption_args),
    "NodeNUMAResource": ArgsType("NodeNUMAResourceArgs", NUMA_FIELDS, node_numa_resource_args),
    "NodeAffinity": ArgsType("NodeAffinityArgs", ("addedAffinity",), node_affinity_args),
    "InterPodAffinity": ArgsType("InterPodAffinityArgs", INTER_POD_AFFINITY_FIELDS, inter_pod_affinity_args),
    "PodTopologySpread": ArgsType("PodTopologySpreadArgs", SPREAD_FIELDS, pod_topology_spread_args),
}


def defaults(name: str) -> Any:
    """The typed args a plugin gets when the file gives none (upstream's SetDefaults_* on an empty object)."""
    entry = ARGS.get(name)
    return entry.parse({}, f"pluginConfig[{name}].args") if entry else None
