"""LoadAware estimates pods once per shape: pods alike share an estimate, any field the estimate reads tells them
apart, and every pod's estimate equals the one computed for it alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler.plugins.loadaware import LoadAware
from scheduler.plugins.loadaware_args import LoadAwareArgs


def _pod(name: str, cpu: str = "2", memory: str = "8Gi", limits: bool = True) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = {"cpu": str(int(cpu) * 2), "memory": memory}
    return {"metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "resources": resources}]}}


def _variants() -> list[dict[str, Any]]:
    base = _pod("a")
    out = [base, _pod("b", cpu="4"), _pod("c", limits=False)]
    batch = copy.deepcopy(base)
    batch["metadata"]["labels"] = {"koordinator.sh/priority-class": "koord-batch"}
    null_label = copy.deepcopy(base)
    null_label["metadata"]["labels"] = {"koordinator.sh/priority-class": None}
    be = copy.deepcopy(base)
    be["metadata"]["labels"] = {"koordinator.sh/qosClass": "BE"}
    banded = copy.deepcopy(base)
    banded["spec"]["priority"] = 5500
    declared = copy.deepcopy(base)
    declared["status"] = {"qosClass": "BestEffort"}
    init = copy.deepcopy(base)
    init["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "16"}}}]
    custom = copy.deepcopy(base)
    custom["metadata"]["annotations"] = {"scheduling.koordinator.sh/load-estimated-scaling-factors": '{"cpu": 100}'}
    numeric = _pod("n")
    numeric["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 2
    return [*out, batch, null_label, be, banded, declared, init, custom, numeric]


@pytest.mark.parametrize("customize", [False, True])
def test_every_pod_is_estimated_as_alone(customize: bool) -> None:
    shared = LoadAware(LoadAwareArgs(allow_customize_estimation=customize), now=lambda: 0.0)
    pods = _variants()
    for pod in [*pods, *(copy.deepcopy(p) for p in reversed(pods))]:
        alone = LoadAware(LoadAwareArgs(allow_customize_estimation=customize), now=lambda: 0.0)
        assert shared.estimate(pod) == alone.estimate(pod)


def test_shapes_differ_where_the_estimate_does() -> None:
    la = LoadAware(LoadAwareArgs(), now=lambda: 0.0)
    estimates = [la.estimate(p) for p in _variants()[:3]]
    assert estimates[0] != estimates[1] != estimates[2]
    # a caller changing the estimate it got does not change the next pod's
    estimates[0]["cpu"] = -1
    assert la.estimate(_pod("again"))["cpu"] != -1
