"""QoS and priority classes of pods, against upstream's own test tables (Koordinator and Kubernetes)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.core.qos import K8S_QOS_CLASSES, computed_k8s_qos_class, k8s_qos_class
from apis.extension.priority import (
    PRIORITY_CLASSES,
    priority_class,
    priority_class_by_value,
    priority_class_with_default,
)
from apis.extension.qos import KOORD_QOS_CLASSES, koord_qos_class, koord_qos_class_with_default

QOS_LABEL = "koordinator.sh/qosClass"
PRIORITY_LABEL = "koordinator.sh/priority-class"
PROD_MID_VALUE = (9000 + 9999) // 2  # upstream tests use (min + max) / 2 of each range
BATCH_MID_VALUE = (5000 + 5999) // 2


def resources(cpu: str = "", memory: str = "", **extra: str) -> dict[str, str]:
    out = {name: value for name, value in (("cpu", cpu), ("memory", memory)) if value}
    out.update(extra)
    return out


def container(requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests, "limits": limits}}


def pod(containers: list[dict[str, Any]] | None = None, init: list[dict[str, Any]] | None = None,
        pod_resources: dict[str, Any] | None = None, labels: dict[str, Any] | None = None,
        priority: Any = None, status_qos: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or []}
    if init is not None:
        spec["initContainers"] = init
    if pod_resources is not None:
        spec["resources"] = pod_resources
    if priority is not None:
        spec["priority"] = priority
    out: dict[str, Any] = {"metadata": {"name": "p", "labels": labels or {}}, "spec": spec}
    if status_qos is not None:
        out["status"] = {"qosClass": status_qos}
    return out


G, B, BE = "Guaranteed", "Burstable", "BestEffort"

# kubernetes pkg/apis/core/v1/helper/qos/qos_test.go TestComputePodQOS
K8S_CASES = [
    ("guaranteed", pod([container(resources("100m", "100Mi"), resources("100m", "100Mi"))]), G),
    ("guaranteed-guaranteed", pod([container(resources("100m", "100Mi"), resources("100m", "100Mi"))] * 2), G),
    ("best-effort-best-effort", pod([container({}, {})] * 2), BE),
    ("best-effort", pod([container({}, {})]), BE),
    ("best-effort-burstable", pod([container({}, {}), container(resources("1"), resources("2"))]), B),
    ("best-effort-guaranteed",
     pod([container({}, {}), container(resources("10m", "100Mi"), resources("10m", "100Mi"))]), B),
    ("burstable-cpu-guaranteed-memory", pod([container(resources("", "100Mi"), resources("", "100Mi"))]), B),
    ("burstable-no-limits", pod([container(resources("100m", "100Mi"), {})]), B),
    ("burstable-guaranteed", pod([container(resources("1", "100Mi"), resources("2", "100Mi")),
                                  container(resources("100m", "100Mi"), resources("100m", "100Mi"))]), B),
    ("burstable-unbounded-but-requests-match-limits",
     pod([container(resources("100m", "100Mi"), resources("200m", "200Mi")),
          container(resources("100m", "100Mi"), {})]), B),
    ("burstable-1", pod([container(resources("10m", "100Mi"), resources("100m", "200Mi"))]), B),
    ("burstable-2", pod([container(resources("0", "0"), resources("100m", "200Mi"))]), B),
    ("best-effort-hugepages",
     pod([container(resources("0", "0", **{"hugepages-2Mi": "1Gi"}),
                    resources("0", "0", **{"hugepages-2Mi": "1Gi"}))]), BE),
    ("init-container", pod([container({}, {})],
                           init=[container(resources("10m", "100Mi"), resources("100m", "200Mi"))]), B),
    ("guaranteed-with-pod-level-resources",
     pod([container({}, {})], pod_resources={"requests": resources("10m", "100Mi"),
                                             "limits": resources("10m", "100Mi")}), G),
    ("guaranteed-with-pod-and-container-level-resources",
     pod([container(resources("3m", "10Mi"), resources("5m", "20Mi"))],
         pod_resources={"requests": resources("10m", "100Mi"), "limits": resources("10m", "100Mi")}), G),
    ("burstable-with-pod-level-resources",
     pod([container({}, {})], pod_resources={"requests": resources("10m", "10Mi"),
                                             "limits": resources("20m", "50Mi")}), B),
    ("burstable-with-pod-and-container-level-resources",
     pod([container(resources("5m", "10Mi"), resources("5m", "10Mi"))],
         pod_resources={"requests": resources("10m", "10Mi"), "limits": resources("20m", "50Mi")}), B),
    ("burstable-with-pod-and-container-level-requests",
     pod([container(resources("5m", "10Mi"), {})], pod_resources={"requests": resources("10m", "10Mi")}), B),
    ("burstable-with-pod-and-container-level-resources-2",
     pod([container(resources("5m", "10Mi"), {}), container(resources("5m", "10Mi"), resources("5m", "10Mi"))],
         pod_resources={"requests": resources("10m", "10Mi"), "limits": resources("5m")}), B),
]


@pytest.mark.parametrize(("name", "the_pod", "expected"), K8S_CASES, ids=[c[0] for c in K8S_CASES])
def test_k8s_qos_upstream_table(name: str, the_pod: dict[str, Any], expected: str) -> None:
    assert k8s_qos_class(the_pod) == expected


@pytest.mark.parametrize(("the_pod", "expected"), [
    # API defaulting: a missing request takes the limit, so limits alone are Guaranteed
    (pod([container({}, resources("1", "1Gi"))]), G),
    (pod([container({}, resources("1"))]), B),
    (pod(pod_resources={"limits": resources("1", "1Gi")}), G),
    # equal values in different spellings
    (pod([container(resources("1", "1024Mi"), resources("1000m", "1Gi"))]), G),
    # only non-QoS resources
    (pod([container({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})]), BE),
    # ephemeral containers do not count
    ({**pod([container(resources("1", "1Gi"), resources("1", "1Gi"))]),
      "spec": {"containers": [container(resources("1", "1Gi"), resources("1", "1Gi"))],
               "ephemeralContainers": [{"name": "dbg"}]}}, G),
    # numbers as YAML gives them
    (pod([container({"cpu": 2, "memory": 1073741824}, {"cpu": "2", "memory": "1Gi"})]), G),
    (pod([]), BE),
])
def test_k8s_qos_computed_edge_cases(the_pod: dict[str, Any], expected: str) -> None:
    assert computed_k8s_qos_class(the_pod) == expected


def test_status_qos_class_wins_over_spec() -> None:
    the_pod = pod([container({}, {})], status_qos="Guaranteed")
    assert k8s_qos_class(the_pod) == G
    assert computed_k8s_qos_class(the_pod) == BE


def test_invalid_status_qos_class_is_recomputed() -> None:
    assert k8s_qos_class(pod([container(resources("1", "1Gi"), resources("1", "1Gi"))], status_qos="Gold")) == G


# apis/extension/qos_utils_test.go TestGetPodQoSClass, plus the other valid and invalid values
@pytest.mark.parametrize(("the_pod", "expected"), [
    ({}, ""),
    ({"metadata": {"labels": {}}}, ""),
    (pod(labels={QOS_LABEL: "LS"}), "LS"),
    (pod(labels={QOS_LABEL: "BE"}), "BE"),
    (pod(labels={QOS_LABEL: "LSE"}), "LSE"),
    (pod(labels={QOS_LABEL: "LSR"}), "LSR"),
    (pod(labels={QOS_LABEL: "SYSTEM"}), "SYSTEM"),
    (pod(labels={QOS_LABEL: "NONE"}), ""),
    (pod(labels={QOS_LABEL: "ls"}), ""),
    (pod(labels={QOS_LABEL: ""}), ""),
    (pod(labels={"koordinator.sh/qos": "LS"}), ""),
])
def test_koord_qos_class(the_pod: dict[str, Any], expected: str) -> None:
    assert koord_qos_class(the_pod) == expected


@pytest.mark.parametrize(("the_pod", "expected"), [
    (pod([container(resources("1", "1Gi"), resources("1", "1Gi"))]), "LSR"),
    (pod([container(resources("1", "1Gi"), resources("2", "1Gi"))]), "LS"),
    (pod([container({}, {})]), "BE"),
    (pod(status_qos="Burstable"), "LS"),
    (pod([container({}, {})], labels={QOS_LABEL: "LS"}), "LS"),
    (pod([container(resources("1", "1Gi"), resources("1", "1Gi"))], labels={QOS_LABEL: "BE"}), "BE"),
    (pod([container({}, {})], labels={QOS_LABEL: "bogus"}), "BE"),
    # priority does not influence QoS
    (pod([container({}, {})], priority=PROD_MID_VALUE), "BE"),
])
def test_koord_qos_class_with_default(the_pod: dict[str, Any], expected: str) -> None:
    assert koord_qos_class_with_default(the_pod) == expected


# apis/extension/priority_utils_test.go TestGetPriorityClass
@pytest.mark.parametrize(("the_pod", "expected"), [
    (pod(priority=PROD_MID_VALUE), "koord-prod"),
    (pod(priority=BATCH_MID_VALUE), "koord-batch"),
    (pod(labels={PRIORITY_LABEL: "koord-prod"}, priority=BATCH_MID_VALUE), "koord-prod"),
    (pod(labels={PRIORITY_LABEL: "unknown"}, priority=BATCH_MID_VALUE), ""),
    (pod(labels={PRIORITY_LABEL: ""}, priority=PROD_MID_VALUE), ""),
    (pod(labels={PRIORITY_LABEL: "koord-mid"}), "koord-mid"),
    (pod(labels={PRIORITY_LABEL: "koord-free"}), "koord-free"),
    (pod(), ""),
])
def test_priority_class_raw(the_pod: dict[str, Any], expected: str) -> None:
    assert priority_class(the_pod) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (9999, "koord-prod"), (9000, "koord-prod"), (8999, ""), (10000, ""),
    (7999, "koord-mid"), (7000, "koord-mid"), (7100, "koord-mid"), (6999, ""),
    (6000, ""), (5999, "koord-batch"), (5000, "koord-batch"), (4999, ""),
    (3999, "koord-free"), (3000, "koord-free"), (2999, ""), (0, ""), (-1, ""), (2000001000, ""),
])
def test_priority_ranges(value: int, expected: str) -> None:
    assert priority_class_by_value(value) == expected
    assert priority_class(pod(priority=value)) == expected


# apis/extension/priority_utils_test.go TestGetPodPriorityClassWithDefault
@pytest.mark.parametrize(("the_pod", "expected"), [
    (pod(priority=PROD_MID_VALUE), "koord-prod"),
    (pod(labels={PRIORITY_LABEL: "koord-prod"}, priority=BATCH_MID_VALUE), "koord-prod"),
    (pod(labels={QOS_LABEL: "LSR"}, priority=BATCH_MID_VALUE), "koord-batch"),
    (pod(labels={QOS_LABEL: "LSR"}), "koord-prod"),
    (pod(labels={QOS_LABEL: "BE"}), "koord-batch"),
    (pod([container({"cpu": "100"}, {"cpu": "200"})]), "koord-prod"),  # Burstable -> LS -> prod
    (pod([container({"cpu": "100"}, {"cpu": "100"})]), "koord-prod"),  # no memory: Burstable
    (pod([{"name": "abc"}]), "koord-batch"),  # BestEffort -> BE -> batch
    # beyond the upstream table
    (pod(labels={QOS_LABEL: "SYSTEM"}), "koord-prod"),
    (pod(labels={QOS_LABEL: "LSE"}), "koord-prod"),
    (pod(labels={QOS_LABEL: "LS"}), "koord-prod"),
    (pod(labels={PRIORITY_LABEL: "bogus", QOS_LABEL: "BE"}), "koord-batch"),
    (pod(labels={QOS_LABEL: "BE"}, priority=7500), "koord-mid"),
])
def test_priority_class_with_default(the_pod: dict[str, Any], expected: str) -> None:
    assert priority_class_with_default(the_pod) == expected


MALFORMED_PODS: list[Any] = [
    None, [], "pod", 42, {},
    {"metadata": "x"}, {"metadata": {"labels": ["a"]}}, {"metadata": {"labels": {QOS_LABEL: ["LS"]}}},
    {"metadata": {"labels": {PRIORITY_LABEL: 5}}},
    {"spec": "x"}, {"spec": {"containers": "x"}}, {"spec": {"containers": [None, 1, "c", {"resources": "x"}]}},
    {"spec": {"containers": [{"resources": {"requests": "x", "limits": ["cpu"]}}]}},
    {"spec": {"containers": [{"resources": {"requests": {"cpu": "garbage"}, "limits": {"cpu": True}}}]}},
    {"spec": {"resources": "x", "priority": "9500"}}, {"spec": {"priority": True}}, {"spec": {"priority": 9500.0}},
    {"status": {"qosClass": 5}}, {"status": []},
]


@pytest.mark.parametrize("the_pod", MALFORMED_PODS)
def test_malformed_pods_fall_back_to_defaults(the_pod: Any) -> None:
    assert k8s_qos_class(the_pod) in K8S_QOS_CLASSES
    assert koord_qos_class(the_pod) == ""
    assert koord_qos_class_with_default(the_pod) in KOORD_QOS_CLASSES
    assert priority_class(the_pod) == ""
    assert priority_class_with_default(the_pod) in (*PRIORITY_CLASSES, "")


def test_unparsable_request_counts_as_absent() -> None:
    bad = {"spec": {"containers": [container({"cpu": "garbage", "memory": "1Gi"}, resources("", "1Gi"))]}}
    assert k8s_qos_class(bad) == B  # cpu: nothing on either side; memory Guaranteed-like -> mixed


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6)
    | st.sampled_from(["1", "100m", "1Gi", "LS", "BE", "koord-prod", "Guaranteed"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["metadata", "labels", "spec", "status", "containers", "initContainers", "resources",
                         "requests", "limits", "cpu", "memory", "priority", "qosClass", QOS_LABEL,
                         PRIORITY_LABEL]), children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300)
@given(_JSON)
def test_random_json_never_raises(the_pod: Any) -> None:
    assert k8s_qos_class(the_pod) in K8S_QOS_CLASSES
    assert koord_qos_class_with_default(the_pod) in KOORD_QOS_CLASSES
    assert priority_class_with_default(the_pod) in (*PRIORITY_CLASSES, "")
