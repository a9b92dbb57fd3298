"""apis/core/podmeta, apis/extension/descheduling and apis/slo/nodemetric: the pod facts and NodeMetric fields the
descheduler reads."""

from __future__ import annotations

import pytest

from apis.core import podmeta
from apis.extension.descheduling import eviction_cost
from apis.slo.nodemetric import node_metric_status


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("15", 15), ("-7", -7), ("2147483647", 2**31 - 1),
                                             ("+1", None), ("01", None), ("", None), ("2147483648", None),
                                             ("1.5", None), ("abc", None), (5, None)])
def test_go_int32(text: object, value: int | None) -> None:
    assert podmeta.go_int32(text) == value


def test_costs_read_zero_when_invalid() -> None:
    pod = {"metadata": {"annotations": {podmeta.ANNOTATION_POD_DELETION_COST: "100",
                                        "scheduling.koordinator.sh/eviction-cost": "+3"}}}
    assert podmeta.deletion_cost(pod) == 100
    assert eviction_cost(pod["metadata"]["annotations"]) == 0


def test_pod_kinds() -> None:
    mirror = {"metadata": {"annotations": {"kubernetes.io/config.mirror": "x", "kubernetes.io/config.source": "api"}}}
    static = {"metadata": {"annotations": {"kubernetes.io/config.source": "file"}}}
    assert podmeta.is_mirror_pod(mirror) and not podmeta.is_static_pod(mirror)
    assert podmeta.is_static_pod(static) and not podmeta.is_mirror_pod(static)
    ds = {"metadata": {"ownerReferences": [{"kind": "DaemonSet", "controller": True, "name": "d"}]}}
    assert podmeta.is_daemonset_pod(ds) and podmeta.controller_ref(ds) == ds["metadata"]["ownerReferences"][0]
    assert podmeta.is_critical_priority({"spec": {"priority": 2_000_000_000}})
    assert not podmeta.is_critical_priority({"spec": {"priority": True}})
    vols = {"spec": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "persistentVolumeClaim": {}}]}}
    assert podmeta.has_local_storage(vols) and podmeta.has_pvc(vols) and not podmeta.has_resource_claims(vols)
    assert podmeta.is_terminating({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})


def test_node_metric_status() -> None:
    nm = {"status": {"updateTime": "2024-05-01T00:00:00Z",
                     "nodeMetric": {"systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}},
                                    "nodeUsage": {"resources": {"cpu": "2", "memory": "bad"}}},
                     "podsMetric": [{"namespace": "ns", "name": "p", "podUsage": {"resources": {"cpu": "1500m"}}},
                                    "not an object"]}}
    st = node_metric_status(nm)
    assert st.has_node_metric and st.update_time == 1714521600.0
    assert st.system_usage == {"cpu": 500, "memory": 2**30}
    assert st.node_usage == {"cpu": 2000}  # the unreadable entry left out
    assert [(p.key, p.usage) for p in st.pods] == [("ns/p", {"cpu": 1500})]
    empty = node_metric_status({"status": {"nodeMetric": None}})
    assert not empty.has_node_metric and empty.update_time is None and empty.pods == ()
