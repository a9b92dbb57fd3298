"""The PodView protocol and its once-per-text annotation decoding, over the agent's, NRI's and the scheduler's pods."""

from __future__ import annotations

from typing import Any

import pytest

from apis.extension import device_allocated, resource_status
from apis.extension.errors import AnnotationError
from apis.extension.pod import PodView, device_allocations, pod_resource_status
from koordlet.nri.hooks.model import PodInfo
from koordlet.states.model import PodMeta
from scheduler.podview import SchedPod, pod_view

STATUS = "scheduling.koordinator.sh/resource-status"
DEVICES = "scheduling.koordinator.sh/device-allocated"
GOOD = '{"cpuset":"0-1","numaNodeResources":[{"node":0,"resources":{"cpu":"2"}}]}'
GPU = '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100"}}]}'


def raw(annotations: dict[str, str], name: str = "p") -> dict[str, Any]:
    return {"metadata": {"uid": "u1", "namespace": "ns", "name": name, "labels": {"a": "b"},
                         "annotations": annotations}}


def views(annotations: dict[str, str]) -> list[PodView]:
    pod = raw(annotations)
    meta = PodMeta(uid="u1", namespace="ns", name="p", k8s_qos="Burstable", koord_qos="LS", priority_class="",
                   phase="Running", cgroup_dir="", containers=(), raw=pod)
    info = PodInfo(sandbox_id="s", uid="u1", namespace="ns", name="p", labels={"a": "b"},
                   annotations=dict(annotations))
    return [meta, info, SchedPod(pod)]


def test_every_pod_type_reads_the_same() -> None:
    got = [(v.uid, v.namespace, v.name, dict(v.labels), pod_resource_status(v).cpus(),
            (device_allocations(v) or {})["gpu"][0].minor) for v in views({STATUS: GOOD, DEVICES: GPU})]
    assert got == [("u1", "ns", "p", {"a": "b"}, [0, 1], 1)] * 3
    for v in views({}):
        assert pod_resource_status(v) == resource_status.ResourceStatus()
        assert device_allocations(v) is None


def test_a_malformed_annotation_raises_for_every_pod_type() -> None:
    for v in views({STATUS: '{"cpuset": 3}', DEVICES: "{not json"}):
        with pytest.raises(AnnotationError):
            pod_resource_status(v)
        with pytest.raises(AnnotationError):
            device_allocations(v)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for module, name in ((resource_status, "decode_resource_status"), (device_allocated, "decode_device_allocations")):
        real = getattr(module, name)

        def counted(text: str, real: Any = real) -> Any:
            calls.append(text)
            return real(text)

        monkeypatch.setattr(module, name, counted)
    return calls


def test_each_annotation_is_decoded_once_per_text(decodes: list[str]) -> None:
    for v in views({STATUS: GOOD, DEVICES: GPU, "other": "x"}):
        decodes.clear()
        for _ in range(3):
            pod_resource_status(v)
            device_allocations(v)
        assert sorted(decodes) == sorted([GOOD, GPU])


def test_a_changed_text_is_decoded_again_and_an_error_is_kept(decodes: list[str]) -> None:
    pod = raw({STATUS: "{bad"}, "changed")
    view = pod_view(pod)
    for _ in range(2):
        with pytest.raises(AnnotationError):
            pod_resource_status(view)
    assert decodes == ["{bad"]
    pod["metadata"]["annotations"][STATUS] = GOOD  # the pod object updated in place
    assert pod_resource_status(pod_view(pod)).cpus() == [0, 1]
    assert decodes == ["{bad", GOOD]


def test_the_scheduler_shares_decodes_among_copies_of_a_pod_only(decodes: list[str]) -> None:
    a = raw({STATUS: GOOD}, "copied")
    copy = raw({STATUS: GOOD}, "copied")  # the next cycle's snapshot of the same pod
    other = raw({STATUS: GOOD}, "other")
    for pod in (a, copy, a):
        assert pod_resource_status(pod_view(pod)).cpus() == [0, 1]
    assert decodes == [GOOD]
    assert pod_resource_status(pod_view(other)).cpus() == [0, 1]
    assert decodes == [GOOD, GOOD]
