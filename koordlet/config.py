"""Agent configuration: upstream koordlet flag names and defaults, feature gates, and our standalone options."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput
from koordlet.goflag import parse_map_string_bool
from koordlet.host.paths import HostPaths
from koordlet.prediction.server import PredictionConfig

# pkg/features/koordlet_features.go and pkg/koordlet/runtimehooks/config.go: gate → default.
FEATURE_GATES: dict[str, bool] = {
    "AuditEvents": False, "AuditEventsHTTPHandler": False, "BECPUSuppress": True, "BECPUManager": False,
    "BECPUEvict": False, "CPUEvict": False, "CPUAllocatableEvict": False, "BEMemoryEvict": False,
    "MemoryEvict": False, "MemoryAllocatableEvict": False, "CPUBurst": True, "SystemConfig": False,
    "PodResourcesProxy": False, "PerCPUMetric": False, "RdtResctrl": True, "ResctrlCollector": False,
    "CgroupReconcile": False, "NodeTopologyReport": True, "Accelerators": False, "RDMADevices": False,
    "CPICollector": False, "Libpfm4": False, "PSICollector": False, "BlkIOReconcile": False,
    "ColdPageCollector": False, "HugePageReport": False, "HamiCoreVGPUMonitor": False,
    "NodeMetricPromMetrics": False,
    "CPUSchedLatency": True,  # ours (koordlet/schedlat); bcc compiles in a child process
    "GroupIdentity": True, "CPUSetAllocator": True, "BatchResource": True, "GPUEnvInject": False,
    "RDMADeviceInject": False, "CPUNormalization": False, "CoreSched": False, "TerwayQoS": False,
    "TCNetworkQoS": False, "Resctrl": False, "OOMScoreAdj": False,
}


# Upstream's beta gates are the ones on by default; the rest are alpha (AllAlpha / AllBeta set each group).
_BETA = frozenset(g for g, on in FEATURE_GATES.items() if on)
# Gates upstream has whose feature this agent lacks: turning one on is said once at start and in a metric
# (koordlet.absent); tests/test_gates.py checks that no code reads these and that every other gate is read.
UNIMPLEMENTED_GATES: dict[str, str] = {
    "AuditEvents": "no audit log: QoS writes are in `koordlet plan` and /metrics",
    "AuditEventsHTTPHandler": "no audit log, so no /events",
    "CPUEvict": "node-CPU-usage eviction is not implemented",
    "CPUAllocatableEvict": "allocatable-based CPU eviction is not implemented",
    "MemoryEvict": "priority-based memory eviction is not implemented",
    "MemoryAllocatableEvict": "allocatable-based memory eviction is not implemented",
    "SystemConfig": "node sysctls (min_free_kbytes, ...) are not managed",
    "ResctrlCollector": "resctrl LLC/MB is not collected",
    "CPICollector": "no CPI collector (perf counters)",
    "Libpfm4": "no libpfm4 CPI collector",
    "ColdPageCollector": "no cold-page collector",
    "CPUNormalization": "the CPU normalization hook is not implemented",
    "TerwayQoS": "the Terway network QoS hook is not implemented",
    "TCNetworkQoS": "the tc network QoS hook is not implemented",
    "OOMScoreAdj": "the oom_score_adj hook is not implemented",
}


def parse_feature_gates(given: Mapping[str, bool] | str) -> dict[str, bool]:
    """Upstream's defaults with `given` over them (a mapping from -feature-gates, or its `A=true,B=false` text);
    AllAlpha/AllBeta set their group first, named gates win. An unknown gate is InvalidInput (as upstream)."""
    if isinstance(given, str):
        pairs: dict[str, bool] = {}
        try:
            parse_map_string_bool(given, pairs)
        except ValueError as e:
            raise InvalidInput(f"invalid feature gates {given!r}: {e}") from None
        given = pairs
    gates = dict(FEATURE_GATES)
    for group, members in (("AllAlpha", set(FEATURE_GATES) - _BETA), ("AllBeta", _BETA)):
        if group in given:
            gates.update(dict.fromkeys(members, given[group]))
    for name, value in given.items():
        if name in ("AllAlpha", "AllBeta"):
            continue
        if name not in FEATURE_GATES:
            raise InvalidInput(f"unrecognized feature gate: {name}")
        gates[name] = value
    return gates


# containerd/nri pkg/api/plugin.go CheckPluginIndex / CheckPluginName: the runtime refuses anything else.
_NRI_INDEX = re.compile(r"[0-9]{2}")
_NRI_NAME = re.compile(r"[A-Za-z0-9\-_.+]+")


def check_nri_identity(name: str, index: str) -> None:
    """Raise InvalidInput (naming the flag) for a plugin name or index the runtime would refuse at registration."""
    if not _NRI_INDEX.fullmatch(index):
        raise InvalidInput(f"--runtime-hooks-nri-plugin-index {index!r}: must be exactly two digits, e.g. 00")
    if not _NRI_NAME.fullmatch(name):
        raise InvalidInput(f"--runtime-hooks-nri-plugin-name {name!r}: only letters, digits and -_.+ allowed")


@dataclass(frozen=True)
class NriConfig:
    """The NRI runtime-hook flags (pkg/koordlet/runtimehooks/config.go), plus our gpu_env_uuid extension."""

    enabled: bool = True  # --enable-nri-runtime-hook
    socket_path: str = "nri/nri.sock"  # always under the var-run root, as upstream (filepath.Join)
    plugin_name: str = "koordlet_nri"
    plugin_index: str = "00"
    connect_timeout: float = 6.0
    backoff_duration: float = 1.0
    backoff_factor: float = 2.0
    backoff_cap: float = 30.0  # upstream's is effectively unbounded; see koordlet/nri/connection.py
    gpu_env_uuid: bool = False  # ours: NVIDIA_VISIBLE_DEVICES by UUID when the allocation carries UUIDs
    xpu_device_inject: bool = False  # ours: Ascend/Cambricon device nodes and visible-devices env
    hami_core_library_path: str = "/usr/local/vgpu/libvgpu.so"  # --hami-core-library-directory-path

    def __post_init__(self) -> None:
        check_nri_identity(self.plugin_name, self.plugin_index)

    def socket(self, paths: HostPaths) -> str:
        return os.path.join(paths.var_run_root, self.socket_path.lstrip("/"))


@dataclass(frozen=True)
class PodResourcesProxyConfig:
    """The PodResources proxy (gate PodResourcesProxy): upstream's --pod-resources-proxy-path
    (pkg/koordlet/util/system/config.go) plus our limits, see docs/podresources.md."""

    path: str | None = None  # --pod-resources-proxy-path; None: <var-run-root>/koordlet/pod-resources
    qps: float = 100.0  # ours: the limiter on the proxy's callers, kubelet's own (<= 0: none)
    burst: int = 10
    max_age: float = 0.1  # ours: how long one kubelet List answer serves later requests (0: never reused)
    kubelet_timeout: float = 5.0  # ours: a kubelet call slower than this is answered UNAVAILABLE

    def __post_init__(self) -> None:
        if self.burst < 1:
            raise InvalidInput(f"--pod-resources-proxy-burst {self.burst}: must be at least 1")
        if self.max_age < 0 or self.kubelet_timeout <= 0:
            raise InvalidInput("--pod-resources-proxy-max-age must be >= 0 and --pod-resources-proxy-kubelet-timeout "
                               "> 0")

    def socket(self, paths: HostPaths, host_root: str | None = None) -> str:
        """`<dir>/kubelet.sock`: the default dir under the var-run root; a flag's dir under --host-root if given."""
        if self.path is None:
            directory = paths.var_run("koordlet", "pod-resources")
        elif host_root:
            directory = os.path.join(host_root, self.path.lstrip("/"))
        else:
            directory = self.path
        return os.path.join(directory, "kubelet.sock")

    @staticmethod
    def kubelet_socket(paths: HostPaths) -> str:
        """kubelet's PodResources socket (upstream hard-codes /var/lib/kubelet; here under --var-lib-kubelet-dir)."""
        return paths.kubelet("pod-resources", "kubelet.sock")


