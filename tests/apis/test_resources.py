"""pod_requests/pod_limits against Kubernetes' own cases (component-helpers resource/helpers_test.go
TestPodResourceRequests, TestPodResourceLimits), restated, plus the API server's defaulting (requests from limits,
KEP-2837 pod-level requests) and the one bad-quantity error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.core.errors import InvalidInput, QuantityError
from apis.core.objects import JSON
from apis.core.resources import containers_key, pod_limits, pod_requests, resource_value, strings_only


def ctr(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
        sidecar: bool = False) -> JSON:
    resources: JSON = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    c: JSON = {"name": name, "resources": resources}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def pod(containers: list[JSON], init: list[JSON] | None = None, overhead: dict[str, Any] | None = None,
        resources: JSON | None = None) -> JSON:
    spec: JSON = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    if resources is not None:
        spec["resources"] = resources
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def cpu(n: str) -> dict[str, str]:
    return {"cpu": n}


# (description, pod, expected requests) — helpers_test.go TestPodResourceRequests, cpu in millicores
REQUEST_CASES = [
    ("larger init container", pod([ctr("c", cpu("1"))], [ctr("i", cpu("4"))]), {"cpu": 4000}),
    ("larger containers", pod([ctr("c1", cpu("2")), ctr("c2", cpu("3"))], [ctr("i", cpu("2"))]), {"cpu": 5000}),
    ("pod overhead included",
     pod([ctr("c1", cpu("2")), ctr("c2", cpu("3"))], [ctr("i", cpu("2"), cpu("2"))],
         overhead={"cpu": "1", "memory": "1Gi"}),
     {"cpu": 6000, "memory": 1 << 30}),
    ("restartable init container: it runs beside the regular one",
     pod([ctr("c", cpu("1"))], [ctr("s", cpu("1"), sidecar=True)]), {"cpu": 2000}),
    ("multiple restartable init containers: max(5, 3+2+1 + 1)",
     pod([ctr("c", cpu("1"))], [ctr("i", cpu("5")), ctr("s1", cpu("1"), sidecar=True),
                                ctr("s2", cpu("2"), sidecar=True), ctr("s3", cpu("3"), sidecar=True)]),
     {"cpu": 7000}),
    ("restartable and regular init containers: init-2 needs 5 + the sidecars started before it (1+2)",
     pod([ctr("c", cpu("1"))], [ctr("i1", cpu("5")), ctr("s1", cpu("1"), sidecar=True),
                                ctr("s2", cpu("2"), sidecar=True), ctr("i2", cpu("5")),
                                ctr("s3", cpu("3"), sidecar=True)]),
     {"cpu": 8000}),
    ("restartable-init, init and regular: max(10+200, 10+100)",
     pod([ctr("c", cpu("100"))], [ctr("s", cpu("10"), sidecar=True), ctr("i", cpu("200"))]), {"cpu": 210000}),
    ("a sidecar after the largest init container does not add to it",
     pod([ctr("c", cpu("1"))], [ctr("i", cpu("4")), ctr("s", cpu("1"), sidecar=True)]), {"cpu": 4000}),
]


@pytest.mark.parametrize(("pod_", "expected"), [c[1:] for c in REQUEST_CASES], ids=[c[0] for c in REQUEST_CASES])
def test_pod_requests_as_kubernetes(pod_: JSON, expected: dict[str, int]) -> None:
    assert pod_requests(pod_) == expected


LIMIT_CASES = [
    ("larger init container", pod([ctr("c", limits=cpu("1"))], [ctr("i", limits=cpu("4"))]), {"cpu": 4000}),
    ("larger containers",
     pod([ctr("c1", limits=cpu("2")), ctr("c2", limits=cpu("3"))], [ctr("i", limits=cpu("2"))]), {"cpu": 5000}),
    ("overhead only on limits that are set and not zero",
     pod([ctr("c1", limits=cpu("2")), ctr("c2", limits=cpu("3"))], [ctr("i", limits=cpu("2"))],
         overhead={"cpu": "1", "memory": "1Gi"}),
     {"cpu": 6000}),
    ("no limited containers: no limits", pod([ctr("c", cpu("1"))], []), {}),
    ("restartable and regular init containers",
     pod([ctr("c", limits=cpu("1"))], [ctr("i1", limits=cpu("5")), ctr("s1", limits=cpu("1"), sidecar=True),
                                       ctr("s2", limits=cpu("2"), sidecar=True), ctr("i2", limits=cpu("5")),
                                       ctr("s3", limits=cpu("3"), sidecar=True)]),
     {"cpu": 8000}),
]


@pytest.mark.parametrize(("pod_", "expected"), [c[1:] for c in LIMIT_CASES], ids=[c[0] for c in LIMIT_CASES])
def test_pod_limits_as_kubernetes(pod_: JSON, expected: dict[str, int]) -> None:
    assert pod_limits(pod_) == expected


def test_requests_default_to_limits_where_only_limits_are_set() -> None:
    """The API server copies a container's limit into its request when the request is missing (SetDefaults_Pod),
    sidecars and init containers alike; a request that is set stays."""
    p = pod([ctr("c", {"memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"})],
            [ctr("s", limits={"cpu": "500m"}, sidecar=True), ctr("i", limits={"cpu": "3"})])
    assert pod_requests(p) == {"cpu": 3500, "memory": 1 << 30}  # max(2 + 0.5, 0.5 + 3)
    assert pod_limits(p) == {"cpu": 3500, "memory": 2 << 30}


def test_pod_level_resources_take_precedence_for_cpu_memory_and_hugepages() -> None:
    p = pod([ctr("c", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}, {"cpu": "2"})],
            resources={"requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "3"}, "limits": {"cpu": "6"}},
            overhead={"cpu": "100m"})
    assert pod_requests(p) == {"cpu": 4100, "memory": 8 << 30, "nvidia.com/gpu": 1}
    assert pod_limits(p) == {"cpu": 6100}


def test_pod_level_requests_default_to_pod_level_limits_only_where_no_container_asks() -> None:
    """KEP-2837 defaulting: a pod-level limit is the pod-level request when no container requests that resource;
    when containers do, the request is theirs."""
    p = pod([ctr("c", {"cpu": "1"})], resources={"limits": {"cpu": "4", "memory": "2Gi"}})
    assert pod_requests(p) == {"cpu": 1000, "memory": 2 << 30}
    assert pod_limits(p) == {"cpu": 4000, "memory": 2 << 30}


def test_non_missing_fills_each_container_and_leaves_set_zero_requests() -> None:
    """kube-scheduler's NonMissingContainerRequests: each container (init and sidecar too) missing a request
    counts the default; one set to zero stays zero."""
    defaults = {"cpu": 100, "memory": 200 << 20}
    p = pod([ctr("c1"), ctr("c2", {"cpu": "0", "memory": "1Gi"})], [ctr("s", {"cpu": "1"}, sidecar=True)])
    assert pod_requests(p, non_missing=defaults) == {"cpu": 1100, "memory": (1 << 30) + (400 << 20)}
    assert pod_requests(p) == {"cpu": 1000, "memory": 1 << 30}


def test_sums_are_exact_and_rounded_up_once() -> None:
    """Quantities add exactly (quantity.go's nano units); the millicore or unit is rounded up after the sum."""
    p = pod([ctr("c1", {"cpu": "0.0005", "memory": "0.5"}), ctr("c2", {"cpu": "500u", "memory": "0.5"})])
    assert pod_requests(p) == {"cpu": 1, "memory": 1}
    assert resource_value("cpu", "0.0005") == 1 and resource_value("memory", "1.5") == 2


def test_rename_applies_to_each_container_before_it_counts() -> None:
    def rename(rl: dict[str, Any]) -> dict[str, Any]:
        return {("new" if k == "old" and "new" not in rl else k): v for k, v in rl.items()}

    p = pod([ctr("c1", {"old": "1"}), ctr("c2", {"new": "2"})])
    assert pod_requests(p, rename=rename) == {"new": 3}


_AMOUNTS = st.sampled_from(["0", "1", "250m", "1.5", "100Mi", "1Gi", "3"])
_LISTS = st.one_of(st.none(), st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "old"]), _AMOUNTS,
                                               max_size=3))
