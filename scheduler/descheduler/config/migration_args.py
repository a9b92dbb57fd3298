"""MigrationControllerArgs (descheduler/v1alpha2): upstream's fields, defaults and validation.

Upstream: apis/config/v1alpha2/types_pluginargs.go, defaults.go (SetDefaults_MigrationControllerArgs),
validation/validation_pluginargs.go. The MigrationController (its own package) gives them their meaning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from apis.core.labelselector import LabelSelector
from apis.scheduling.migration import MODE_EVICT_DIRECTLY, MODE_RESERVATION_FIRST
from scheduler.descheduler.config.common import (
    INT32,
    ConfigError,
    Namespaces,
    PriorityThreshold,
    Problems,
    args_object,
    boolean,
    check_keys,
    duration,
    integer,
    mapping,
    member,
    namespaces,
    priority_threshold,
    selector,
    string,
    string_list,
)

KIND = "MigrationControllerArgs"
POLICY_EVICTION = "Eviction"
POLICY_DELETE = "Delete"
POLICY_SOFT_EVICTION = "SoftEviction"
EVICTION_POLICIES = (POLICY_EVICTION, POLICY_DELETE, POLICY_SOFT_EVICTION)
LIMIT_WORKLOAD = "workload"
LIMIT_NAMESPACE = "namespace"

GATE_MAX_UNAVAILABLE_PER_WORKLOAD = "MaxUnavailablePerWorkload"
GATE_MAX_MIGRATING_PER_WORKLOAD = "MaxMigratingPerWorkload"
GATE_MAX_MIGRATING_PER_NODE = "MaxMigratingPerNode"
GATE_MAX_MIGRATING_PER_NAMESPACE = "MaxMigratingPerNamespace"
GATE_MAX_MIGRATING_GLOBALLY = "MaxMigratingGlobally"
GATE_EXPECTED_REPLICAS = "ExpectedReplicas"
GATE_PVC = "PVC"
GATE_BARE_PODS = "BarePods"
GATE_LOCAL_STORAGE = "LocalStorage"
GATE_SYSTEM_CRITICAL = "SystemCritical"
GATE_PRIORITY_THRESHOLD = "PriorityThreshold"
GATE_LABEL_SELECTOR = "LabelSelector"
GATE_NAMESPACES = "Namespaces"
GATE_NODE_FIT = "NodeFit"
EVICTION_GATES = (GATE_MAX_UNAVAILABLE_PER_WORKLOAD, GATE_MAX_MIGRATING_PER_WORKLOAD, GATE_MAX_MIGRATING_PER_NODE,
                  GATE_MAX_MIGRATING_PER_NAMESPACE, GATE_MAX_MIGRATING_GLOBALLY, GATE_EXPECTED_REPLICAS, GATE_PVC,
                  GATE_BARE_PODS, GATE_LOCAL_STORAGE, GATE_SYSTEM_CRITICAL, GATE_PRIORITY_THRESHOLD,
                  GATE_LABEL_SELECTOR, GATE_NAMESPACES, GATE_NODE_FIT)

DEFAULT_MAX_CONCURRENT_RECONCILES = 1
DEFAULT_MAX_MIGRATING_PER_NODE = 2
DEFAULT_JOB_TTL = 300.0
DEFAULT_SCHEDULER_NAMES = ("koord-scheduler",)
DEFAULT_EVICT_QPS = 10.0
DEFAULT_EVICT_BURST = 1
DEFAULT_OBJECT_LIMITER_DURATION = 300.0
DEFAULT_ARBITRATION_INTERVAL = 0.5

_FIELDS = ("dryRun", "maxConcurrentReconciles", "evictFailedBarePods", "evictAllBarePods", "evictLocalStoragePods",
           "evictSystemCriticalPods", "ignorePvcPods", "priorityThreshold", "labelSelector", "namespaces", "nodeFit",
           "nodeSelector", "skipEvictionGates", "maxMigratingGlobally", "maxMigratingPerNode",
           "maxMigratingPerNamespace", "maxMigratingPerWorkload", "maxUnavailablePerWorkload",
           "skipCheckExpectedReplicas", "objectLimiters", "defaultJobMode", "defaultJobTTL", "schedulerNames",
           "evictQPS", "evictBurst", "evictionPolicy", "defaultDeleteOptions", "arbitrationArgs")
_DELETE_OPTIONS = ("kind", "apiVersion", "gracePeriodSeconds", "preconditions", "orphanDependents",
                   "propagationPolicy", "dryRun", "ignoreStoreReadErrorWithClusterBreakingPotential")
_INT_OR_PERCENT = re.compile(r"^(-?[0-9]+)%$")

IntOrPercent = int | str  # intstr.IntOrString: 3 or "30%"


@dataclass
class ObjectLimiter:
    """MigrationObjectLimiter: at most `max_migrating` (int or "N%"; None: maxMigratingPerWorkload) per
    `duration` seconds, `burst` tokens (0: 1)."""

    duration: float = 0.0
    max_migrating: IntOrPercent | None = None
    burst: int = 0


@dataclass
class ArbitrationArgs:
    enabled: bool = True  # never read upstream
    interval: float = DEFAULT_ARBITRATION_INTERVAL


@dataclass
class MigrationControllerArgs:
    """After SetDefaults_MigrationControllerArgs."""

    dry_run: bool = False
    max_concurrent_reconciles: int = DEFAULT_MAX_CONCURRENT_RECONCILES
    evict_failed_bare_pods: bool = False
    evict_all_bare_pods: bool = False
    evict_local_storage_pods: bool = False
    evict_system_critical_pods: bool = False
    ignore_pvc_pods: bool = False
    priority_threshold: PriorityThreshold | None = None
    label_selector: LabelSelector | None = None
    namespaces: Namespaces | None = None
    node_fit: bool = False
    node_selector: str = ""
    skip_eviction_gates: list[str] = field(default_factory=list)
    max_migrating_globally: int | None = None
    max_migrating_per_node: int | None = DEFAULT_MAX_MIGRATING_PER_NODE
    max_migrating_per_namespace: int | None = None
    max_migrating_per_workload: IntOrPercent | None = None
    max_unavailable_per_workload: IntOrPercent | None = None
    skip_check_expected_replicas: bool | None = None
    object_limiters: dict[str, ObjectLimiter] = field(
        default_factory=lambda: {LIMIT_WORKLOAD: ObjectLimiter(duration=DEFAULT_OBJECT_LIMITER_DURATION)})
    default_job_mode: str = MODE_RESERVATION_FIRST
    default_job_ttl: float = DEFAULT_JOB_TTL
    scheduler_names: list[str] = field(default_factory=lambda: list(DEFAULT_SCHEDULER_NAMES))
    evict_qps: float = DEFAULT_EVICT_QPS
    evict_burst: int = DEFAULT_EVICT_BURST
    eviction_policy: str = POLICY_EVICTION
    default_delete_options: Mapping[str, object] | None = None
    arbitration: ArbitrationArgs = field(default_factory=ArbitrationArgs)


def default_args() -> MigrationControllerArgs:
    return decode_migration_args({}, "args")


def decode_migration_args(raw: object, where: str) -> MigrationControllerArgs:
    m = args_object(raw, where, _FIELDS)
    a = MigrationControllerArgs(
        dry_run=boolean(m, "dryRun", where),
        evict_failed_bare_pods=boolean(m, "evictFailedBarePods", where),
        evict_all_bare_pods=boolean(m, "evictAllBarePods", where),
        evict_local_storage_pods=boolean(m, "evictLocalStoragePods", where),
        evict_system_critical_pods=boolean(m, "evictSystemCriticalPods", where),
        ignore_pvc_pods=boolean(m, "ignorePvcPods", where),
        priority_threshold=priority_threshold(m, "priorityThreshold", where),
        label_selector=selector(m, "labelSelector", where),
        namespaces=namespaces(m, "namespaces", where),
        node_fit=boolean(m, "nodeFit", where),
        node_selector=string(m, "nodeSelector", where),
        skip_eviction_gates=string_list(m, "skipEvictionGates", where),
        max_migrating_globally=integer(m, "maxMigratingGlobally", where, INT32),
        max_migrating_per_namespace=integer(m, "maxMigratingPerNamespace", where, INT32),
        max_migrating_per_workload=_int_or_string(m, "maxMigratingPerWorkload", where),
        max_unavailable_per_workload=_int_or_string(m, "maxUnavailablePerWorkload", where),
        skip_check_expected_replicas=boolean(m, "skipCheckExpectedReplicas", where, None),
        default_job_mode=string(m, "defaultJobMode", where) or MODE_RESERVATION_FIRST,
        eviction_policy=string(m, "evictionPolicy", where) or POLICY_EVICTION,
        scheduler_names=string_list(m, "schedulerNames", where) or list(DEFAULT_SCHEDULER_NAMES),
    )
    reconciles = integer(m, "maxConcurrentReconciles", where, INT32)
    a.max_concurrent_reconciles = DEFAULT_MAX_CONCURRENT_RECONCILES if reconciles is None else reconciles
    per_node = integer(m, "maxMigratingPerNode", where, INT32)
    a.max_migrating_per_node = DEFAULT_MAX_MIGRATING_PER_NODE if per_node is None else per_node
    ttl = duration(m, "defaultJobTTL", where)
    a.default_job_ttl = DEFAULT_JOB_TTL if ttl is None else ttl
    a.evict_qps = _evict_qps(m, where)
    burst = integer(m, "evictBurst", where, INT32)
    a.evict_burst = DEFAULT_EVICT_BURST if burst is None else burst
    limiters = _object_limiters(m, where)
    if limiters:
        a.object_limiters = limiters
    options = member(m, "defaultDeleteOptions", where, _DELETE_OPTIONS)
    if options is not None:
        a.default_delete_options = dict(options[0])
    arbitration = member(m, "arbitrationArgs", where, ("enabled", "interval"))
    if arbitration is not None:
        am, at = arbitration
        interval = duration(am, "interval", at)
        a.arbitration = ArbitrationArgs(boolean(am, "enabled", at),
                                        DEFAULT_ARBITRATION_INTERVAL if interval is None else interval)
    validate(a, where)
    return a


def _int_or_string(m: Mapping[str, object], name: str, where: str) -> IntOrPercent | None:
    v = m.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ConfigError(f"{where}.{name}: must be an integer or a percentage string such as \"10%\", got {v!r}")
    return v


def _evict_qps(m: Mapping[str, object], where: str) -> float:
    """Float64OrString: a number, or a string read as a float (one that does not parse reads 0)."""
    v = m.get("evictQPS")
    if v is None:
        return DEFAULT_EVICT_QPS
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ConfigError(f"{where}.evictQPS: must be a number or a numeric string, got {v!r}")
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return 0.0
    return float(v)


def _object_limiters(m: Mapping[str, object], where: str) -> dict[str, ObjectLimiter]:
    raw = m.get("objectLimiters")
    if raw is None:
        return {}
    at = f"{where}.objectLimiters"
    out = {}
    for key, value in mapping(raw, at).items():
        if key not in (LIMIT_WORKLOAD, LIMIT_NAMESPACE):
            raise ConfigError(f"{at}.{key}: unknown object limiter; accepted: {LIMIT_WORKLOAD}, {LIMIT_NAMESPACE}")
        k_at = f"{at}.{key}"
        lm = mapping(value, k_at)
        check_keys(lm, ("duration", "maxMigrating", "burst"), k_at)
        out[str(key)] = ObjectLimiter(duration(lm, "duration", k_at) or 0.0, _int_or_string(lm, "maxMigrating", k_at),
                                      integer(lm, "burst", k_at, (-(2**63), 2**63 - 1)) or 0)
    return out


def scaled_int_or_percent(value: IntOrPercent, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent; ValueError for a string that is not "<int>%"."""
    if isinstance(value, int):
        return value
    match = _INT_OR_PERCENT.match(value)
    if match is None:
        raise ValueError(f"invalid value for IntOrString: invalid type: string is not a percentage: {value!r}")
    scaled = int(match.group(1)) * total
    return -(-scaled // 100) if round_up else scaled // 100


def validate(a: MigrationControllerArgs, where: str) -> None:
    """ValidateMigrationControllerArgs."""
    p = Problems()
    for i, gate in enumerate(a.skip_eviction_gates):
        if gate not in EVICTION_GATES:
            p.invalid(f"{where}.skipEvictionGates[{i}]", gate, "unknown eviction gate")
    for name, value in (("maxMigratingGlobally", a.max_migrating_globally),
                        ("maxMigratingPerNamespace", a.max_migrating_per_namespace),
                        ("maxMigratingPerNode", a.max_migrating_per_node)):
        if value is not None and value < 0:
            p.invalid(f"{where}.{name}", value, f"{name} should be greater or equal 0")
    for name, iv in (("maxMigratingPerWorkload", a.max_migrating_per_workload),
                     ("maxUnavailablePerWorkload", a.max_unavailable_per_workload)):
        if iv is not None:
            try:
                scaled_int_or_percent(iv, 100, True)
            except ValueError as e:
                p.invalid(f"{where}.{name}", iv, f"{name} is invalid, err: {e} ")
    if a.evict_qps <= 0:
        p.invalid(f"{where}.evictQPS", a.evict_qps, "evictQPS must be greater than 0")
    if a.evict_burst <= 0:
        p.invalid(f"{where}.evictBurst", a.evict_burst, "evictBurst must be greater than 0")
    if a.namespaces is not None and a.namespaces.include and a.namespaces.exclude:
        p.invalid(f"{where}.namespaces", "include and exclude", "only one of Include/Exclude namespaces can be set")
    if a.max_concurrent_reconciles < 1:
        p.invalid(f"{where}.maxConcurrentReconciles", a.max_concurrent_reconciles,
                  "maxConcurrentReconciles should be greater than or equal to 1")
    if a.default_job_mode not in (MODE_RESERVATION_FIRST, MODE_EVICT_DIRECTLY):
        p.invalid(f"{where}.defaultJobMode", a.default_job_mode,
                  f"defaultJobMode must be {MODE_RESERVATION_FIRST} or {MODE_EVICT_DIRECTLY}")
    if a.default_job_ttl < 0:
        p.invalid(f"{where}.defaultJobTTL", a.default_job_ttl, "defaultJobTTL should be positive or zero")
    p.raise_first()
