"""CPU lists, the sysfs CPU topology and the LS/BE share pools, against upstream's cpuset and NRT test cases."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from apis.extension.numa_aware import CPUInfo
from apis.extension.resource_status import (
    ANNOTATION_RESOURCE_STATUS,
    CPUSetError,
    format_cpuset,
    parse_cpuset,
    resource_status,
    same_cpuset,
)
from koordlet.host.driver import CgroupDriver
from koordlet.states.cpupools import CPUTopology, SharePool, be_share_pools, decode_pools, encode_pools, share_pools
from koordlet.states.model import PodMeta

from simhost import SimHost


@pytest.mark.parametrize(("text", "want"), [
    ("", []), ("\n", []), ("0", [0]), ("0-3", [0, 1, 2, 3]), ("0-3,8", [0, 1, 2, 3, 8]),
    ("5,1-2,2", [1, 2, 5]), ("3-1", []), ("0-3\n", [0, 1, 2, 3]), ("+3", [3]),
])
def test_parse_cpuset(text: str, want: list[int]) -> None:
    assert parse_cpuset(text) == want


@pytest.mark.parametrize("text", ["a", "0,,1", "1-2-3", "-1", "0b", "0-4097", "1 ,2", "0-", "99999999999"])
def test_parse_cpuset_rejects(text: str) -> None:
    with pytest.raises(CPUSetError):
        parse_cpuset(text)


@pytest.mark.parametrize(("cpus", "want"), [
    ([], ""), ([5], "5"), ([0, 1, 2, 3], "0-3"), ([8, 0, 1, 2, 3], "0-3,8"), ([1, 3, 5], "1,3,5"),
    ([0, 1, 2, 3, 4, 5, 34, 46, 47, 48], "0-5,34,46-48"), ([2, 2, 3], "2-3"),
])
def test_format_cpuset_as_upstream_string(cpus: list[int], want: str) -> None:
    assert format_cpuset(cpus) == want
    assert parse_cpuset(want) == sorted(set(cpus))


def test_same_cpuset() -> None:
    assert same_cpuset("0-3", "0,1,2,3\n")
    assert not same_cpuset("0-3", "0-2")
    assert not same_cpuset("x", "x")


def test_topology_from_simulated_sysfs(tmp_path: Path) -> None:
    host = SimHost(tmp_path, 1, CgroupDriver.SYSTEMD, numa_cpus={0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}, threads=2)
    host.setup()
    topo = CPUTopology.read(host.paths)
    # sysfs core_id restarts per socket; logical cores are unique across sockets, numbered by lowest CPU
    assert topo.cpus == (
        CPUInfo(0, 0, 0, 0), CPUInfo(1, 0, 0, 0), CPUInfo(2, 1, 1, 1), CPUInfo(3, 1, 1, 1),
        CPUInfo(4, 2, 0, 0), CPUInfo(5, 2, 0, 0), CPUInfo(6, 3, 1, 1), CPUInfo(7, 3, 1, 1),
    )
    assert topo.cpus_by_node() == {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}
    assert topo.siblings()[2] == (4, 5)
    assert topo.to_json()["detail"][2] == {"id": 2, "core": 1, "socket": 1, "node": 1}


def test_topology_without_topology_files(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/system/node/node0").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/node0/cpulist").write_text("0-1\n")
    for c in (0, 1):
        (tmp_path / f"sys/devices/system/cpu/cpu{c}").mkdir(parents=True)
    from koordlet.host.paths import HostPaths

    topo = CPUTopology.read(HostPaths.under(str(tmp_path)))
    assert topo.cpus == (CPUInfo(0, 0, 0, 0), CPUInfo(1, 1, 0, 0))


def test_topology_of_this_host() -> None:
    from koordlet.host.paths import HostPaths

    topo = CPUTopology.read(HostPaths.under("/"))
    online = parse_cpuset(Path("/sys/devices/system/cpu/online").read_text())
    assert topo.ids() == online
    assert all(c.core >= 0 and c.socket >= 0 and c.node >= 0 for c in topo.cpus)


def pod(name: str, qos: str = "", status: Any = None, raw_annotation: str | None = None) -> PodMeta:
    annotations: dict[str, str] = {}
    if status is not None:
        annotations[ANNOTATION_RESOURCE_STATUS] = json.dumps(status)
    if raw_annotation is not None:
        annotations[ANNOTATION_RESOURCE_STATUS] = raw_annotation
    labels = {"koordinator.sh/qosClass": qos} if qos else {}
    raw = {"metadata": {"name": name, "namespace": "default", "uid": name, "annotations": annotations,
                        "labels": labels}}
    return PodMeta(name, "default", name, "Guaranteed", qos, "", "Running", f"pod{name}", (), raw)


# Upstream's dual-socket test node (states_noderesourcetopology_test.go): 104 CPUs, node 0 = 0-25,52-77.
def _two_socket() -> CPUTopology:
    rows = []
    for cpu in range(104):
        socket = 0 if cpu % 52 < 26 else 1
        rows.append((cpu, socket, cpu % 26, socket))
    return CPUTopology.from_raw(rows)


def test_pools_of_an_idle_node() -> None:
    topo = _two_socket()
    want = [SharePool(0, 0, "0-25,52-77"), SharePool(1, 1, "26-51,78-103")]
    assert share_pools(topo, []) == want
    assert be_share_pools(topo, []) == want
    assert encode_pools(want) == ('[{"socket":0,"node":0,"cpuset":"0-25,52-77"},'
                                  '{"socket":1,"node":1,"cpuset":"26-51,78-103"}]')


def test_ls_pools_lose_every_cpuset_pod_be_pools_only_lse() -> None:
    topo = _two_socket()
    pods = [pod("lse", "LSE", {"cpuset": "0"}), pod("lsr", "LSR", {"cpuset": "26-27"}),
            pod("ls", "LS"), pod("numa", "LS", {"numaNodeResources": [{"node": 1, "resources": {"cpu": "2"}}]})]
    assert share_pools(topo, pods) == [SharePool(0, 0, "1-25,52-77"), SharePool(1, 1, "28-51,78-103")]
    # upstream's `be-cpu-shared-pools` case: only the LSE pod's CPU 0 leaves the BE pool
    assert be_share_pools(topo, pods) == [SharePool(0, 0, "1-25,52-77"), SharePool(1, 1, "26-51,78-103")]


def test_reserved_system_and_kubelet_cpus_leave_both_pools() -> None:
    topo = CPUTopology.from_raw([(c, c // 4, c % 4, c // 4) for c in range(8)])
    got = share_pools(topo, [], reserved={0}, system_exclusive={1, 2}, kubelet_allocated={5})
    assert got == [SharePool(0, 0, "3"), SharePool(1, 1, "4,6-7")]
    assert be_share_pools(topo, [], reserved={0}, system_exclusive={1, 2}, kubelet_allocated={5}) == got


def test_a_node_with_all_cpus_reserved_keeps_an_empty_pool() -> None:
    # removeSystemQOSCPUs / removeNodeReservedCPUs act on grouped pools: the entry stays, its cpuset is omitted
    topo = CPUTopology.from_raw([(c, c // 2, c % 2, c // 2) for c in range(4)])
    got = share_pools(topo, [], system_exclusive={0, 1})
    assert got == [SharePool(0, 0, ""), SharePool(1, 1, "2-3")]
    assert encode_pools(got) == '[{"socket":0,"node":0},{"socket":1,"node":1,"cpuset":"2-3"}]'
    # a node whose CPUs all went to pods has no entry at all (covertCPUsToSharePool skips it)
    assert share_pools(topo, [pod("a", "LSR", {"cpuset": "0-1"})]) == [SharePool(1, 1, "2-3")]


def test_malformed_resource_status_skips_that_pod() -> None:
    topo = CPUTopology.from_raw([(c, 0, c, 0) for c in range(4)])
    skipped: list[tuple[PodMeta, str]] = []
    pods = [pod("bad", "LSR", raw_annotation="{"), pod("badset", "LSE", {"cpuset": "x"}),
            pod("ok", "LSR", {"cpuset": "1"})]
    assert share_pools(topo, pods, skipped=skipped) == [SharePool(0, 0, "0,2-3")]
    assert [p.name for p, _ in skipped] == ["bad", "badset"]


def test_resource_status_decoding() -> None:
    st = resource_status({ANNOTATION_RESOURCE_STATUS: json.dumps({
        "CPUSet": "0-1", "numaNodeResources": [{"node": 1, "resources": {"cpu": "1500m", "memory": "1Gi"}},
                                               {"node": 0, "resources": {"kubernetes.io/batch-cpu": 1000}},
                                               {"node": 2}],
        "unknown": True})})
    assert st.cpuset == "0-1" and st.cpus() == [0, 1]
    assert [n.node for n in st.numa_node_resources] == [1, 0, 2]
    assert st.numa_node_resources[0].resources["cpu"] == Decimal("1.5")
    assert [n.allocates_cpu() for n in st.numa_node_resources] == [True, True, False]
    assert st.numa_aware()
    assert resource_status({}).cpuset == ""
    assert resource_status({ANNOTATION_RESOURCE_STATUS: "null"}).numa_node_resources == ()
    assert not resource_status({ANNOTATION_RESOURCE_STATUS: '{"numaNodeResources":[{"node":0,"resources":'
                                                            '{"memory":"1Gi","cpu":"0"}}]}'}).numa_aware()


@pytest.mark.parametrize("text", ["[", "[]", '{"cpuset": 3}', '{"cpuset": "a-b"}', '{"numaNodeResources": {}}',
                                  '{"cpuset": 0}',
                                  '{"numaNodeResources": [{"node": "0"}]}',
                                  '{"numaNodeResources": [{"node": 0, "resources": {"cpu": "x"}}]}'])
def test_resource_status_rejects(text: str) -> None:
    with pytest.raises(InvalidInput):
        resource_status({ANNOTATION_RESOURCE_STATUS: text})


def test_decode_pools_round_trip() -> None:
    pools = [SharePool(0, 0, "0-3"), SharePool(1, 1, "")]
    assert decode_pools(encode_pools(pools)) == pools
    assert decode_pools("null") == [] and encode_pools([]) == "null"
    with pytest.raises(InvalidInput):
        decode_pools('[{"cpuset": "q"}]')
