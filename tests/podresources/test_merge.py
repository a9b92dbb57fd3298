"""The merge as a pure function (spec §5, §7 item 17) and each [quirk] decision of docs/podresources.md."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from koordlet.pb import podresources_v1_pb2 as v1
from koordlet.podresources.merge import (
    MALFORMED,
    NO_ID,
    UNKNOWN_TYPE,
    index_pods,
    merge_get,
    merge_list,
    to_v1alpha1,
)

from fakekubelet import entry, pod
from proxyharness import metas

RDMA, GPU = "koordinator.sh/rdma", "nvidia.com/gpu"
ITEM_17 = ('{"rdma":[{"minor":0,"id":"0000:09:00.0","extension":{"vfs":[{"busID":"0000:09:00.2"},'
           '{"busID":"0000:09:00.3"}]}}],"gpu":[{"minor":1,"id":"GPU-abc"}]}')


def merged(annotation: Any, *kubelet_entries: v1.PodResources, raw: bool = False) -> tuple[
        v1.ListPodResourcesResponse, list[Any]]:
    response = v1.ListPodResourcesResponse(pod_resources=kubelet_entries or [entry("p", containers=("a", "b"))])
    p = pod("p", raw_annotation=annotation) if raw else pod("p", allocation=annotation)
    out, problems = merge_list(response, index_pods(metas([p])))
    return out, problems


def devices(response: v1.ListPodResourcesResponse, container: int = 0) -> list[tuple[str, list[str]]]:
    return [(d.resource_name, list(d.device_ids)) for d in response.pod_resources[0].containers[container].devices]


def test_spec_item_17() -> None:
    kubelet = v1.ListPodResourcesResponse(pod_resources=[entry("p", containers=("a", "b"))])
    before = kubelet.SerializeToString()
    out, problems = merge_list(kubelet, index_pods(metas([pod("p", raw_annotation=ITEM_17)])))
    assert devices(out) == [(RDMA, ["0000:09:00.2", "0000:09:00.3"]), (GPU, ["GPU-abc"])]
    assert out.pod_resources[0].containers[1] == kubelet.pod_resources[0].containers[1]
    assert kubelet.SerializeToString() == before  # kubelet's answer is not changed
    assert problems == []


def test_kubelets_own_devices_sort_with_ours() -> None:
    out, _ = merged({"gpu": [{"minor": 0, "id": "GPU-1"}]},
                    entry("p", devices={"zz.io/x": ["1"], "aa.io/y": ["2"], "mm.io/z": ["3"]}))
    assert [name for name, _ in devices(out)] == ["aa.io/y", "mm.io/z", GPU, "zz.io/x"]


def test_unknown_type_is_skipped_not_an_empty_resource_name() -> None:
    out, problems = merged({"fpga": [{"minor": 0, "id": "fpga-0"}], "gpu": [{"minor": 0, "id": "GPU-1"}]})
    assert devices(out) == [(GPU, ["GPU-1"])]
    assert [(p.kind, p.field) for p in problems] == [(UNKNOWN_TYPE, "fpga")]


def test_an_allocation_without_id_lists_nothing_for_it() -> None:
    out, problems = merged({"gpu": [{"minor": 0}, {"minor": 1, "id": "GPU-1"}],
                            "rdma": [{"minor": 0, "id": "0000:09:00.0", "extension": {"vfs": [{"minor": 3}]}}]})
    assert devices(out) == [(GPU, ["GPU-1"])]
    assert [(p.kind, p.field) for p in problems] == [(NO_ID, "gpu[0].id"), (NO_ID, "rdma[0].extension.vfs[0].busID")]


def test_an_extension_without_vfs_keeps_the_id() -> None:
    """Upstream drops the id whenever `extension` is set ([quirk]); the VFs replace it only when there are some."""
    out, _ = merged({"gpu": [{"minor": 0, "id": "GPU-1", "extension": {"gpuSharedResourceTemplate": "1g.10gb"}}],
                     "rdma": [{"minor": 0, "id": "0000:09:00.0", "extension": {"vfs": []}}]})
    assert devices(out) == [(RDMA, ["0000:09:00.0"]), (GPU, ["GPU-1"])]


def test_ids_kubelet_already_lists_are_not_listed_twice() -> None:
    out, _ = merged({"rdma": [{"minor": 0, "id": "pf", "extension": {"vfs": [{"busID": "vf1"}, {"busID": "vf2"},
                                                                              {"busID": "vf2"}]}}]},
                    entry("p", containers=("a", "b"), devices={RDMA: ["vf1"]}))
    assert devices(out) == [(RDMA, ["vf1"]), (RDMA, ["vf2"])]


def test_nothing_to_add_leaves_the_entry_alone() -> None:
    kubelet = entry("p", devices={"zz.io/x": ["1"], "aa.io/y": ["2"]})
    for annotation in ({}, {"rdma": []}, {"gpu": None}, None):
        out, problems = merged(annotation, kubelet)
        assert out.pod_resources[0] == kubelet and problems == []


def test_a_pod_without_containers_or_unknown_to_the_agent_is_kubelets() -> None:
    no_containers = v1.PodResources(name="p", namespace="default")
    stranger = entry("q")
    out, _ = merged({"gpu": [{"minor": 0, "id": "GPU-1"}]}, no_containers, stranger)
    assert list(out.pod_resources) == [no_containers, stranger]


def test_malformed_is_reported_and_changes_nothing() -> None:
    kubelet = entry("p", devices={"x.io/y": ["1"]})
    out, problems = merged('{"gpu": [{"minor": 1.5}]}', kubelet, raw=True)
    assert out.pod_resources[0] == kubelet
    assert [(p.pod, p.kind, p.field) for p in problems] == [("default/p", MALFORMED, "gpu[0].minor")]


def test_get_is_merged_like_list() -> None:
    response = v1.GetPodResourcesResponse(pod_resources=entry("p"))
    out, _ = merge_get(response, index_pods(metas([pod("p", raw_annotation=ITEM_17)])))
    assert [(d.resource_name, list(d.device_ids)) for d in out.pod_resources.containers[0].devices] == [
        (RDMA, ["0000:09:00.2", "0000:09:00.3"]), (GPU, ["GPU-abc"])]


def test_a_pod_being_replaced_yields_to_its_successor() -> None:
    old = pod("web-0", allocation={"gpu": [{"minor": 0, "id": "old"}]}, uid="1", deleting=True)
    new = pod("web-0", allocation={"gpu": [{"minor": 1, "id": "new"}]}, uid="2")
    for order in ([old, new], [new, old]):
        assert index_pods(metas(order))[("default", "web-0")].uid == "2"


def test_v1alpha1_keeps_names_and_ids_only() -> None:
    out, _ = merged(json.loads(ITEM_17))
    data = to_v1alpha1(out.SerializeToString())
    back = v1.ListPodResourcesResponse.FromString(data)
    assert devices(back) == devices(out)
    assert list(back.pod_resources[0].containers[0].cpu_ids) == []


_ids = st.one_of(st.none(), st.text(max_size=6))
_alloc = st.fixed_dictionaries({"minor": st.integers(0, 7)}, optional={
    "id": _ids, "extension": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "vfs": st.one_of(st.none(), st.lists(st.fixed_dictionaries({}, optional={"busID": _ids}), max_size=3))}))})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["gpu", "rdma", "fpga", "xpu"]), st.one_of(st.none(), st.lists(_alloc,
                                                                                                    max_size=3))))
def test_never_an_empty_name_or_id_and_every_id_accounted_for(annotation: dict[str, Any]) -> None:
    out, problems = merged(annotation)
    listed = [(name, i) for name, ids in devices(out) for i in ids]
    assert all(name in (GPU, RDMA) and i for name, i in listed)
    assert len(listed) == len({(n, i) for n, i in listed})
    assert all(p.kind in (NO_ID, UNKNOWN_TYPE) for p in problems)
    pod_annotation = pod("p", allocation=annotation)["metadata"]["annotations"][ANNOTATION_DEVICE_ALLOCATED]
    assert json.loads(pod_annotation) == annotation
