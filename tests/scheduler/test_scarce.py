"""ScarceResourceAvoidance scoring (spec §3)."""

from __future__ import annotations

from typing import Any

import pytest

from apis.core.errors import InvalidInput
from scheduler.cluster import build_cluster
from scheduler.plugins.scarce import ScarceArgs, ScarceResourceAvoidance


def name(k: str) -> str:
    return {"nvidia_com_gpu": "nvidia.com/gpu", "ephemeral_storage": "ephemeral-storage"}.get(k, k)


def node(n: str, **alloc: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": n},
            "status": {"allocatable": {name(k): v for k, v in alloc.items()}}}


def pod(**req: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {name(k): v for k, v in req.items()}}}]}}


def test_scarce_scores() -> None:
    c = build_cluster([node("gpu", cpu="8", memory="8Gi", pods="110", ephemeral_storage="100Gi",
                            nvidia_com_gpu="4"),
                       node("cpu", cpu="8", memory="8Gi", pods="110", ephemeral_storage="100Gi")])
    plugin = ScarceResourceAvoidance(ScarceArgs(["nvidia.com/gpu"]))
    # gpu node: nodeRes {cpu, memory, ephemeral-storage, gpu} − podRes {cpu, memory} = 2, scarce 1 ⇒ 50
    assert plugin.score(pod(cpu="1", memory="1Gi"), c.nodes["gpu"], c) == 50
    assert plugin.score(pod(cpu="1", memory="1Gi"), c.nodes["cpu"], c) == 100  # no scarce resource
    assert plugin.score(pod(cpu="1", nvidia_com_gpu="1"), c.nodes["gpu"], c) == 100  # pod uses it
    # diff = {cpu, memory, ephemeral-storage, gpu}, scarce 1 ⇒ 75
    assert plugin.score(pod(), c.nodes["gpu"], c) == 75


def test_empty_diff_and_args() -> None:
    c = build_cluster([node("n", cpu="8", nvidia_com_gpu="1")])
    plugin = ScarceResourceAvoidance(ScarceArgs(["nvidia.com/gpu"]))
    assert plugin.score(pod(cpu="1", nvidia_com_gpu="1"), c.nodes["n"], c) == 100  # diff empty
    assert ScarceResourceAvoidance().score(pod(cpu="1"), c.nodes["n"], c) == 100  # no scarce names
    assert ScarceArgs.from_dict({"resources": ["a/b"]}).resources == ["a/b"]
    with pytest.raises(InvalidInput):
        ScarceArgs.from_dict({"resources": "nvidia.com/gpu"})
