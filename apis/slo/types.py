"""NodeSLOSpec as frozen dataclasses: the merged spec the agent acts on (upstream apis/slo/v1alpha1 nodeslo_types.go).

Field defaults are what a block left out of the merged spec means to the planners (upstream's "None" values: the
merge always fills the QoS classes, so they show only where upstream has no default, e.g. `cgroupRoot`'s CPU QoS).
Built by apis.slo.config.spec_from_merged from a merged spec; nothing here validates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# QoS classes as NodeSLO names them (resourceQOSStrategy keys), by koordinator QoS class; LSE pods take LSR's.
CLASS_KEYS: Mapping[str, str] = {"LSE": "lsrClass", "LSR": "lsrClass", "LS": "lsClass", "BE": "beClass",
                                 "SYSTEM": "systemClass"}

CPU_POLICY_GROUP_IDENTITY = "groupIdentity"
CPU_POLICY_CORE_SCHED = "coreSched"
CPU_SUPPRESS_CPUSET = "cpuset"
CPU_SUPPRESS_CFS_QUOTA = "cfsQuota"
CPU_EVICT_BY_REAL_LIMIT = "evictByRealLimit"
CPU_EVICT_BY_ALLOCATABLE = "evictByAllocatable"
CPU_BURST_NONE = "none"
CPU_BURST_ONLY = "cpuBurstOnly"
CFS_QUOTA_BURST_ONLY = "cfsQuotaBurstOnly"
CPU_BURST_AUTO = "auto"


@dataclass(frozen=True)
class ResourceThresholdStrategy:
    """`resourceUsedThresholdWithBE`: BE CPU suppress and the eviction strategies. None: the field is not set."""

    enable: bool = False
    cpu_suppress_threshold_percent: int = 65
    cpu_suppress_min_percent: int | None = None
    cpu_suppress_policy: str = CPU_SUPPRESS_CPUSET
    memory_evict_threshold_percent: int | None = 70
    memory_evict_lower_percent: int | None = None
    memory_allocatable_evict_threshold_percent: int | None = None
    memory_allocatable_evict_lower_percent: int | None = None
    cpu_evict_be_satisfaction_upper_percent: int | None = None
    cpu_evict_be_satisfaction_lower_percent: int | None = None
    cpu_evict_be_usage_threshold_percent: int | None = None
    cpu_evict_time_window_seconds: int | None = None
    cpu_evict_threshold_percent: int | None = None
    cpu_evict_lower_percent: int | None = None
    cpu_allocatable_evict_threshold_percent: int | None = None
    cpu_allocatable_evict_lower_percent: int | None = None
    cpu_evict_policy: str = CPU_EVICT_BY_REAL_LIMIT
    evict_enabled_priority_threshold: int | None = None
    allocatable_evict_priority_threshold: int | None = None


@dataclass(frozen=True)
class CPUQOS:
    enable: bool = False
    group_identity: int = 0
    sched_idle: int = 0
    core_expeller: bool = False


@dataclass(frozen=True)
class MemoryQOS:
    enable: bool = False
    min_limit_percent: int = 0
    low_limit_percent: int = 0
    throttling_percent: int = 0
    wmark_ratio: int = 0
    wmark_scale_permill: int = 50
    wmark_min_adj: int = 0
    priority_enable: int = 0
    priority: int = 0
    oom_kill_group: int = 0
    page_cache_enable: bool | None = None
    page_cache_limit_percent: int | None = None
    page_cache_limit_size: int | None = None
    page_cache_reclaim_sync: bool | None = None

    def knobs(self) -> dict[str, int]:
        """The nine cgroup knobs by their JSON names (what memory QoS writes from)."""
        return {
            "minLimitPercent": self.min_limit_percent, "lowLimitPercent": self.low_limit_percent,
            "throttlingPercent": self.throttling_percent, "wmarkRatio": self.wmark_ratio,
            "wmarkScalePermill": self.wmark_scale_permill, "wmarkMinAdj": self.wmark_min_adj,
            "priorityEnable": self.priority_enable, "priority": self.priority, "oomKillGroup": self.oom_kill_group,
        }


@dataclass(frozen=True)
class IOCfg:
    """A block's `ioCfg`: only the fields set, as (JSON name, value) pairs in the CRD's order."""

    fields: tuple[tuple[str, int | bool], ...] = ()


@dataclass(frozen=True)
class BlockCfg:
    name: str = ""
    type: str = ""  # device | volumegroup | podvolume; "" when unset
    io_cfg: IOCfg = IOCfg()


@dataclass(frozen=True)
class BlkioQOS:
    enable: bool = False
    blocks: tuple[BlockCfg, ...] = ()


@dataclass(frozen=True)
class ResctrlQOS:
    enable: bool = False
    cat_range_start_percent: int = 0
    cat_range_end_percent: int = 100
    mba_percent: int = 100


@dataclass(frozen=True)
class NetworkQOS:
    enable: bool = False
    ingress_request: int | str = 0
    ingress_limit: int | str = 0
    egress_request: int | str = 0
    egress_limit: int | str = 0


@dataclass(frozen=True)
class ResourceQOS:
    """One QoS class's (or the cgroup root's) blocks."""

    cpu_qos: CPUQOS = CPUQOS()
    memory_qos: MemoryQOS = MemoryQOS()
    blkio_qos: BlkioQOS = BlkioQOS()
    resctrl_qos: ResctrlQOS = ResctrlQOS()
    network_qos: NetworkQOS = NetworkQOS()


@dataclass(frozen=True)
class ResourceQOSPolicies:
    cpu_policy: str = CPU_POLICY_GROUP_IDENTITY  # an unset or empty policy is groupIdentity (groupidentity/rule.go)
    net_qos_policy: str = "tc"


@dataclass(frozen=True)
class ResourceQOSStrategy:
    policies: ResourceQOSPolicies = ResourceQOSPolicies()
    lsr_class: ResourceQOS = ResourceQOS()
    ls_class: ResourceQOS = ResourceQOS()
    be_class: ResourceQOS = ResourceQOS()
    system_class: ResourceQOS = ResourceQOS()
    cgroup_root: ResourceQOS = ResourceQOS()

    def for_class(self, koord_qos: str) -> ResourceQOS | None:
        """The class block of a koordinator QoS class (LSE takes LSR's, see CLASS_KEYS); None for a class NodeSLO has
        none for."""
        if koord_qos in ("LSE", "LSR"):
            return self.lsr_class
        if koord_qos == "LS":
            return self.ls_class
        if koord_qos == "BE":
            return self.be_class
        return self.system_class if koord_qos == "SYSTEM" else None


@dataclass(frozen=True)
class CPUBurstConfig:
    """CPUBurstConfig: the node's (`cpuBurstStrategy`) or, merged over it, a pod's `koordinator.sh/cpuBurst`."""

    policy: str = CPU_BURST_NONE
    cpu_burst_percent: int = 1000
    cfs_quota_burst_percent: int = 300
    cfs_quota_burst_period_seconds: int = -1

    @property
    def cpu_burst(self) -> bool:
        """cpuBurstEnabled: the static cfs_burst_us."""
        return self.policy in (CPU_BURST_ONLY, CPU_BURST_AUTO)

    @property
    def cfs_quota_burst(self) -> bool:
        """cfsQuotaBurstEnabled: the scaled cfs quota."""
        return self.policy in (CFS_QUOTA_BURST_ONLY, CPU_BURST_AUTO)


@dataclass(frozen=True)
class CPUBurstStrategy:
    config: CPUBurstConfig = CPUBurstConfig()
    share_pool_threshold_percent: int = 50


@dataclass(frozen=True)
class SystemStrategy:
    min_free_kbytes_factor: int = 100
    watermark_scale_factor: int = 150
    memcg_reap_background: int = 0
    sched_group_identity_enabled: int | None = None
    sched_idle_saver_wmark: int | None = None
    sched_features: tuple[tuple[str, bool], ...] = ()  # sorted by name
    page_cache_limit_enabled: int | None = None
    total_network_bandwidth: str = "0"  # a quantity, canonical form


@dataclass(frozen=True)
class CgroupPath:
    base: str = ""  # CgroupRoot | Kubepods | KubepodsBurstable | KubepodsBesteffort; "" when unset
    parent_dir: str = ""
    relative_path: str = ""


@dataclass(frozen=True)
class HostApplication:
    """A process outside Kubernetes the agent accounts and tunes (`hostApplications[]`)."""

    name: str = ""
    priority: str = ""
    qos: str = ""
    cgroup_path: CgroupPath | None = None  # None: the default dir by QoS (host-latency-sensitive, host-best-effort)
    strategy: Mapping[str, object] | None = None  # opaque: no planner reads it


@dataclass(frozen=True)
class NodeSLOSpec:
    resource_used_threshold_with_be: ResourceThresholdStrategy = ResourceThresholdStrategy()
    resource_qos_strategy: ResourceQOSStrategy = ResourceQOSStrategy()
    cpu_burst_strategy: CPUBurstStrategy = CPUBurstStrategy()
    system_strategy: SystemStrategy = SystemStrategy()
    host_applications: tuple[HostApplication, ...] = ()
    # opaque to the agent (upstream registers no extension); kept for `koordlet plan` and future plugins
    extensions: Mapping[str, object] = field(default_factory=dict)
