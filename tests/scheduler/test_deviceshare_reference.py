"""Device lists found by comparison: a node's Device CR whose entries equal (ids aside) those of a list parsed before
takes that list's layout without being read further (and its node's state takes it from the arrays' read in
prepare). Whatever layout is handed out parses as the CR itself does, and twin runs with and without the comparison
place the same pods with the same `device-allocated` annotations, ids included."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest

import scheduler.deviceshare.state as device_state
from scheduler.cli import profile
from scheduler.cluster import NodeInfo, build_cluster
from scheduler.deviceshare.state import DeviceState, NodeDeviceState, device_layout, parse_layout, unused_totals
from scheduler.framework import Scheduler

ALLOCATED = "scheduling.koordinator.sh/device-allocated"
GPU = {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi", "koordinator.sh/gpu-memory-ratio": "100"}


def _cr(name: str) -> dict[str, Any]:
    devices: list[dict[str, Any]] = [
        {"type": "gpu", "id": f"GPU-{name}-{m}", "minor": m, "health": True, "resources": dict(GPU),
         "topology": {"socketID": -1, "nodeID": m // 2, "pcieID": f"pci{m // 2}", "busID": f"b{m}"}}
        for m in range(4)]
    devices += [{"type": "rdma", "id": f"{name}-nic{k}", "minor": k, "health": True,
                 "resources": {"koordinator.sh/rdma": "100"}, "labels": {"model": "cx7"},
                 "topology": {"socketID": -1, "nodeID": k, "pcieID": f"pci{k}", "busID": f"n{k}"},
                 "vfGroups": [{"labels": {"kind": "vf"},
                               "vfs": [{"minor": v, "busID": f"n{k}.{v}"} for v in range(2)]}]}
                for k in range(2)]
    return {"kind": "Device", "metadata": {"name": name}, "spec": {"devices": devices}}


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(cr: dict[str, Any]) -> None:
        target: Any = cr["spec"]["devices"]
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return change


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def change(cr: dict[str, Any]) -> None:
        target: Any = cr["spec"]["devices"]
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]
    return change


# Each variant differs from _cr in one value; some parse alike (health 1), most do not, several compare equal
# under == while being another JSON value (1.0, true) or sit where the parse reads them through str().
VARIANTS: dict[str, Callable[[dict[str, Any]], None]] = {
    "same": lambda cr: None,
    "pcieID": _set((1, "topology", "pcieID"), "pciX"),
    "nodeID": _set((1, "topology", "nodeID"), 1),
    "nodeID 1.0": _set((2, "topology", "nodeID"), 1.0),
    "busID of a GPU": _set((0, "topology", "busID"), "other"),
    "health false": _set((3, "health"), False),
    "health 1": _set((3, "health"), 1),
    "minor 1.0": _set((1, "minor"), 1.0),
    "minor true": _set((1, "minor"), True),
    "resources": _set((2, "resources", "koordinator.sh/gpu-core"), "50"),
    "VF busID": _set((4, "vfGroups", 0, "vfs", 1, "busID"), "n0.9"),
    "VF minor": _set((4, "vfGroups", 0, "vfs", 1, "minor"), 7),
    "VF group labels": _set((5, "vfGroups", 0, "labels", "kind"), "pf"),
    "entry labels": _set((4, "labels", "model"), "cx6"),
    "an extra field": _set((0, "vendor"), "nvidia"),
    "entries reordered": lambda cr: cr["spec"]["devices"].reverse(),
    "no topology": _drop((1, "topology")),
}


def _variant(name: str, what: str) -> dict[str, Any]:
    cr = _cr(name)
    VARIANTS[what](cr)
    return cr


def _fresh() -> None:
    """No reference list, nothing given up on: each test chooses its references."""
    device_state._REFERENCES.clear()
    device_state._UNMATCHED.clear()


def _parsed(cr: dict[str, Any]) -> str:
    layout, ids = parse_layout(cr)
    return repr((layout.devices, ids))  # repr: 1, 1.0 and True told apart


@pytest.mark.parametrize("first", ["same", "health 1", "VF minor"])
def test_a_layout_handed_out_parses_as_the_cr_itself(first: str) -> None:
    _fresh()
    device_layout(_variant("ref", first))  # parsed, remembered, the reference
    shared = 0
    for k, what in enumerate(VARIANTS):
        cr = _variant(f"n{k}", what)
        layout, ids = device_layout(cr)
        assert repr((layout.devices, ids)) == _parsed(cr), what
        totals, matched = device_state.unused_layout(cr)
        assert totals == unused_totals(cr), what
        if matched is not None:
            assert matched[0].unused == (totals.types, totals.total_sum, totals.gpus), what
            shared += 1
    assert shared >= 2  # the reference's equals (ids aside) took its layout


def test_lists_the_parse_reads_through_str_with_numbers_are_never_references() -> None:
    _fresh()
    for k, (path, value) in enumerate([((1, "topology", "pcieID"), 1), ((4, "vfGroups", 0, "vfs", 0, "busID"), 2),
                                       ((4, "labels", "model"), 3)]):
        cr = _cr(f"odd{k}")
        _set(path, value)(cr)
        device_layout(cr)
        twin = _cr(f"twin{k}")
        _set(path, True if value == 1 else float(value))(twin)  # == to the odd value, another JSON value
        assert device_state.matched_layout(twin) is None
        assert repr((device_layout(twin)[0].devices, device_layout(twin)[1])) == _parsed(twin)


def test_an_entry_whose_id_is_swapped_for_a_field_the_parse_reads_is_not_taken() -> None:
    _fresh()
    ref = _cr("ref")
    del ref["spec"]["devices"][0]["resources"]  # a GPU declaring nothing, with an id
    device_layout(ref)
    other = _cr("other")
    del other["spec"]["devices"][0]["id"]  # the same fields but resources instead of the id: as many fields
    assert device_state.matched_layout(other) is None
    assert repr((device_layout(other)[0].devices, device_layout(other)[1])) == _parsed(other)


def _objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, what in enumerate(itertools.islice(itertools.cycle(VARIANTS), 36)):
        name = f"n{i:02d}"
        out.append({"kind": "Node", "metadata": {"name": name}, "spec": {},
                    "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "40",
                                               "koordinator.sh/gpu": "400", "koordinator.sh/rdma": "200"}}})
        out.append(_variant(name, what))
    return out


SHAPES = [{"koordinator.sh/gpu": "100"}, {"koordinator.sh/gpu": "200"},
          {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
          {"koordinator.sh/gpu": "100", "koordinator.sh/rdma": "1"}]


def _place(objects: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    _fresh()
    sched = Scheduler(build_cluster(copy.deepcopy(objects)), profile(None))
    sched.prepare(freeze=False)
    out = []
    for k in range(60):
        requests = {"cpu": "1", **SHAPES[k % len(SHAPES)]}
        annotations = ({"scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"]}'}
                       if "koordinator.sh/rdma" in requests else {})
        placed = sched.schedule({"kind": "Pod", "metadata": {"name": f"p{k}", "namespace": "t",
                                                              "annotations": annotations},
                                 "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}})
        out.append((placed.node, placed.annotations.get(ALLOCATED, "")))
    return out


def test_placements_and_ids_equal_the_plain_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    matching = _place(_objects())
    with monkeypatch.context() as m:  # no list found by comparison: every node read by the key, as before
        m.setattr(device_state, "matched_layout", lambda device: None)
        plain = _place(_objects())
    assert matching == plain
    assert sum(node is not None for node, _ in matching) >= 40
    for node, allocated in matching:  # each id names the node it was allocated on
        for items in (json.loads(allocated) if allocated else {}).values():
            assert all(node in a["id"] for a in items if a.get("id"))


def test_the_state_built_on_the_first_filter_takes_the_prepare_read() -> None:
    _fresh()
    crs = [_variant(f"n{k}", "same") for k in range(3)]
    state = DeviceState()
    nodes = [NodeInfo(cr["metadata"]["name"], {}, {}, device=cr) for cr in crs]
    for node in nodes:
        state.totals(node)  # what prepare reads: the first list parsed, the others matched
    calls: list[int] = []
    real = device_state.device_layout

    def counted(device: dict[str, Any] | None) -> device_state.Layout:
        calls.append(1)
        return real(device)

    device_state.device_layout = counted
    try:
        built = [state.node(node) for node in nodes]
    finally:
        device_state.device_layout = real
    assert calls == [] and built[1].layout is built[2].layout
    for st, cr in zip(built, crs, strict=True):
        fresh = NodeDeviceState(NodeInfo(cr["metadata"]["name"], {}, {}, device=cr))
        assert (st.ids, repr(st.devices)) == (fresh.ids, repr(fresh.devices))


def test_lists_that_cannot_be_references_are_read_as_before_and_their_key_not_built_for_each_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh()
    keyed: list[int] = []
    real = device_state._layout_key

    def counted(device: dict[str, Any] | None) -> tuple[object, ...] | None:
        keyed.append(1)
        return real(device)

    monkeypatch.setattr(device_state, "_layout_key", counted)
    crs = []
    for k in range(6):
        cr = _cr(f"m{k}")
        _set((4, "vfGroups", 0, "vfs", 0, "busID"), 7)(cr)  # read through str(): no reference
        crs.append(cr)
    state = DeviceState()
    nodes = [NodeInfo(cr["metadata"]["name"], {}, {}, device=cr) for cr in crs]
    for node, cr in zip(nodes, crs, strict=True):
        assert state.totals(node) == unused_totals(cr)
    assert len(keyed) <= 3  # the first node's list: tried, parsed, found no reference; the others read as before
    for node, cr in zip(nodes, crs, strict=True):
        st = state.node(node)
        assert repr((st.devices, st.ids)) == _parsed(cr)