_CONTAINERS = st.lists(st.builds(lambda r, lim: ctr("c", r, lim), _LISTS, _LISTS), max_size=4)


def _rename(rl: dict[str, Any]) -> dict[str, Any]:
    return {("memory" if k == "old" and "memory" not in rl else k): v for k, v in rl.items()}


@settings(max_examples=300, deadline=None)
@given(_CONTAINERS, st.booleans(), st.booleans())
def test_plain_pods_add_up_as_the_general_rules_say(containers: list[JSON], fill: bool, rename: bool) -> None:
    """A pod of regular containers only takes a one-pass sum; an init container asking zero of everything sends
    the same pod down the general rules (defaulting from limits, non-missing fill, renaming): both agree."""
    kw: dict[str, Any] = {"non_missing": {"cpu": 100, "memory": 200 << 20} if fill else None,
                          "rename": _rename if rename else None}
    general = pod(containers, [ctr("i", {"cpu": "0", "memory": "0", "nvidia.com/gpu": "0"})])
    zeros = {"cpu": 0, "memory": 0, "nvidia.com/gpu": 0}
    expected = pod_requests(general, **kw)
    got = pod_requests(pod(containers), **kw)
    assert {**zeros, **got} == expected
    assert {**zeros, **pod_limits(pod(containers), rename=kw["rename"])} == {
        **zeros, **pod_limits(general, rename=kw["rename"])}


