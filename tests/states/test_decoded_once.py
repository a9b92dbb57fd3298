"""The agent's readers of a pod's resource-status (share pools, kubelet's static-policy pods) decode it once per
PodMeta, not once per reader."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from apis.extension import resource_status as rs
from koordlet.states.cpupools import pod_cpuset
from koordlet.states.kubeletcpu import kubelet_pod_allocs
from koordlet.states.model import PodMeta

STATUS = '{"cpuset":"2-3"}'


def meta() -> PodMeta:
    raw: dict[str, Any] = {"metadata": {"uid": "u1", "namespace": "ns", "name": "p", "labels": {},
                                        "annotations": {"scheduling.koordinator.sh/resource-status": STATUS}}}
    return PodMeta(uid="u1", namespace="ns", name="p", k8s_qos="Guaranteed", koord_qos="LSR", priority_class="",
                   phase="Running", cgroup_dir="kubepods/podu1", containers=(), raw=raw)


def test_resource_status_is_decoded_once_per_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: Counter[str] = Counter()
    real = rs.decode_resource_status

    def decode(text: str) -> rs.ResourceStatus:
        seen[text] += 1
        return real(text)

    monkeypatch.setattr(rs, "decode_resource_status", decode)
    pod = meta()
    assert pod_cpuset(pod) == [2, 3]
    assert pod_cpuset(pod) == [2, 3]
    # a pod with a resource-status cpuset is koordlet's, not kubelet's static policy's
    assert kubelet_pod_allocs({"u1": [2, 3]}, [pod]) == []
    assert seen == {STATUS: 1}
