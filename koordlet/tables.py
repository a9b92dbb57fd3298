"""`-o table`: what a person reads — the Device, NodeMetric and QoS plan as kubectl-style tables, one line per item."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from apis.core.objects import JSONMapping
from apis.extension.device_share import LABEL_GPU_MODEL, LABEL_RDMA_NETDEV
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY

NONE = "<none>"  # kubectl's cell for an absent value
_GAP = "   "  # kubectl's tabwriter padding
_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def cell(value: object) -> str:
    """One cell on one line: None and "" are <none>, booleans lower case as in YAML, control characters escaped
    (a value never breaks the one-line-per-item rule)."""
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).translate(_ESCAPES)


def render(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Upper-case header, then one line per row; columns left-aligned and separated by spaces, no borders, no
    trailing spaces (the last column is never padded, so it may hold free text)."""
    lines = [[h.upper() for h in header], *([cell(v) for v in row] for row in rows)]
    for line in lines:
        if len(line) != len(header):
            raise ValueError(f"row has {len(line)} cells, header {len(header)}: {line!r}")
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        padded = [text.ljust(w) for text, w in zip(line, widths, strict=False)] + line[len(widths):]
        out.append(_GAP.join(padded).rstrip())
    return "\n".join(out) + "\n"


def sections(*tables: str) -> str:
    """Several tables one after another, a blank line between them."""
    return "\n".join(t for t in tables if t)


# --- the objects the commands print ----------------------------------------------------------------------------

def _get(obj: object, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj


def device_table(device: JSONMapping) -> str:
    """`koordlet devices -o table`: one line per device of the Device CR."""
    labels = _get(device, "metadata", "labels") or {}
    rows = []
    for d in _get(device, "spec", "devices") or []:
        topo = d.get("topology") or {}
        dlabels = d.get("labels") or {}
        vfs = [vf for g in d.get("vfGroups") or [] for vf in g.get("vfs") or []]
        numa = topo.get("nodeID")
        rows.append((
            d.get("type"), d.get("minor"), d.get("id"), _health(d),
            labels.get(LABEL_GPU_MODEL) if d.get("type") == "gpu" else None,
            _get(d, "resources", RESOURCE_GPU_MEMORY), None if numa is None or numa < 0 else numa,
            topo.get("pcieID"), topo.get("busID"), len(vfs) if d.get("vfGroups") is not None else None,
            dlabels.get(LABEL_RDMA_NETDEV),
        ))
    return render(("type", "minor", "id", "health", "model", "memory", "numa", "pcie", "bus", "vfs", "netdev"),
                  rows)


def _health(d: JSONMapping) -> str:
    """Healthy, or why not: the reason of the device's failing condition when it has one."""
    if d.get("health"):
        return "Healthy"
    for c in d.get("conditions") or []:
        if c.get("status") == "False" and c.get("reason"):
            return str(c["reason"])
    return "Unhealthy"


def nodemetric_table(nm: JSONMapping) -> str:
    """`koordlet nodemetric -o table`: the node's line, its GPUs' lines when it has any, one line per pod."""
    status = nm.get("status") or {}
    node_usage = _get(status, "nodeMetric", "nodeUsage") or {}
    pods = status.get("podsMetric") or []
    gpu_cols = bool(node_usage.get("devices")) or any(_get(p, "podUsage", "devices") for p in pods)
    node = render(("node", "cpu", "memory", "system-cpu", "system-memory", "pods", "updated"), [(
        _get(nm, "metadata", "name"), _get(node_usage, "resources", "cpu"), _get(node_usage, "resources", "memory"),
        _get(status, "nodeMetric", "systemUsage", "resources", "cpu"),
        _get(status, "nodeMetric", "systemUsage", "resources", "memory"), len(pods), status.get("updateTime"))])
    gpus = "" if not node_usage.get("devices") else render(
        ("type", "minor", "id", "gpu-core", "gpu-memory"),
        [(d.get("type"), d.get("minor"), d.get("id"), _get(d, "resources", RESOURCE_GPU_CORE),
          _get(d, "resources", RESOURCE_GPU_MEMORY)) for d in node_usage["devices"]])
    header = ["namespace", "name", "qos", "priority", "cpu", "memory"]
    rows = []
    for p in pods:
        usage = p.get("podUsage") or {}
        row: list[object] = [p.get("namespace"), p.get("name"), p.get("qos"), p.get("priority"),
                             _get(usage, "resources", "cpu"), _get(usage, "resources", "memory")]
        if gpu_cols:  # a pod's GPUs summed: the per-GPU split is in -o json/yaml
            row += [_sum(usage.get("devices"), RESOURCE_GPU_CORE), _sum(usage.get("devices"), RESOURCE_GPU_MEMORY)]
        rows.append(row)
    if gpu_cols:
        header += ["gpu-core", "gpu-memory"]
    return sections(node, gpus, render(header, rows))


def _sum(devices: Any, resource: str) -> str | None:
    """Several GPUs' values of one resource, joined: `40+20`; None when the pod uses no GPU."""
    values = [str(_get(d, "resources", resource) or "0") for d in devices or []]
    return "+".join(values) or None


def plan_table(plan: JSONMapping) -> str:
    """`koordlet plan -o table`: one line per write, in the order they would happen, then the pods the eviction
    strategies would evict (in their order), then the errors."""
    writes = render(("op", "path", "value", "reason"),
                    [(w.get("op", "write"), w.get("path"), w.get("value"), w.get("reason"))
                     for w in plan.get("writes") or []])
    evictions = plan.get("evictions") or []
    evicts = render(("evict", "feature", "reason", "message"),
                    [(e.get("pod"), e.get("feature"), e.get("reason"), e.get("message")) for e in evictions]) \
        if evictions else ""
    return sections(writes, evicts, _errors(plan))


def qos_table(result: JSONMapping) -> str:
    """`koordlet qos --once -o table`: writes per result, then the errors."""
    counts = render(("result", "writes"), sorted((result.get("results") or {}).items()))
    return sections(counts, _errors(result))


def _errors(obj: JSONMapping) -> str:
    errors = obj.get("errors") or []
    if not errors:
        return ""
    return render(("object", "field", "reason", "message"),
                  [(e.get("object"), e.get("field"), e.get("reason"), e.get("message")) for e in errors])


def _ms(seconds: Any) -> str | None:
    return None if seconds is None else f"{seconds * 1000:.3f}"


def schedlat_table(rows: Sequence[JSONMapping]) -> str:
    """`koordlet sched-latency -o table`: one line per pod, waits in milliseconds (p50/p99 only with eBPF)."""
    return render(["namespace", "name", "qos", "source", "waits", "sum(ms)", "mean(ms)", "p50(ms)", "p99(ms)"],
                  ([r["namespace"], r["name"], r["qosClass"], r["source"], r["count"], _ms(r["sumSeconds"]),
                    _ms(r["sumSeconds"] / r["count"]) if r["count"] else None, _ms(r["p50Seconds"]),
                    _ms(r["p99Seconds"])] for r in rows))