@pytest.mark.parametrize(("spec", "where"), [
    ({"containers": [ctr("c", {"cpu": "lots"})]}, "spec.containers['c'].resources.requests.cpu"),
    ({"containers": [ctr("c", {"cpu": "-1"})]}, "negative"),
    ({"containers": [ctr("c", limits={"memory": True})]}, "spec.containers['c'].resources.limits.memory"),
    ({"containers": [ctr("c")], "overhead": {"cpu": None}}, "spec.overhead.cpu"),
    ({"containers": [ctr("c", ["cpu"])]}, "requests is not an object"),  # type: ignore[arg-type]
    ({"containers": {"c": {}}}, "spec.containers is not a list"),
    ({"containers": [{"name": "c", "resources": "big"}]}, "resources is not an object"),
])
def test_what_cannot_be_read_raises_quantity_error(spec: JSON, where: str) -> None:
    with pytest.raises(QuantityError, match=where.replace("[", r"\[").replace("]", r"\]")) as e:
        pod_requests({"spec": spec})
    assert isinstance(e.value, InvalidInput)  # callers that catch InvalidInput keep doing so


def test_containers_key_holds_all_that_requests_and_limits_read_of_a_plain_pod() -> None:
    def pod(*containers: JSON, **spec: Any) -> JSON:
        return {"metadata": {"name": "p"}, "spec": {"containers": list(containers), **spec}}

    a = pod(ctr("a", {"cpu": "1"}, {"cpu": "2"}), ctr("b"))
    same = pod(ctr("x", {"cpu": "1"}, {"cpu": "2"}), ctr("y"))  # names are not resources
    key = containers_key(a)
    assert key is not None and key == containers_key(same) and strings_only(key)
    assert (pod_requests(a), pod_limits(a)) == (pod_requests(same), pod_limits(same))
    for other in (pod(ctr("a", {"cpu": "1"}, {"cpu": "3"}), ctr("b")),  # a limit differs
                  pod(ctr("a", {}, {"cpu": "1"}), ctr("b")),  # a request comes from its limit
                  pod(ctr("a", {"cpu": "1"}), ctr("b"))):  # a limit is missing
        assert containers_key(other) != key
        assert (pod_requests(other), pod_limits(other)) != (pod_requests(a), pod_limits(a))
    numeric = containers_key(pod(ctr("a", {"cpu": 1}, {"cpu": "2"}), ctr("b")))
    assert numeric is not None and not strings_only(numeric)
    # whatever else counts sends the pod down the general path, read on its own
    assert containers_key(pod(ctr("a", {"cpu": "1"}), initContainers=[ctr("i", {"cpu": "2"})])) is None
    assert containers_key(pod(ctr("a", {"cpu": "1"}), overhead={"cpu": "100m"})) is None
    assert containers_key(pod(ctr("a", {"cpu": "1"}), resources={"requests": {"cpu": "4"}})) is None
    assert containers_key({"spec": {"containers": "nope"}}) is None