@dataclass(frozen=True)
class EvictConfig:
    """The eviction flags (pkg/koordlet/qosmanager/framework/config.go): BECPUEvict/BEMemoryEvict strategy periods,
    their cool-downs, and how a victim is evicted."""

    cpu_evict_interval_seconds: int = 1  # <= 0 disables the CPU eviction strategy
    memory_evict_interval_seconds: int = 1  # <= 0 disables the memory eviction strategy
    cpu_evict_cool_time_seconds: int = 20
    memory_evict_cool_time_seconds: int = 4
    only_evict_by_api: bool = False  # True: policy/v1 Eviction; False: stop the victim's containers, keep the Pod


@dataclass(frozen=True)
class Config:
    node_name: str
    paths: HostPaths
    host_root: str | None = None  # --host-root: "/" is this host; anything else is a simulated node
    addr: str = ":9316"
    feature_gates: dict[str, bool] = field(default_factory=lambda: dict(FEATURE_GATES))
    collect_res_used_interval: float = 1.0
    psi_collector_interval: float = 10.0
    collect_node_cpu_info_interval: float = 60.0
    enable_pagecache_collector: bool = False
    disable_container_metrics: bool = False  # ours: no per-container usage or PSI series on /metrics
    metric_gc_interval_seconds: int = 300
    kube_api_qps: float = 20.0
    kube_api_burst: int = 30
    kubeconfig: str | None = None
    kubelet_preferred_address_type: str = "InternalIP"
    kubelet_sync_interval: float = 10.0
    kubelet_sync_timeout: float = 3.0
    kubelet_insecure_tls: bool = False
    kubelet_read_only_port: int = 10255
    enable_node_metric_report: bool = True
    reconcile_interval_seconds: float = 1.0
    resource_force_update_seconds: float = 60.0
    # devices
    node_topology_sync_interval: float = 3.0
    disable_query_kubelet_config: bool = False
    disable_unset_cpu_quota: bool = False  # CPUSetAllocator keeps the CFS quota of cpuset pods
    xpu_device_infos_dir: str | None = None  # default: <var-run-root>/koordlet/xpu-device-infos/
    xpu_enforce_collect_from_device_infos: bool = False
    nvml_snapshot: str | None = None
    gpu_partition_policy: str = "Prefer"
    gpu_health_recovery_seconds: float = 300.0
    nri: NriConfig = field(default_factory=NriConfig)
    pod_resources_proxy: PodResourcesProxyConfig = field(default_factory=PodResourcesProxyConfig)
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    evict: EvictConfig = field(default_factory=EvictConfig)
    # standalone
    pods_dir: str | None = None
    nodeslo_file: str | None = None
    state_dir: str = "./state"

    @property
    def simulated_host(self) -> bool:
        """A node directory, not this machine: live interfaces (netlink, vendor CLIs) must not be consulted."""
        return self.host_root is not None and self.host_root.rstrip("/") != ""

    @property
    def standalone(self) -> bool:
        return self.pods_dir is not None

    @property
    def prediction_checkpoint_dir(self) -> str:
        """--prediction-checkpoint-filepath, else <state-dir>/prediction-checkpoints (kept across restarts)."""
        return self.prediction.checkpoint_filepath or os.path.join(self.state_dir, "prediction-checkpoints")

    def gate(self, name: str) -> bool:
        return self.feature_gates.get(name, False)

    @property
    def listen(self) -> tuple[str, int]:
        host, _, port = self.addr.rpartition(":")
        return host or "0.0.0.0", int(port)
