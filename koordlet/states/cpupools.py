"""CPU topology and the CPU share pools: the facts the NodeResourceTopology, the cpuset rule and BE suppress share.

Upstream: pkg/koordlet/util/cpuinfo.go (processor topology), pkg/koordlet/statesinformer/impl/
states_noderesourcetopology.go (calCPUSharePools, covertCPUsToSharePool, removeNodeReservedCPUs,
removeSystemQOSCPUs), apis/extension/numa_aware.go (CPUInfo, CPUSharedPool); the resource-status annotation and
the CPU list text are apis.extension.resource_status. Everything here is pure except `CPUTopology.read`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from apis.core.errors import HostReadError, InvalidInput
from apis.core.objects import JSON
from apis.extension.numa_aware import CPUInfo, cpu_topology_json
from apis.extension.pod import pod_resource_status
from apis.extension.qos import QOS_LSE, koord_qos_class
from apis.extension.resource_status import CPUSetError, format_cpuset, parse_cpuset
from koordlet.host.files import read_bytes
from koordlet.host.paths import HostPaths
from koordlet.states.model import PodMeta

_INT32_MAX = 2**31 - 1
_CPU_DIR = re.compile(r"^cpu(\d+)$")
_NODE_DIR = re.compile(r"^node(\d+)$")


@dataclass(frozen=True)
class CPUTopology:
    """The node's online logical CPUs, sorted by id (annotation `node.koordinator.sh/cpu-topology`)."""

    cpus: tuple[CPUInfo, ...]

    @classmethod
    def read(cls, paths: HostPaths) -> CPUTopology:
        """From sysfs: online CPUs, each one's `topology/{core_id,physical_package_id}` and its NUMA node dir.

        Upstream runs `lscpu -e=CPU,NODE,SOCKET,CORE,...`; its CORE is a logical core number unique across
        sockets, while sysfs core_id repeats per socket, so cores are numbered here by (socket, core_id) in order of
        their lowest CPU id, which is how lscpu numbers them. A CPU without topology files (a simulated node)
        counts as its own core on socket 0; one under no NUMA node dir on node 0.
        """
        cpu_base = paths.sys("devices", "system", "cpu")
        ids = _online_cpus(cpu_base)
        node_of = _numa_nodes(paths.sys("devices", "system", "node"))
        raw: list[tuple[int, int, int, int]] = []  # (cpu, socket, core_id, node)
        for cpu in ids:
            topo = os.path.join(cpu_base, f"cpu{cpu}", "topology")
            core_id = _read_int(os.path.join(topo, "core_id"), cpu)
            socket = _read_int(os.path.join(topo, "physical_package_id"), 0)
            raw.append((cpu, max(socket, 0), core_id, node_of.get(cpu, 0)))
        return cls.from_raw(raw)

    @classmethod
    def from_raw(cls, raw: Iterable[tuple[int, int, int, int]]) -> CPUTopology:
        """(cpu, socket, sysfs core_id, node) rows → topology with lscpu-style logical core numbers."""
        cores: dict[tuple[int, int], int] = {}
        out: list[CPUInfo] = []
        for cpu, socket, core_id, node in sorted(raw):
            core = cores.setdefault((socket, core_id), len(cores))
            out.append(CPUInfo(cpu, core, socket, node))
        return cls(tuple(out))

    def ids(self) -> list[int]:
        return [c.id for c in self.cpus]

    def by_id(self) -> dict[int, CPUInfo]:
        return {c.id: c for c in self.cpus}

    def cpus_by_node(self) -> dict[int, tuple[int, ...]]:
        nodes: dict[int, list[int]] = {}
        for c in self.cpus:
            nodes.setdefault(c.node, []).append(c.id)
        return {n: tuple(v) for n, v in sorted(nodes.items())}

    def siblings(self) -> dict[int, tuple[int, ...]]:
        """Logical core → its CPUs (hyper-thread siblings)."""
        cores: dict[int, list[int]] = {}
        for c in self.cpus:
            cores.setdefault(c.core, []).append(c.id)
        return {k: tuple(v) for k, v in sorted(cores.items())}

    def to_json(self) -> JSON:
        """extension.CPUTopology: `{"detail": [...]}`, `detail` omitted when empty (omitempty)."""
        return cpu_topology_json(self.cpus)


def _online_cpus(cpu_base: str) -> list[int]:
    try:
        return parse_cpuset(read_bytes(os.path.join(cpu_base, "online")).decode())
    except (HostReadError, CPUSetError, UnicodeDecodeError):
        pass
    try:
        names = os.listdir(cpu_base)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _CPU_DIR.match(n)))


def _numa_nodes(node_base: str) -> dict[int, int]:
    try:
        names = os.listdir(node_base)
    except OSError:
        return {}
    out: dict[int, int] = {}
    for name in names:
        m = _NODE_DIR.match(name)
        if not m:
            continue
        try:
            for cpu in parse_cpuset(read_bytes(os.path.join(node_base, name, "cpulist")).decode()):
                out.setdefault(cpu, int(m.group(1)))
        except (HostReadError, CPUSetError, UnicodeDecodeError):
            continue
    return out


def _read_int(path: str, default: int) -> int:
    try:
        return int(read_bytes(path).strip())
    except (HostReadError, ValueError):
        return default


