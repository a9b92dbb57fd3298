"""apis.core.podaffinity and apis.core.topologyspread: how a pod's terms and constraints read, and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from apis.core.labelselector import SelectorError
from apis.core.podaffinity import LABEL_NAMESPACE_NAME, namespace_labels, pod_affinity
from apis.core.topologyspread import spread_constraints


def pod(ns: str = "team", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": ns, "labels": labels or {}}, "spec": spec}


def anti(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def test_a_term_without_namespaces_is_the_pods_own_namespace() -> None:
    (t,) = pod_affinity(pod(affinity=anti({"labelSelector": {}, "topologyKey": "zone"}))).required_anti
    assert t.namespaces == {"team"} and t.namespace_selector is None
    assert t.matches("team", {"any": "thing"}, {}) and not t.matches("other", {}, {})


def test_selectors_nil_matches_nothing_empty_everything() -> None:
    (nil,) = pod_affinity(pod(affinity=anti({"topologyKey": "zone"}))).required_anti
    assert not nil.matches("team", {}, {})
    (every_ns,) = pod_affinity(pod(affinity=anti({"labelSelector": {}, "namespaceSelector": {},
                                                  "topologyKey": "zone"}))).required_anti
    assert every_ns.namespaces == frozenset() and every_ns.matches("elsewhere", {}, namespace_labels("elsewhere", {}))


def test_namespace_labels_always_carry_the_name_label() -> None:
    assert namespace_labels("a", {}) == {LABEL_NAMESPACE_NAME: "a"}
    assert namespace_labels("a", {"a": {"team": "t"}}) == {"team": "t", LABEL_NAMESPACE_NAME: "a"}


@pytest.mark.parametrize(("affinity", "field"), [
    (anti({"labelSelector": {}}), "requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"),
    ({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 101, "podAffinityTerm": {"topologyKey": "zone"}}]}},
     "preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
    (anti({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
           "topologyKey": "zone"}), "labelSelector.matchExpressions[0].operator"),
])
def test_terms_the_api_server_refuses_name_the_field(affinity: dict[str, Any], field: str) -> None:
    with pytest.raises(SelectorError, match=field.replace("[", r"\[").replace("]", r"\]")):
        pod_affinity(pod(affinity=affinity))


def test_match_label_keys_add_the_pods_own_values() -> None:
    (c,) = spread_constraints(pod(labels={"app": "web", "rev": "7"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev", "absent"]}]))
    assert c.selector is not None
    assert c.selector.matches({"app": "web", "rev": "7"}) and not c.selector.matches({"app": "web", "rev": "6"})
    assert (c.min_domains, c.node_affinity_policy, c.node_taints_policy) == (1, "Honor", "Ignore")
