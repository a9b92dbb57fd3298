"""A merged NodeSLO spec (JSON) as the frozen NodeSLOSpec the planners take; upstream's defaults in the same form."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from apis.slo.defaults import default_nodeslo_spec
from apis.slo.types import (
    CPUQOS,
    BlkioQOS,
    BlockCfg,
    CgroupPath,
    CPUBurstConfig,
    CPUBurstStrategy,
    HostApplication,
    IOCfg,
    MemoryQOS,
    NetworkQOS,
    NodeSLOSpec,
    ResctrlQOS,
    ResourceQOS,
    ResourceQOSPolicies,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)

T = TypeVar("T")
_IO_FIELDS = ("readIOPS", "writeIOPS", "readBPS", "writeBPS", "ioWeightPercent", "readLatency", "writeLatency",
              "readLatencyPercent", "writeLatencyPercent", "enableUserModel", "modelReadBPS", "modelWriteBPS",
              "modelReadSeqIOPS", "modelWriteSeqIOPS", "modelReadRandIOPS", "modelWriteRandIOPS")


def spec_from_merged(merged: Mapping[str, object]) -> NodeSLOSpec:
    """The typed form of a merged spec (apis.slo.decode.merge_nodeslo_spec's result).

    Total: a field of the wrong JSON type (only a spec that was neither validated nor merged has one) reads as the
    dataclass default, so this never raises."""
    return NodeSLOSpec(
        resource_used_threshold_with_be=_threshold(_obj(merged.get("resourceUsedThresholdWithBE"))),
        resource_qos_strategy=_strategy(_obj(merged.get("resourceQOSStrategy"))),
        cpu_burst_strategy=_burst(_obj(merged.get("cpuBurstStrategy"))),
        system_strategy=_system(_obj(merged.get("systemStrategy"))),
        host_applications=tuple(_host_app(a) for a in _objects(merged.get("hostApplications"))),
        extensions=dict(_obj(merged.get("extensions"))),
    )


def default_spec() -> NodeSLOSpec:
    """DefaultNodeSLOSpecConfig as it is, before a received spec's merge turns disabled blocks into "None" values
    (memory QoS `policy: auto` takes a class's default values from here)."""
    return spec_from_merged(default_nodeslo_spec())


def _threshold(raw: Mapping[str, object]) -> ResourceThresholdStrategy:
    d = ResourceThresholdStrategy()
    return ResourceThresholdStrategy(
        enable=_bool(raw, "enable", d.enable),
        cpu_suppress_threshold_percent=_int(raw, "cpuSuppressThresholdPercent", d.cpu_suppress_threshold_percent),
        cpu_suppress_min_percent=_opt_int(raw, "cpuSuppressMinPercent"),
        cpu_suppress_policy=_str(raw, "cpuSuppressPolicy", d.cpu_suppress_policy),
        memory_evict_threshold_percent=_opt_int(raw, "memoryEvictThresholdPercent"),
        memory_evict_lower_percent=_opt_int(raw, "memoryEvictLowerPercent"),
        memory_allocatable_evict_threshold_percent=_opt_int(raw, "memoryAllocatableEvictThresholdPercent"),
        memory_allocatable_evict_lower_percent=_opt_int(raw, "memoryAllocatableEvictLowerPercent"),
        cpu_evict_be_satisfaction_upper_percent=_opt_int(raw, "cpuEvictBESatisfactionUpperPercent"),
        cpu_evict_be_satisfaction_lower_percent=_opt_int(raw, "cpuEvictBESatisfactionLowerPercent"),
        cpu_evict_be_usage_threshold_percent=_opt_int(raw, "cpuEvictBEUsageThresholdPercent"),
        cpu_evict_time_window_seconds=_opt_int(raw, "cpuEvictTimeWindowSeconds"),
        cpu_evict_threshold_percent=_opt_int(raw, "cpuEvictThresholdPercent"),
        cpu_evict_lower_percent=_opt_int(raw, "cpuEvictLowerPercent"),
        cpu_allocatable_evict_threshold_percent=_opt_int(raw, "cpuAllocatableEvictThresholdPercent"),
        cpu_allocatable_evict_lower_percent=_opt_int(raw, "cpuAllocatableEvictLowerPercent"),
        cpu_evict_policy=_str(raw, "cpuEvictPolicy", d.cpu_evict_policy),
        evict_enabled_priority_threshold=_opt_int(raw, "evictEnabledPriorityThreshold"),
        allocatable_evict_priority_threshold=_opt_int(raw, "allocatableEvictPriorityThreshold"),
    )


def _strategy(raw: Mapping[str, object]) -> ResourceQOSStrategy:
    policies = _obj(raw.get("policies"))
    d = ResourceQOSPolicies()
    return ResourceQOSStrategy(
        policies=ResourceQOSPolicies(_str(policies, "cpuPolicy", d.cpu_policy) or d.cpu_policy,
                                     _str(policies, "netQOSPolicy", d.net_qos_policy)),
        lsr_class=_resource_qos(_obj(raw.get("lsrClass"))),
        ls_class=_resource_qos(_obj(raw.get("lsClass"))),
        be_class=_resource_qos(_obj(raw.get("beClass"))),
        system_class=_resource_qos(_obj(raw.get("systemClass"))),
        cgroup_root=_resource_qos(_obj(raw.get("cgroupRoot"))),
    )


def _resource_qos(raw: Mapping[str, object]) -> ResourceQOS:
    return ResourceQOS(
        cpu_qos=_block(raw, "cpuQOS", _cpu_qos, CPUQOS()),
        memory_qos=_block(raw, "memoryQOS", _memory_qos, MemoryQOS()),
        blkio_qos=_block(raw, "blkioQOS", _blkio_qos, BlkioQOS()),
        resctrl_qos=_block(raw, "resctrlQOS", _resctrl_qos, ResctrlQOS()),
        network_qos=_block(raw, "networkQOS", _network_qos, NetworkQOS()),
    )


def _block(raw: Mapping[str, object], key: str, decode: Callable[[Mapping[str, object]], T], none: T) -> T:
    value = raw.get(key)
    return decode(value) if isinstance(value, dict) else none


def _cpu_qos(raw: Mapping[str, object]) -> CPUQOS:
    d = CPUQOS()
    return CPUQOS(_bool(raw, "enable", d.enable), _int(raw, "groupIdentity", d.group_identity),
                  _int(raw, "schedIdle", d.sched_idle), _bool(raw, "coreExpeller", d.core_expeller))


def _memory_qos(raw: Mapping[str, object]) -> MemoryQOS:
    d = MemoryQOS()
    return MemoryQOS(
        enable=_bool(raw, "enable", d.enable),
        min_limit_percent=_int(raw, "minLimitPercent", d.min_limit_percent),
        low_limit_percent=_int(raw, "lowLimitPercent", d.low_limit_percent),
        throttling_percent=_int(raw, "throttlingPercent", d.throttling_percent),
        wmark_ratio=_int(raw, "wmarkRatio", d.wmark_ratio),
        wmark_scale_permill=_int(raw, "wmarkScalePermill", d.wmark_scale_permill),
        wmark_min_adj=_int(raw, "wmarkMinAdj", d.wmark_min_adj),
        priority_enable=_int(raw, "priorityEnable", d.priority_enable),
        priority=_int(raw, "priority", d.priority),
        oom_kill_group=_int(raw, "oomKillGroup", d.oom_kill_group),
        page_cache_enable=_opt_bool(raw, "pageCacheEnable"),
        page_cache_limit_percent=_opt_int(raw, "pageCacheLimitPercent"),
        page_cache_limit_size=_opt_int(raw, "pageCacheLimitSize"),
        page_cache_reclaim_sync=_opt_bool(raw, "pageCacheReclaimSync"),
    )


def _blkio_qos(raw: Mapping[str, object]) -> BlkioQOS:
    return BlkioQOS(_bool(raw, "enable", False), tuple(_block_cfg(b) for b in _objects(raw.get("blocks"))))


def _block_cfg(raw: Mapping[str, object]) -> BlockCfg:
    io = _obj(raw.get("ioCfg"))
    fields: list[tuple[str, int | bool]] = []
    for key in _IO_FIELDS:
        value = io.get(key)
        if key == "enableUserModel":
            if isinstance(value, bool):
                fields.append((key, value))
        elif isinstance(value, int) and not isinstance(value, bool):
            fields.append((key, value))
    return BlockCfg(_str(raw, "name", ""), _str(raw, "type", ""), IOCfg(tuple(fields)))


def _resctrl_qos(raw: Mapping[str, object]) -> ResctrlQOS:
    d = ResctrlQOS()
    return ResctrlQOS(_bool(raw, "enable", d.enable), _int(raw, "catRangeStartPercent", d.cat_range_start_percent),
                      _int(raw, "catRangeEndPercent", d.cat_range_end_percent),
                      _int(raw, "mbaPercent", d.mba_percent))


def _network_qos(raw: Mapping[str, object]) -> NetworkQOS:
    return NetworkQOS(_bool(raw, "enable", False), _intstr(raw, "ingressRequest"), _intstr(raw, "ingressLimit"),
                      _intstr(raw, "egressRequest"), _intstr(raw, "egressLimit"))


def _burst(raw: Mapping[str, object]) -> CPUBurstStrategy:
    d = CPUBurstConfig()
    return CPUBurstStrategy(
        CPUBurstConfig(
            policy=_str(raw, "policy", d.policy) or d.policy,
            cpu_burst_percent=_int(raw, "cpuBurstPercent", d.cpu_burst_percent),
            cfs_quota_burst_percent=_int(raw, "cfsQuotaBurstPercent", d.cfs_quota_burst_percent),
            cfs_quota_burst_period_seconds=_int(raw, "cfsQuotaBurstPeriodSeconds", d.cfs_quota_burst_period_seconds),
        ),
        share_pool_threshold_percent=_int(raw, "sharePoolThresholdPercent",
                                          CPUBurstStrategy().share_pool_threshold_percent),
    )


def _system(raw: Mapping[str, object]) -> SystemStrategy:
    d = SystemStrategy()
    features = _obj(raw.get("schedFeatures"))
    bandwidth = raw.get("totalNetworkBandwidth")
    return SystemStrategy(
        min_free_kbytes_factor=_int(raw, "minFreeKbytesFactor", d.min_free_kbytes_factor),
        watermark_scale_factor=_int(raw, "watermarkScaleFactor", d.watermark_scale_factor),
        memcg_reap_background=_int(raw, "memcgReapBackGround", d.memcg_reap_background),
        sched_group_identity_enabled=_opt_int(raw, "schedGroupIdentityEnabled"),
        sched_idle_saver_wmark=_opt_int(raw, "schedIdleSaverWmark"),
        sched_features=tuple(sorted((str(k), v) for k, v in features.items() if isinstance(v, bool))),
        page_cache_limit_enabled=_opt_int(raw, "pageCacheLimitEnabled"),
        total_network_bandwidth=str(bandwidth) if isinstance(bandwidth, str | int) and not isinstance(
            bandwidth, bool) else d.total_network_bandwidth,
    )


def _host_app(raw: Mapping[str, object]) -> HostApplication:
    path = raw.get("cgroupPath")
    strategy = raw.get("strategy")
    return HostApplication(
        name=_str(raw, "name", ""), priority=_str(raw, "priority", ""), qos=_str(raw, "qos", ""),
        cgroup_path=CgroupPath(_str(path, "base", ""), _str(path, "parentDir", ""), _str(path, "relativePath", ""))
        if isinstance(path, dict) else None,
        strategy=dict(strategy) if isinstance(strategy, dict) else None,
    )


# ---- reading well-typed JSON fields ----------------------------------------------------------------------------


def _obj(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _objects(value: object) -> list[Mapping[str, object]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _opt_int(raw: Mapping[str, object], key: str) -> int | None:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int(raw: Mapping[str, object], key: str, default: int) -> int:
    value = _opt_int(raw, key)
    return default if value is None else value


def _opt_bool(raw: Mapping[str, object], key: str) -> bool | None:
    value = raw.get(key)
    return value if isinstance(value, bool) else None


def _bool(raw: Mapping[str, object], key: str, default: bool) -> bool:
    value = _opt_bool(raw, key)
    return default if value is None else value


def _str(raw: Mapping[str, object], key: str, default: str) -> str:
    value = raw.get(key)
    return value if isinstance(value, str) else default


def _intstr(raw: Mapping[str, object], key: str) -> int | str:
    value = raw.get(key)
    return value if isinstance(value, int | str) and not isinstance(value, bool) else 0


DEFAULT_SPEC = default_spec()  # after the helpers it is built with
