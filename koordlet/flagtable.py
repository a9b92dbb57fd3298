"""Every flag `koordlet` accepts: upstream koordlet's 137 (its own, klog's, kubeconfig, cadvisor's) and ours, by group.

Names, types and defaults are upstream's (cmd/koordlet/options, pkg/koordlet/*/config.go, klog, cadvisor); the help
is ours. A flag whose feature this agent lacks carries `absent`: it parses, and setting it says so once at start.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from koordlet.goflag import Flag, default_value

_UNSET = object()


@dataclass(frozen=True)
class Option:
    """A flag, where its value lands (`dest`), its group, and what happens when it is set."""

    flag: Flag
    group: str
    dest: str
    unset: Any = _UNSET  # the value when not given, if not the typed default (e.g. None: "use the fallback")
    absent: str = ""  # non-empty: this agent has no such feature; the text says what happens instead
    ours: bool = False  # a flag upstream's binary does not have

    @property
    def name(self) -> str:
        return self.flag.name

    def initial(self) -> Any:
        """The value when the flag is not given."""
        return default_value(self.flag) if self.unset is _UNSET else self.unset


def _addr(value: object) -> str | None:
    _, sep, port = str(value).rpartition(":")
    if not sep:
        return "missing port in address"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        return f"invalid port {port!r} (0-65535)"
    return None


def _non_negative(value: Any) -> str | None:
    return "must not be negative" if value < 0 else None


def _positive(value: Any) -> str | None:
    return "must be greater than 0" if value <= 0 else None


def _choice(*allowed: str) -> Callable[[object], str | None]:
    return lambda value: None if value in allowed else f"must be one of {', '.join(allowed)}"


def _nri_index(value: Any) -> str | None:
    return None if re.fullmatch(r"[0-9]{2}", value) else "must be exactly two digits, e.g. 00"


def _nri_name(value: Any) -> str | None:
    return None if re.fullmatch(r"[A-Za-z0-9\-_.+]+", value) else "only letters, digits and -_.+ allowed"


_OPTIONS: list[Option] = []
UPSTREAM_GROUPS = ("host", "source", "daemon", "states", "collect", "devices", "qos", "nri", "podresources", "audit",
                   "prediction", "log", "cadvisor")


def _add(group: str, name: str, kind: str, default: str, help: str, *, dest: str | None = None, unset: object = _UNSET,
         absent: str = "", check: Callable[[object], str | None] | None = None) -> None:
    ours = bool(re.search(r"\bours\b", help)) or group not in UPSTREAM_GROUPS  # our flags say so in their help
    _OPTIONS.append(Option(Flag(name, kind, default, help, check), group, dest or name.replace("-", "_"), unset,
                           absent, ours))


# -- where the node is: identity and host roots (pkg/koordlet/util/system/config.go) ----------------------------
_add("host", "node-name", "string", "", "node name (default: env NODE_NAME, then the hostname; ours)", unset=None)
_ROOTS = [
    ("cgroup-root-dir", "cgroup_root", "/host-cgroup/", "cgroup filesystem root"),
    ("sys-root-dir", "sys_root", "/host-sys/", "sysfs root"),
    ("sys-fs-root-dir", "sys_fs_root", "/host-sys-fs/", "/sys/fs root (resctrl)"),
    ("proc-root-dir", "proc_root", "/proc/", "procfs root"),
    ("var-run-root-dir", "var_run_root", "/host-var-run/", "/var/run root (NRI socket, koordlet's run dir)"),
    ("var-lib-kubelet-dir", "var_lib_kubelet", "/var/lib/kubelet/", "kubelet's root dir (pod-resources socket, CPU "
     "manager state)"),
    ("run-root-dir", "run_root", "/host-run/", "/run root"),
]
for _name, _dest, _default, _help in _ROOTS:
    _add("host", _name, "string", _default, _help + " (a missing default falls back to the host's own path)",
         dest=_dest, unset=None)
_add("host", "dev-root-dir", "string", "/dev/", "host device nodes (ours; upstream reads a fixed /dev)",
     dest="dev_root", unset=None)
_add("host", "host-root", "string", "", "every host root at the matching path under DIR: a simulated node, or / for "
     "this host (ours)", unset=None)

# -- where pods, NodeSLO and reports come from ---------------------------------------------------------------------
_add("source", "pods-dir", "string", "", "standalone: a directory of Pod manifests standing in for kubelet (ours)",
     unset=None)
_add("source", "nodeslo", "string", "", "standalone: a NodeSLO YAML/JSON file (ours)", dest="nodeslo_file",
     unset=None)
_add("source", "state-dir", "string", "./state", "standalone: where reports are written (ours)")
_add("source", "kubeconfig", "string", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, then ~/.kube/config)",
     unset=None)
_add("source", "kube-api-qps", "float64", "20", "API requests a second")
_add("source", "kube-api-burst", "int", "30", "API request burst")
_add("source", "feature-gates", "mapStringBool", "", "Gate=true|false pairs, comma-separated (every upstream gate; "
     "AllAlpha and AllBeta too)")
_KOORDLET_CONFIG = "not read: upstream takes only `qos-plugin-extra-configs` from it, for QoS extension plugins, " \
                   "which do not exist here (nor upstream)"
_add("source", "configmap-name", "string", "koordlet-config", "koordlet's own ConfigMap", absent=_KOORDLET_CONFIG)
_add("source", "configmap-namespace", "string", "koordinator-system", "namespace of that ConfigMap",
     absent=_KOORDLET_CONFIG)

# -- the daemon's own endpoints and runtimes ------------------------------------------------------------------------
_add("daemon", "addr", "string", ":9316", "address of /metrics, /healthz, /readyz and the /apis views",
     check=_addr)
_add("daemon", "enable-pprof", "bool", "false", "Go pprof endpoints",
     absent="no pprof in a Python agent: use py-spy against the process")
_add("daemon", "pprof-addr", "string", ":9317", "address of the pprof endpoints",
     absent="no pprof in a Python agent: use py-spy against the process")
_add("daemon", "version", "bool", "false", "print the version and exit (ours)")
_CRI = "no CRI client: containers are found from cgroups and pod status, and an eviction stops them through their " \
       "cgroup (docs/evictions.md)"
_add("daemon", "containerd-endpoint", "string", "", "containerd CRI endpoint", absent=_CRI)
_add("daemon", "docker-endpoint", "string", "", "dockershim CRI endpoint", absent=_CRI)
_add("daemon", "pouch-endpoint", "string", "", "pouch CRI endpoint", absent=_CRI)
_add("daemon", "default-runtime-type", "string", "containerd", "runtime for container IDs without a prefix",
     absent=_CRI, check=_choice("containerd", "docker", "pouch"))
_add("daemon", "report-interval", "duration", "0s", "deprecated; ignored (as upstream)",
     absent="deprecated and ignored, as upstream: NodeMetric's spec.metricCollectPolicy.reportIntervalSeconds sets it")

# -- states: kubelet, Node, reports ---------------------------------------------------------------------------------
_add("states", "kubelet-preferred-address-type", "string", "InternalIP", "Node address used to reach kubelet")
_add("states", "kubelet-sync-interval", "duration", "10s", "kubelet /pods poll period")
_add("states", "kubelet-sync-timeout", "duration", "3s", "kubelet request timeout")
_add("states", "kubelet-insecure-tls", "bool", "false", "skip kubelet's certificate check")
_add("states", "kubelet-read-only-port", "uint", "10255", "kubelet's read-only port (when its https port is unknown)")
_add("states", "node-topology-sync-interval", "duration", "3s", "NodeResourceTopology and Device report period")
_add("states", "disable-query-kubelet-config", "bool", "false", "do not ask kubelet /configz for the CPU manager "
     "policy (its config file is still read)")
_add("states", "enable-node-metric-report", "bool", "true", "report NodeMetric status")
_add("states", "enable-pod-taskids", "bool", "false", "per-container task IDs in the pod states",
     absent="task IDs are read from each container's cgroup when a feature needs them")

# -- collection (pkg/koordlet/metricsadvisor, metriccache) ------------------------------------------------------------
_add("collect", "collect-res-used-interval", "duration", "1s", "node/pod usage collection period")
_add("collect", "collect-sys-metric-outdated-interval", "duration", "10s", "age past which a system sample is stale",
     absent="samples older than twice the collection period are stale here")
_add("collect", "collect-node-cpu-info-interval", "duration", "1m0s", "CPU topology re-read period")
_add("collect", "collect-node-storage-info-interval", "duration", "1s", "local storage info period",
     absent="no local-storage collector")
_add("collect", "cpi-collector-interval", "duration", "1m0s", "CPI collection period (gate CPICollector)",
     absent="no CPI collector (perf counters)")
_add("collect", "psi-collector-interval", "duration", "10s", "PSI collection period (gate PSICollector)")
_add("collect", "collect-cpi-timewindow", "duration", "10s", "CPI sampling window", absent="no CPI collector")
_add("collect", "coldpage-collector-interval", "duration", "5s", "cold page collection period",
     absent="no cold-page collector")
_add("collect", "enable-pagecache-collector", "bool", "false", "collect page cache per pod and node")
_add("collect", "disable-container-metrics", "bool", "false", "drop the per-container usage and PSI series from "
     "/metrics, keeping the per-pod ones (ours; a quarter of the series at 3 containers a pod)")
_add("collect", "enable-resctrl-collector", "bool", "false", "collect resctrl LLC/MB per QoS class",
     absent="no resctrl collector (gate ResctrlCollector)")
_add("collect", "resctrl-collector-interval", "duration", "10s", "resctrl collection period",
     absent="no resctrl collector (gate ResctrlCollector)")
_add("collect", "metric-gc-interval-seconds", "int", "300", "metric cache garbage-collection period")
_TSDB = "no TSDB: samples live in a bounded in-memory cache sized by the aggregation windows"
_add("collect", "metric-expire-seconds", "int", "1800", "how long samples are kept", absent=_TSDB)
_add("collect", "tsdb-path", "string", "/metric-data/", "TSDB directory", absent=_TSDB)
_add("collect", "tsdb-retention-duration", "duration", "12h0m0s", "TSDB retention", absent=_TSDB)
_add("collect", "tsdb-enable-prometheus-metric", "bool", "true", "TSDB's own Prometheus metrics", absent=_TSDB)
_add("collect", "tsdb-stripe-size", "int", "16384", "TSDB stripe size", absent=_TSDB)
_add("collect", "tsdb-max-bytes", "int64", "104857600", "TSDB size limit", absent=_TSDB)
_add("collect", "tsdb-wal-segment-size", "int", "1048576", "TSDB WAL segment size", absent=_TSDB)
_add("collect", "tsdb-max-block-chunk-segment-size", "int64", "5242880", "TSDB chunk segment size", absent=_TSDB)
_add("collect", "tsdb-min-block-duration", "duration", "10m0s", "TSDB block duration", absent=_TSDB)
_add("collect", "tsdb-max-block-duration", "duration", "10m0s", "TSDB block duration", absent=_TSDB)
_add("collect", "tsdb-head-chunks-write-buffer-size", "int", "1048576", "TSDB write buffer", absent=_TSDB)

# -- devices ----------------------------------------------------------------------------------------------------------
_add("devices", "xpu-device-infos-dir", "string", "/var/run/koordlet/xpu-device-infos/", "xPU device-info files "
     "(default: <var-run-root-dir>/koordlet/xpu-device-infos/)", unset=None)
_add("devices", "xpu-enforce-collect-from-device-infos", "bool", "false", "take xPUs only from device-info files")
_add("devices", "hami-core-library-directory-path", "string", "/usr/local/vgpu/libvgpu.so",
     "HAMi-core library mounted into vGPU containers (gate HamiCoreVGPUMonitor)")
_add("devices", "nvml-snapshot", "string", "", "replay this NVML snapshot instead of calling NVML (ours)",
     unset=None)
_add("devices", "gpu-partition-policy", "string", "Prefer", "node.koordinator.sh/gpu-partition-policy for NVLink "
     "partitions found through NVML (ours)", check=_choice("Prefer", "Honor"))
_add("devices", "gpu-health-recovery-seconds", "float64", "300", "a GPU marked unhealthy by an XID is healthy again "
     "after this long without one (ours)", check=_non_negative)

# -- QoS (pkg/koordlet/qosmanager/framework, resourceexecutor) --------------------------------------------------------
_add("qos", "reconcile-interval-seconds", "int", "1", "QoS reconcile period")
_add("qos", "resource-force-update-seconds", "int", "60", "rewrite a cgroup file holding the same value after this "
     "long")
_add("qos", "cpu-suppress-interval-seconds", "int", "1", "BE CPU suppress period",
     absent="BE CPU suppress runs in the QoS pass, every --reconcile-interval-seconds")
_add("qos", "cpu-evict-interval-seconds", "int", "1", "BE CPU eviction period (<= 0 disables it)")
_add("qos", "memory-evict-interval-seconds", "int", "1", "BE memory eviction period (<= 0 disables it)")
_add("qos", "memory-evict-cool-time-seconds", "int", "4", "pause after a memory eviction round that evicted")
_add("qos", "cpu-evict-cool-time-seconds", "int", "20", "pause after a CPU eviction round that evicted (and at "
     "start)")
_add("qos", "only-evict-by-api", "bool", "false", "evict through the Eviction API instead of stopping the victim's "
     "containers")
_add("qos", "qos-extension-plugins", "mapStringBool", "", "QoS extension plugins",
     absent="none exist (upstream registers none either)")
_add("qos", "disable-unset-cpu-quota", "bool", "false", "keep the CFS quota of pods with a cpuset (CPUSetAllocator)")

# -- runtime hooks (pkg/koordlet/runtimehooks/config.go) ---------------------------------------------------------------
_PROXY = "no koord-runtime-proxy hook server: runtime hooks run as an NRI plugin (--enable-nri-runtime-hook)"
_add("nri", "runtime-hooks-network", "string", "unix", "hook server network", absent=_PROXY)
_add("nri", "runtime-hooks-addr", "string", "/host-var-run-koordlet/koordlet.sock", "hook server socket",
     absent=_PROXY)
_add("nri", "runtime-hooks-failure-policy", "string", "Ignore", "hook server failure policy", absent=_PROXY)
_add("nri", "runtime-hooks-plugin-failure-policy", "string", "Ignore", "failure policy of one hook plugin",
     absent="every hook fails open (Ignore): a failing hook never fails the container")
_add("nri", "runtime-hooks-config-path", "string", "/host-etc-hookserver/", "hook server registration dir",
     absent=_PROXY)
_add("nri", "runtime-hooks-host-endpoint", "string", "/var/run/koordlet/koordlet.sock", "hook server socket as the "
     "host names it", absent=_PROXY)
_add("nri", "enable-nri-runtime-hook", "bool", "true", "serve the runtime hooks as an NRI plugin of containerd/CRI-O")
_add("nri", "runtime-hooks-nri-socket-path", "string", "nri/nri.sock", "NRI socket, under --var-run-root-dir")
_add("nri", "runtime-hooks-nri-plugin-name", "string", "koordlet_nri", "the name the NRI plugin registers with",
     check=_nri_name)
_add("nri", "runtime-hooks-nri-plugin-index", "string", "00", "the plugin's index: the runtime calls plugins in "
     "index order", check=_nri_index)
_add("nri", "runtime-hooks-nri-connect-timeout", "duration", "6s", "how long to wait for the runtime to accept the "
     "plugin")
_add("nri", "runtime-hooks-nri-backoff-duration", "duration", "1s", "first wait before reconnecting to the runtime")
_add("nri", "runtime-hooks-nri-backoff-factor", "float64", "2", "each further reconnect waits this many times longer",
     check=_positive)
_add("nri", "runtime-hooks-nri-backoff-cap", "duration", "30s", "the longest wait between reconnects (upstream's is "
     "unbounded; docs/runtime-hooks.md)")
_add("nri", "runtime-hooks-nri-backoff-steps", "int", "2147483647", "reconnect attempts",
     absent="the plugin reconnects for as long as the agent runs")
_add("nri", "runtime-hooks-disable-stages", "stringSlice", "[]", "NRI stages to leave unhooked",
     absent="every stage with a hook is served; turn hooks off with their feature gates")
_add("nri", "runtime-hooks-reconcile-interval", "duration", "10s", "runtime hooks' reconciler period",
     absent="the hooks' cgroup values are repaired by the QoS pass, every --reconcile-interval-seconds")
_add("nri", "runtime-hooks-gpu-env-uuid", "bool", "false", "NVIDIA_VISIBLE_DEVICES by GPU UUID when the allocation "
     "carries UUIDs (ours; docs/runtime-hooks.md)")
_add("nri", "runtime-hooks-xpu-device-inject", "bool", "false", "Ascend/Cambricon device nodes and visible-devices env "
     "for allocated cards (ours; docs/runtime-hooks.md)")

# -- PodResources proxy (gate PodResourcesProxy) -----------------------------------------------------------------------
_add("podresources", "pod-resources-proxy-path", "string", "/var/run/koordlet/pod-resources", "directory of the "
     "proxy's kubelet.sock (default: <var-run-root-dir>/koordlet/pod-resources)", unset=None)
_add("podresources", "pod-resources-proxy-qps", "float64", "100", "requests a second the proxy accepts (<= 0: no "
     "limit; ours)")
_add("podresources", "pod-resources-proxy-burst", "int", "10", "burst of that limit (ours)")
_add("podresources", "pod-resources-proxy-max-age", "duration", "100ms", "how long one kubelet List answer serves "
     "later requests (0: ask kubelet each time; ours)", check=_non_negative)
_add("podresources", "pod-resources-proxy-kubelet-timeout", "duration", "5s", "a kubelet call slower than this is "
     "answered UNAVAILABLE (ours)", check=_positive)

# -- audit -------------------------------------------------------------------------------------------------------------
_AUDIT = "no audit log (gate AuditEvents): QoS writes are in `koordlet plan` and /metrics, evictions in Events"
_add("audit", "audit-log-dir", "string", "/var/log/koordlet", "audit log directory", absent=_AUDIT)
_add("audit", "audit-verbose", "int", "3", "audit verbosity", absent=_AUDIT)
_add("audit", "audit-max-disk-space-mb", "int", "16", "audit log size", absent=_AUDIT)
_add("audit", "audit-max-concurrent-readers", "int", "4", "audit readers", absent=_AUDIT)
_add("audit", "audit-max-events-limit", "int", "2048", "audit events per read", absent=_AUDIT)

# -- peak prediction (pkg/koordlet/prediction/config.go) ---------------------------------------------------------------
_add("prediction", "prediction-checkpoint-filepath", "string", "/prediction-checkpoints", "directory of the models' "
     "checkpoints (default: /prediction-checkpoints in a cluster when it exists, else <state-dir>/"
     "prediction-checkpoints)", unset="")
_add("prediction", "prediction-cold-start-duration", "duration", "24h0m0s", "a pod this young is not predicted: its "
     "request counts as its peak")
_add("prediction", "prediction-safety-margin-percent", "int", "10", "the redundancy kept above the predicted peak")
_add("prediction", "prediction-memory-histogram-decay-halflife", "duration", "24h0m0s", "half-life of memory "
     "samples' weight")
_add("prediction", "prediction-cpu-histogram-decay-halflife", "duration", "12h0m0s", "half-life of CPU samples' "
     "weight")
_add("prediction", "prediction-training-interval", "duration", "1m0s", "period of the models' update")
_add("prediction", "prediction-model-expiration-duration", "duration", "30m0s", "a model not updated for this long "
     "is dropped")
_add("prediction", "prediction-model-checkpoint-interval", "duration", "10m0s", "a model is checkpointed at most this "
     "often")
_add("prediction", "prediction-model-checkpoint-max-per-step", "int", "12", "models checkpointed per round")

# -- klog (k8s.io/klog/v2 InitFlags), mapped onto Python logging by koordlet.logsetup ---------------------------------
_add("log", "v", "level", "0", "log verbosity: 4 and above log debug lines", dest="verbosity")
_add("log", "logtostderr", "bool", "true", "log to standard error instead of files")
_add("log", "alsologtostderr", "bool", "false", "log to standard error as well as files")
_add("log", "log_dir", "string", "", "write logs to koordlet.log in this directory (when not -logtostderr)")
_add("log", "log_file", "string", "", "write logs to this file (when not -logtostderr)")
_add("log", "log_file_max_size", "uint64", "1800", "MB a log file may reach before it is rotated (0: no limit)")
_add("log", "stderrthreshold", "severity", "2", "lines at or above this severity also go to standard error when "
     "logging to files (INFO, WARNING, ERROR, FATAL or 0-3)")
_add("log", "skip_headers", "bool", "false", "no time/level/logger prefix on log lines")
_add("log", "add_dir_header", "bool", "false", "the source file's path in each line's prefix")
_add("log", "one_output", "bool", "false", "one file per severity only (klog)",
     absent="logs go to one file; there are no per-severity files")
_add("log", "skip_log_headers", "bool", "false", "no header lines in log files",
     absent="log files have no header lines to skip")
_add("log", "vmodule", "moduleSpec", "", "per-Go-file verbosity",
     absent="per-Go-file verbosity names upstream's source files; -v sets ours")
_add("log", "log_backtrace_at", "traceLocation", ":0", "a Go source line whose log prints a stack",
     absent="names a line of upstream's Go sources")

# -- cadvisor globals: linked into upstream's binary through kubelet's options, no effect there either -----------------
_CADVISOR = "a cadvisor global linked into upstream's binary; it has no effect there either"
for _name, _kind, _default in [
    ("allow_dynamic_housekeeping", "bool", "true"), ("application_metrics_count_limit", "int", "100"),
    ("boot_id_file", "string", "/proc/sys/kernel/random/boot_id"),
    ("container_hints", "string", "/etc/cadvisor/container_hints.json"),
    ("containerd", "string", "/run/containerd/containerd.sock"), ("containerd-namespace", "string", "k8s.io"),
    ("containerd_env_metadata_whitelist", "string", ""), ("disable_root_cgroup_stats", "bool", "false"),
    ("docker_only", "bool", "false"), ("enable_load_reader", "bool", "false"),
    ("event_storage_age_limit", "string", "default=24h"), ("event_storage_event_limit", "string", "default=100000"),
    ("global_housekeeping_interval", "duration", "1m0s"), ("housekeeping_interval", "duration", "1s"),
    ("log_cadvisor_usage", "bool", "false"), ("machine_id_file", "string", "/etc/machine-id,/var/lib/dbus/machine-id"),
    ("max_housekeeping_interval", "duration", "1m0s"), ("referenced_reset_interval", "uint64", "0"),
    ("storage_driver_buffer_duration", "duration", "1m0s"), ("storage_driver_db", "string", "cadvisor"),
    ("storage_driver_host", "string", "localhost:8086"), ("storage_driver_password", "string", "root"),
    ("storage_driver_secure", "bool", "false"), ("storage_driver_table", "string", "stats"),
    ("storage_driver_user", "string", "root"), ("update_machine_info_interval", "duration", "5m0s"),
]:
    _add("cadvisor", _name, _kind, _default, "cadvisor global", dest="cadvisor_" + _name.replace("-", "_"),
         absent=_CADVISOR)

# -- one-shot commands' own options ------------------------------------------------------------------------------------
_OUTPUTS = ("json", "yaml", "table")
_add("output", "output", "string", "json", "json, yaml or table (one line per item, as kubectl get)",
     check=_choice(*_OUTPUTS))
_add("window", "window", "float64", "10", "seconds to sample before printing", check=_non_negative)
_add("run-extra", "example-pods-cgroups", "bool", "false", "standalone, as root on this host: give the --pods-dir pods "
     "real cgroups with a sleeping process each, removed on exit (`make run` does this for examples/pods)")
_add("dump", "dump-nvml", "string", "", "also write everything discovery read from NVML as a snapshot to FILE "
     "('-' = stdout only)", unset=None)
_add("device-daemon", "oneshot", "bool", "false", "write the file once and exit")
_add("device-daemon", "prints-output-file", "string", "", "the device-info file (default: <var-run-root-dir>/koordlet/"
     "xpu-device-infos/ic-device)", dest="output_file", unset=None)
_add("device-daemon", "sleep-interval", "duration", "15m0s", "period between two writes")
_add("once", "once", "bool", "false", "apply one reconcile pass and exit (required)")


def _checked(check: Callable[[object], str | None], *names: str) -> None:
    """Give these flags `check`: refused at start with one line (exit 2) instead of taken as they are."""
    for i, o in enumerate(_OPTIONS):
        if o.name in names:
            if o.flag.check is not None:
                raise AssertionError(f"{o.name} has a check already")
            _OPTIONS[i] = dataclasses.replace(o, flag=dataclasses.replace(o.flag, check=check))


# Periods of loops and timeouts: 0 or less would spin a loop at 100 % of a core (upstream's wait.Until(f, 0) does the
# same) or time out at once. Flags where upstream gives 0 a meaning keep it: report-interval (ignored),
# node-topology-sync-interval (<= 0: no NRT loop), the eviction intervals (<= 0: the strategy is off),
# pod-resources-proxy-qps (<= 0: no limit), kube-api-qps (client-go's rest.Config: 0 is its default 5, < 0 no limit).
_checked(_positive, "kubelet-sync-interval", "kubelet-sync-timeout",
         "collect-res-used-interval", "collect-node-cpu-info-interval", "psi-collector-interval",
         "metric-gc-interval-seconds", "reconcile-interval-seconds", "prediction-training-interval",
         "prediction-model-checkpoint-interval", "sleep-interval", "runtime-hooks-nri-connect-timeout",
         "runtime-hooks-nri-backoff-duration", "runtime-hooks-nri-backoff-cap", "runtime-hooks-nri-backoff-steps",
         "prediction-memory-histogram-decay-halflife", "prediction-cpu-histogram-decay-halflife",
         "prediction-model-expiration-duration")
# Windows, cool-downs and flags without an effect here: 0 is harmless, a negative value is a typo.
_checked(_non_negative, "kube-api-burst", "resource-force-update-seconds", "cpu-suppress-interval-seconds",
         "memory-evict-cool-time-seconds", "cpu-evict-cool-time-seconds", "collect-sys-metric-outdated-interval",
         "collect-node-storage-info-interval", "cpi-collector-interval", "collect-cpi-timewindow",
         "coldpage-collector-interval", "resctrl-collector-interval", "metric-expire-seconds",
         "runtime-hooks-reconcile-interval", "pod-resources-proxy-burst", "prediction-cold-start-duration",
         "prediction-safety-margin-percent", "prediction-model-checkpoint-max-per-step", "audit-verbose",
         "audit-max-disk-space-mb", "audit-max-concurrent-readers", "audit-max-events-limit", "tsdb-retention-duration",
         "tsdb-stripe-size", "tsdb-wal-segment-size", "tsdb-min-block-duration", "tsdb-max-block-duration",
         "tsdb-head-chunks-write-buffer-size")
OPTIONS: dict[str, Option] = {o.name: o for o in _OPTIONS}


@dataclass(frozen=True)
class Command:
    """A subcommand: what it does and the flag groups it takes (only those are listed in its help)."""

    name: str
    summary: str
    groups: tuple[str, ...]
    aliases: dict[str, str] | None = None


_ONE_SHOT = ("host", "source", "log")
COMMANDS: dict[str, Command] = {c.name: c for c in [
    Command("run", "the node agent (the default when no command is given)", (*UPSTREAM_GROUPS, "run-extra")),
    Command("nodemetric", "sample for --window seconds and print the NodeMetric this node would report",
            (*_ONE_SHOT, "states", "collect", "devices", "prediction", "window", "output"), {"o": "output"}),
    Command("sched-latency", "sample for --window seconds and print each pod's CPU run-queue waits (eBPF via bcc, else "
            "per-task schedstat)", (*_ONE_SHOT, "states", "window", "output"), {"o": "output"}),
    Command("devices", "print the Device CR this node would report (every device source on)",
            ("host", "log", "devices", "output", "dump"), {"o": "output"}),
    Command("device-daemon", "write the xPU device-info file from vendor tools (npu-smi, cnmon)",
            ("host", "log", "device-daemon"), {"output": "prints-output-file", "output-file": "prints-output-file"}),
    Command("plan", "print what one QoS reconcile pass would write, and the evictions it would make, without acting",
            (*_ONE_SHOT, "states", "collect", "qos", "output"), {"o": "output"}),
    Command("qos", "apply one QoS reconcile pass (--once) and print the results",
            (*_ONE_SHOT, "states", "collect", "qos", "once", "output"), {"o": "output"}),
    Command("version", "print the version", ()),
]}


def options_of(command: Command) -> list[Option]:
    return [o for o in _OPTIONS if o.group in command.groups]


def upstream_options() -> Iterable[Option]:
    """The flags of upstream's binary (its own, klog's, kubeconfig, cadvisor's), without ours."""
    return (o for o in _OPTIONS if not o.ours)