@dataclass(frozen=True)
class SharePool:
    """extension.CPUSharedPool JSON {socket, node, cpuset}: the free CPUs of one NUMA node."""

    socket: int
    node: int
    cpuset: str

    def to_json(self) -> JSON:
        out: JSON = {"socket": self.socket, "node": self.node}
        if self.cpuset:
            out["cpuset"] = self.cpuset  # omitempty
        return out

    @classmethod
    def from_json(cls, value: object) -> SharePool:
        if not isinstance(value, dict):
            raise InvalidInput(f"share pool must be an object, not {value!r}")
        fields = _fold_fields(value)
        socket, node, cpuset = fields.get("socket", 0), fields.get("node", 0), fields.get("cpuset", "")
        if cpuset is None:
            cpuset = ""
        for name, v in (("socket", socket), ("node", node)):
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not -_INT32_MAX - 1 <= v <= _INT32_MAX:
                raise InvalidInput(f"share pool {name} must be an int32, not {v!r}")
        if not isinstance(cpuset, str):
            raise InvalidInput(f"share pool cpuset must be a string, not {cpuset!r}")
        parse_cpuset(cpuset)
        return cls(socket or 0, node or 0, cpuset)


def pools_cpus(pools: Sequence[SharePool]) -> str:
    """All pools' CPUs joined as the cpuset rule joins them (`strings.Join(cpusets, ",")`, in pool order)."""
    return ",".join(p.cpuset for p in pools)


def encode_pools(pools: Sequence[SharePool]) -> str:
    """The annotation value as Go's json.Marshal writes it: `null` for no pools (a nil slice)."""
    if not pools:
        return "null"
    return json.dumps([p.to_json() for p in pools], separators=(",", ":"))


def decode_pools(text: str) -> list[SharePool]:
    """A `cpu-shared-pools` annotation value; InvalidInput when malformed."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidInput(f"share pools: invalid JSON: {e}") from None
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise InvalidInput("share pools must be a JSON array")
    return [SharePool.from_json(x) for x in doc]


def _fold_fields(obj: Mapping[str, object]) -> JSON:
    """Struct fields by case-folded name; of keys folding alike, the later in the document wins (Go overwrites)."""
    return {k.lower(): v for k, v in obj.items()}


def pod_cpuset(pod: PodMeta) -> list[int]:
    """CPUs the scheduler bound the pod to (resource-status `cpuset`), [] for none; InvalidInput when malformed."""
    return pod_resource_status(pod).cpus()


def _pools(topo: CPUTopology, free: Collection[int]) -> list[SharePool]:
    """Free CPUs grouped per NUMA node, sorted by (socket, node) (upstream covertCPUsToSharePool); a node's socket
    is its lowest free CPU's (upstream takes an arbitrary CPU's, identical on real hardware)."""
    by_node: dict[int, list[CPUInfo]] = {}
    for c in topo.cpus:
        if c.id in free:
            by_node.setdefault(c.node, []).append(c)
    pools = [SharePool(cpus[0].socket, node, format_cpuset(c.id for c in cpus)) for node, cpus in by_node.items()]
    return sorted(pools, key=lambda p: (p.socket, p.node))


def _free(topo: CPUTopology, pods: Iterable[PodMeta], kubelet_allocated: Collection[int], *, only_lse: bool,
          skipped: list[tuple[PodMeta, str]] | None) -> set[int]:
    free = set(topo.ids()) - set(kubelet_allocated)
    for pod in pods:
        if only_lse and koord_qos_class(pod.raw) != QOS_LSE:  # GetPodQoSClassRaw: the label only
            continue
        try:
            free.difference_update(pod_cpuset(pod))
        except InvalidInput as e:
            if skipped is not None:
                skipped.append((pod, str(e)))
    return free


def _without(pools: list[SharePool], taken: Collection[int]) -> list[SharePool]:
    """Reserved and exclusive SYSTEM CPUs come out of the pools after grouping, as upstream's removeNodeReservedCPUs
    and removeSystemQOSCPUs do: a node whose free CPUs are all taken keeps its entry, without a cpuset."""
    if not taken:
        return pools
    gone = set(taken)
    return [SharePool(p.socket, p.node, format_cpuset(c for c in parse_cpuset(p.cpuset) if c not in gone))
            for p in pools]


def share_pools(topo: CPUTopology, pods: Iterable[PodMeta], reserved: Collection[int] = frozenset(),
                system_exclusive: Collection[int] = frozenset(), kubelet_allocated: Collection[int] = frozenset(),
                skipped: list[tuple[PodMeta, str]] | None = None) -> list[SharePool]:
    """LS share pools (`node.koordinator.sh/cpu-shared-pools`): all CPUs minus every pod's resource-status cpuset
    and the CPUs the kubelet static policy handed out, grouped per NUMA node, then minus the node's reserved CPUs
    and the exclusive SYSTEM QoS CPUs. A pod whose annotation does not parse is skipped (appended to `skipped`),
    as upstream logs and continues."""
    free = _free(topo, pods, kubelet_allocated, only_lse=False, skipped=skipped)
    return _without(_pools(topo, free), set(reserved) | set(system_exclusive))


def be_share_pools(topo: CPUTopology, pods: Iterable[PodMeta], reserved: Collection[int] = frozenset(),
                   system_exclusive: Collection[int] = frozenset(), kubelet_allocated: Collection[int] = frozenset(),
                   skipped: list[tuple[PodMeta, str]] | None = None) -> list[SharePool]:
    """BE share pools (`node.koordinator.sh/be-cpu-shared-pools`): as the LS pools, but only LSE pods' cpusets are
    taken out (BE pods may share LSR pods' CPUs)."""
    free = _free(topo, pods, kubelet_allocated, only_lse=True, skipped=skipped)
    return _without(_pools(topo, free), set(reserved) | set(system_exclusive))
