"""NVLink matrices → partition tables: NVSwitch fabrics, direct-link meshes, bridged pairs, PCIe-only."""

from __future__ import annotations

from koordlet.devices.nvidia.backend import GpuInfo, NvLink
from koordlet.devices.nvidia.topology import nvlink_matrix, pair, partitions

SPEED = 26562


def _bus(m: int) -> str:
    return f"0000:{0x10 + m:02x}:00.0"


def _gpu(m: int, links: list[NvLink], peers: list[int]) -> GpuInfo:
    return GpuInfo(bus_id=_bus(m), index=m, name="NVIDIA H100", uuid=f"GPU-{m}", minor=m, memory_total=1,
                   nvlinks=tuple(links), nvlink_peers=tuple(_bus(p) for p in peers))


def nvswitch(n: int = 8, links: int = 18, speed: int | None = SPEED) -> list[GpuInfo]:
    return [_gpu(m, [NvLink(i, True, speed, "switch", "0000:83:00.0") for i in range(links)],
                 [p for p in range(n) if p != m]) for m in range(n)]


def direct(edges: dict[tuple[int, int], int], n: int, speed: int = 25000) -> list[GpuInfo]:
    """GPUs wired to each other with `edges[(a, b)]` links (no switch), as on DGX-1 or bridged PCIe cards."""
    links: dict[int, list[NvLink]] = {m: [] for m in range(n)}
    for (a, b), count in edges.items():
        for _ in range(count):
            links[a].append(NvLink(len(links[a]), True, speed, "gpu", _bus(b)))
            links[b].append(NvLink(len(links[b]), True, speed, "gpu", _bus(a)))
    peers = {m: sorted({b for a, b in edges if a == m} | {a for a, b in edges if b == m}) for m in range(n)}
    return [_gpu(m, links[m], peers[m]) for m in range(n)]


def _groups(parts: list[dict[str, object]]) -> dict[int, list[list[int]]]:
    out: dict[int, list[list[int]]] = {}
    for p in parts:
        minors = p["minors"]
        assert isinstance(minors, list)
        out.setdefault(len(minors), []).append(minors)
    return out


def test_nvswitch_all_to_all_gives_hopper_table() -> None:
    parts = partitions(nvswitch())
    assert _groups(parts) == {1: [[m] for m in range(8)], 2: [[0, 1], [2, 3], [4, 5], [6, 7]],
                              4: [[0, 1, 2, 3], [4, 5, 6, 7]], 8: [list(range(8))]}
    # NV18 at 26.562 GB/s per link: 478.116 GB/s one way.
    assert {p["ringBusBandwidth"] for p in parts} == {"478116M"}
    assert {(p["gpuLinkType"], p["allocationScore"]) for p in parts} == {("NVLink", 1)}
    assert pair(nvswitch()[0], nvswitch()[5]) is not None
    assert pair(nvswitch()[0], nvswitch()[5]).links == 18  # type: ignore[union-attr]


def test_unknown_link_speed_omits_bandwidth() -> None:
    parts = partitions(nvswitch(4, links=12, speed=None))
    assert _groups(parts) == {1: [[0], [1], [2], [3]], 2: [[0, 1], [2, 3]], 4: [[0, 1, 2, 3]]}
    assert all("ringBusBandwidth" not in p for p in parts)


def test_pcie_only_has_no_partitions() -> None:
    assert partitions([_gpu(m, [], []) for m in range(8)]) == []
    assert nvlink_matrix([_gpu(m, [], []) for m in range(4)]) == {}


def test_hybrid_cube_mesh() -> None:
    # DGX-1 style: 0-3 and 4-7 fully connected, plus 0-4, 1-5, 2-6, 3-7: no 8-GPU clique.
    edges = {(a, b): 1 for q in (range(4), range(4, 8)) for a in q for b in q if a < b}
    edges.update({(m, m + 4): 1 for m in range(4)})
    edges[(0, 1)] = 2  # a doubled link: that pair is faster, but groups run at their slowest pair
    parts = partitions(direct(edges, 8))
    assert _groups(parts) == {1: [[m] for m in range(8)], 2: [[0, 1], [2, 3], [4, 5], [6, 7]],
                              4: [[0, 1, 2, 3], [4, 5, 6, 7]]}
    by_minors = {tuple(p["minors"]): p.get("ringBusBandwidth") for p in parts}
    assert by_minors[(0, 1)] == "50G" and by_minors[(2, 3)] == "25G" and by_minors[(0, 1, 2, 3)] == "25G"
    assert by_minors[(0,)] == "125G"  # GPU 0 has 5 links in total (two to GPU 1)


def test_bridged_pairs_off_the_buddy_grid_are_found() -> None:
    # NVLink bridges join 0-2 and 1-3 (4 PCIe cards): the aligned pairs {0,1},{2,3} are not linked.
    parts = partitions(direct({(0, 2): 4, (1, 3): 4}, 4))
    assert _groups(parts) == {1: [[0], [1], [2], [3]], 2: [[0, 2], [1, 3]]}


def test_gpus_without_nvlink_are_left_out() -> None:
    gpus = direct({(0, 1): 2}, 3)  # GPU 2 has no NVLink at all
    assert _groups(partitions(gpus)) == {1: [[0], [1]], 2: [[0, 1]]}


def test_peer_without_link_details_is_connected_without_bandwidth() -> None:
    a, b = _gpu(0, [], [1]), _gpu(1, [], [0])
    p = pair(a, b)
    assert p is not None and p.bandwidth is None
    assert partitions([a, b]) == [{"minors": [0], "gpuLinkType": "NVLink", "allocationScore": 1},
                                  {"minors": [1], "gpuLinkType": "NVLink", "allocationScore": 1},
                                  {"minors": [0, 1], "gpuLinkType": "NVLink", "allocationScore": 1}]
