"""The README's configuration and metrics references, generated from the code (`make docs`) so they cannot drift:
flags from the parser, feature gates from FEATURE_GATES and where the code reads them, annotation and label keys
from the source, metric families from the exporters themselves. tests/test_reference.py fails when README differs.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FunctionType, ModuleType, SimpleNamespace

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from apis.extension.blkio_qos import ANNOTATION_POD_BLKIO_QOS
from apis.extension.cpu_burst import ANNOTATION_POD_CPU_BURST
from apis.extension.cpu_qos import ANNOTATION_POD_CPU_QOS
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from apis.extension.device_share import (
    ANNOTATION_GPU_PARTITIONS,
    LABEL_GPU_DRIVER_VERSION,
    LABEL_GPU_ISOLATION_PROVIDER,
    LABEL_GPU_MODEL,
    LABEL_GPU_PARTITION_POLICY,
    LABEL_GPU_VENDOR,
    LABEL_RDMA_LINK_STATE,
    LABEL_RDMA_NETDEV,
    LABEL_RDMA_VF_LINK_STATE,
    LABEL_RDMA_VF_MAC,
    LABEL_RDMA_VF_SPOOFCHK,
    LABEL_RDMA_VF_TRUST,
    LABEL_RDMA_VF_VLAN,
)
from apis.extension.memory_qos import ANNOTATION_POD_MEMORY_QOS
from apis.extension.node import (
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_SYSTEM_QOS_RESOURCE,
)
from apis.extension.numa_aware import (
    ANNOTATION_BE_CPU_SHARED_POOLS,
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_POD_CPU_ALLOCS,
    LABEL_ENABLE_NUMA_RESERVATION,
)
from apis.extension.priority import LABEL_POD_PRIORITY_CLASS
from apis.extension.qos import LABEL_POD_QOS
from apis.extension.resctrl import ANNOTATION_RESCTRL
from apis.extension.resource_status import ANNOTATION_RESOURCE_STATUS
from apis.extension.resources import ANNOTATION_EXTENDED_RESOURCE_SPEC

PACKAGE = Path(__file__).resolve().parent
BEGIN, END = "<!-- BEGIN GENERATED {} (make docs) -->", "<!-- END GENERATED {} -->"

# What each key the code names is to the agent: (direction, on which object, what for). tests/test_reference.py
# fails when the code names a key missing here or this names a key the code no longer does.
KEY_ROLES: dict[str, tuple[str, str, str]] = {
    LABEL_POD_QOS: ("read", "Pod label", "the Koordinator QoS class (LSE/LSR/LS/BE/SYSTEM)"),
    LABEL_POD_PRIORITY_CLASS: ("read", "Pod label", "the Koordinator priority class"),
    ANNOTATION_POD_CPU_QOS: ("read", "Pod annotation", "the pod's CPU QoS (group identity) over the NodeSLO's"),
    ANNOTATION_POD_BLKIO_QOS: ("read", "Pod annotation", "the pod's blkio/io throttles and weights"),
    ANNOTATION_POD_MEMORY_QOS: ("read", "Pod annotation", "the pod's memory QoS policy and values (CgroupReconcile)"),
    ANNOTATION_POD_CPU_BURST: ("read", "Pod annotation", "CPUBurst policy and percentages of the pod"),
    LABEL_GPU_ISOLATION_PROVIDER: ("read", "Pod label", "HAMi-core GPU isolation (runtime hook)"),
    ANNOTATION_RESCTRL: ("read", "Pod annotation", "the pod's own resctrl group (gate Resctrl)"),
    ANNOTATION_EXTENDED_RESOURCE_SPEC: ("read", "Pod annotation",
                                                   "batch-cpu/batch-memory requests and limits (BatchResource)"),
    ANNOTATION_DEVICE_ALLOCATED: ("read", "Pod annotation",
                                                   "GPUs/RDMA/xPUs koord-scheduler allocated (runtime hooks, "
                                                   "PodResources proxy, usage)"),
    ANNOTATION_RESOURCE_STATUS: ("read", "Pod annotation",
                                                  "the CPU set koord-scheduler allocated (CPUSetAllocator)"),
    ANNOTATION_NODE_RESERVATION: ("read", "Node annotation", "CPUs reserved on the node"),
    ANNOTATION_NODE_RAW_ALLOCATABLE: ("read", "Node annotation", "the allocatable before resource "
                                            "amplification: the Prod reclaimable prediction is capped by it"),
    ANNOTATION_SYSTEM_QOS_RESOURCE: ("read", "Node annotation", "CPUs kept for SYSTEM QoS pods"),
    ANNOTATION_CPU_NORMALIZATION_RATIO: ("read", "Node annotation",
                                                    "CPU normalization ratio applied to batch CPU"),
    LABEL_ENABLE_NUMA_RESERVATION: ("read", "Node label", "NUMA-level reservation in the NRT"),
    ANNOTATION_CPU_TOPOLOGY: ("written", "NodeResourceTopology annotation", "the node's CPU topology"),
    ANNOTATION_CPU_SHARED_POOLS: ("written", "NodeResourceTopology annotation", "LS share pools"),
    ANNOTATION_BE_CPU_SHARED_POOLS: ("written", "NodeResourceTopology annotation", "BE share pools"),
    ANNOTATION_POD_CPU_ALLOCS: ("written", "NodeResourceTopology annotation",
                                           "CPUs kubelet's static policy gave pods"),
    ANNOTATION_CPU_BASIC_INFO: ("written", "NodeResourceTopology annotation", "CPU model and flags"),
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY: ("written", "NodeResourceTopology annotation",
                                                  "kubelet's CPU manager policy and options"),
    "app.kubernetes.io/managed-by": ("written", "NodeResourceTopology label", "`koordlet`"),
    LABEL_GPU_VENDOR: ("written", "Device label", "GPU/xPU vendor"),
    LABEL_GPU_MODEL: ("written", "Device label", "GPU/xPU model"),
    LABEL_GPU_DRIVER_VERSION: ("written", "Device label", "NVIDIA driver version"),
    LABEL_GPU_PARTITION_POLICY: ("written", "Device label", "Prefer or Honor the partitions"),
    ANNOTATION_GPU_PARTITIONS: ("written", "Device annotation", "NVLink/HCCS GPU partitions"),
    LABEL_RDMA_NETDEV: ("written", "Device entry label", "the NIC's netdev"),
    LABEL_RDMA_LINK_STATE: ("written", "Device entry label", "the NIC port's link state"),
    LABEL_RDMA_VF_MAC: ("written", "Device VF label", "the VF's MAC"),
    LABEL_RDMA_VF_VLAN: ("written", "Device VF label", "the VF's VLAN"),
    LABEL_RDMA_VF_TRUST: ("written", "Device VF label", "the VF's trust setting"),
    LABEL_RDMA_VF_SPOOFCHK: ("written", "Device VF label", "the VF's spoof check"),
    LABEL_RDMA_VF_LINK_STATE: ("written", "Device VF label", "the VF's link state"),
}
# Keys in the code that are resource names or API versions, not labels or annotations.
NOT_KEYS = re.compile(r"^(kubernetes\.io/(batch|mid)-|koordinator\.sh/(gpu|gpu-core|gpu-memory|gpu-memory-ratio|rdma)$"
                      r"|huawei\.com/|nvidia\.com/|.*/v1(alpha1|beta1)?$)")
_KEY = re.compile(r"^[a-z0-9.-]+\.(sh|io|com)/[A-Za-z0-9._-]+$")


def source_keys() -> dict[str, list[str]]:
    """Every label/annotation key the package names → the modules naming it: a string constant that looks like a
    key, or a name imported from apis/ whose value is one (the shared vocabulary defines most of them)."""
    out: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "pb" or path.name == "reference.py":
            continue
        where = str(path.relative_to(PACKAGE.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "apis":
                module = importlib.import_module(node.module)
                for alias in node.names:
                    for value in _keys_named(module, getattr(module, alias.name, None), set()):
                        out.setdefault(value, set()).add(where)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_key(node.value):
                out.setdefault(node.value, set()).add(where)
    return {k: sorted(v) for k, v in sorted(out.items())}


def _keys_named(module: ModuleType, value: object, seen: set[str]) -> Iterator[str]:
    """The key a constant holds, or the keys a decoder function of `module` reads (through the module's constants
    and the module's other functions it calls)."""
    if isinstance(value, str):
        if _is_key(value):
            yield value
    elif isinstance(value, FunctionType) and value.__module__ == module.__name__ and value.__name__ not in seen:
        seen.add(value.__name__)
        for name in value.__code__.co_names:
            yield from _keys_named(module, getattr(module, name, None), seen)


def _is_key(text: str) -> bool:
    return bool(_KEY.match(text)) and not NOT_KEYS.match(text)


def gate_users() -> dict[str, list[str]]:
    """Feature gate → the modules that name it (outside config.py, where all are declared)."""
    from koordlet.config import FEATURE_GATES

    out: dict[str, set[str]] = {g: set() for g in FEATURE_GATES}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("config.py", "reference.py") or path.parent.name == "pb":
            continue
        text = path.read_text()
        for gate in FEATURE_GATES:
            if f'"{gate}"' in text:
                out[gate].add(str(path.relative_to(PACKAGE.parent)))
    return {k: sorted(v) for k, v in out.items()}


# -- tables -----------------------------------------------------------------------------------------------------

def _md(rows: Iterable[Iterable[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def flags_table() -> str:
    from koordlet.flagtable import COMMANDS, options_of

    rows = []
    for o in options_of(COMMANDS["run"]):
        meaning = o.flag.help + (f" **Accepted, no effect:** {o.absent}." if o.absent else "")
        rows.append((f"`-{o.name}`", f"`{o.flag.default}`" if o.flag.default else "", meaning))
    return _md(rows, ["flag", "default", "meaning"])


def gates_table() -> str:
    from koordlet.config import FEATURE_GATES, UNIMPLEMENTED_GATES

    users = gate_users()
    rows = [(f"`{g}`", str(d).lower(), ", ".join(f"`{u}`" for u in users[g]) or
             f"accepted, no effect: {UNIMPLEMENTED_GATES.get(g, 'not read')} (said at start, "
             "`koordlet_agent_setting_without_effect`)") for g, d in sorted(FEATURE_GATES.items())]
    return _md(rows, ["gate", "default", "read by"])


def keys_table() -> str:
    keys = source_keys()
    rows = [(f"`{k}`", KEY_ROLES[k][0], KEY_ROLES[k][1], KEY_ROLES[k][2]) for k in keys if k in KEY_ROLES]
    return _md(rows, ["key", "read / written", "on", "what for"])


# -- metrics --------------------------------------------------------------------------------------------------------

_TYPE_SUFFIX = {"counter": "_total"}


def _families(registry: CollectorRegistry) -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """(name as exposed, type, help, label names) of every family a registry can expose, samples or not."""
    from koordlet.exposition import GoCounterFamily

    for collector in list(registry._collector_to_names):
        if isinstance(collector, MetricWrapperBase):
            kind = str(collector._type)
            name = collector._name + _TYPE_SUFFIX.get(kind, "")
            yield name, kind, str(collector._documentation), tuple(collector._labelnames)
            continue
        for fam in collector.collect():
            labels = tuple(getattr(fam, "_labelnames", ()))
            suffix = "" if isinstance(fam, GoCounterFamily) else _TYPE_SUFFIX.get(fam.type, "")
            yield fam.name + suffix, fam.type, fam.documentation, labels


def _agent_registries(parts: set[str]) -> list[CollectorRegistry]:
    """The agent's registries with the optional `parts` switched on (stub state: only family shapes matter)."""
    from koordlet.collectors.advisor import Latest
    from koordlet.devices.metrics import DeviceView
    from koordlet.devices.rdma_metrics import RDMACollector
    from koordlet.exporter import AgentMetrics
    from koordlet.health import Health
    from koordlet.host.paths import HostPaths
    from koordlet.metriccache import MetricCache
    from koordlet.nri.metrics import NriMetrics
    from koordlet.podresources.metrics import ProxyMetrics
    from koordlet.qos.cpusuppress import SuppressStatus
    from koordlet.qos.metrics import QoSMetrics

    latest = Latest(node=SimpleNamespace(cpu_cores=1.0, memory_bytes=1))  # type: ignore[arg-type]
    m = AgentMetrics("node", Health(), latest, MetricCache(lambda _: 60.0),
                     nodemetric_prom="NodeMetricPromMetrics" in parts, last_nodemetric={"status": {}})
    if "CPUSchedLatency" in parts:
        m.schedlat = SimpleNamespace(program_stats=lambda: {"p": (1, 1)}, latest=[])  # type: ignore[assignment]
    if "BECPUSuppress" in parts:
        m.suppress = SuppressStatus
    if "BEMemoryEvict, BECPUEvict" in parts:
        from koordlet.qos.evictor import EvictionStats

        m.evictions = EvictionStats()
        m.evictions.record("ns", "pod", "evicted")  # Go counter families exist once they have a series
    if "Accelerators, RDMADevices" in parts:
        m.device_view = DeviceView
        m.external.register(RDMACollector("node", HostPaths.under("/nonexistent"), list))  # no devices: shapes only
    if "CPUSetAllocator" in parts or "PerCPUMetric" in parts:
        m.cpuset_rule = lambda: None
        m.per_cpu_metric = "PerCPUMetric" in parts
    QoSMetrics("node", m.internal, cpu_burst="CPUBurst" in parts)
    regs = [m.internal, m.external]
    if "--enable-nri-runtime-hook" in parts:
        regs.append(CollectorRegistry(auto_describe=False))
        NriMetrics("node", regs[-1])
    if "PodResourcesProxy" in parts:
        regs.append(CollectorRegistry(auto_describe=False))
        ProxyMetrics(regs[-1])
    return regs


OPTIONAL_PARTS = ("CPUSchedLatency", "BECPUSuppress", "CPUSetAllocator", "PerCPUMetric", "CPUBurst",
                  "NodeMetricPromMetrics", "BEMemoryEvict, BECPUEvict", "Accelerators, RDMADevices",
                  "--enable-nri-runtime-hook", "PodResourcesProxy")
# families always present whose series need a gate (their families are built regardless)
_SERIES_GATES = {"koordlet_pod_psi": "PSICollector", "koordlet_container_psi": "PSICollector",
                 "koordlet_resctrl_group_refused": "Resctrl"}


def metric_catalogue() -> dict[str, tuple[str, str, tuple[str, ...], str]]:
    """name → (type, help, labels, what enables it) of every family the agent exposes on /metrics."""
    def collect(parts: set[str]) -> dict[str, tuple[str, str, tuple[str, ...]]]:
        return {n: (t, h, ls) for reg in _agent_registries(parts) for n, t, h, ls in _families(reg)}

    base = collect(set())
    out = {n: (*v, _SERIES_GATES.get(n, "")) for n, v in base.items()}
    for part in OPTIONAL_PARTS:
        for n, v in collect({part}).items():
            if n not in out:  # the first part that shows it (PerCPUMetric's series need CPUSetAllocator too)
                out[n] = (*v, part)
    return dict(sorted(out.items()))


def metrics_table() -> str:
    rows = [(f"`{n}`", t, ", ".join(f"`{x}`" for x in ls), f"`{g}`" if g else "always", h)
            for n, (t, h, ls, g) in metric_catalogue().items()]
    return _md(rows, ["metric", "type", "labels", "enabled by", "help"])


SECTIONS: dict[str, Callable[[], str]] = {
    "flags": flags_table, "feature-gates": gates_table, "annotations": keys_table, "metrics": metrics_table}


def render(readme: str) -> str:
    """README text with every generated section replaced by its current table."""
    for name, make in SECTIONS.items():
        begin, end = BEGIN.format(name), END.format(name)
        i, j = readme.find(begin), readme.find(end)
        if i < 0 or j < i:
            raise ValueError(f"README has no {begin} ... {end} section")
        readme = readme[:i + len(begin)] + "\n" + make() + readme[j:]
    return readme


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--write":
        path = Path(argv[1])
        path.write_text(render(path.read_text()))
        return 0
    for make in SECTIONS.values():
        sys.stdout.write(make() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
