"""The chart's plugins at the points the chart names (dropin.md §e): accepted where upstream implements them, refused
in kube-scheduler's words where it does not; Coscheduling's v1.5/v1.6 queue order, SchedulingHint's node list, the
Bind order (Reservation binds reserve pods, DefaultBinder every other)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from scheduler.cli import profile, simulate
from scheduler.cluster import build_cluster
from scheduler.config import ConfigError, load_config, parse_config
from scheduler.framework import Scheduler
from scheduler.gang.queuesort import coscheduling_order, priority_order

# fixtures/upstream-chart's koord-scheduler ConfigMaps as `helm template` renders them, copied unchanged
CHART = Path(__file__).parent / "seeds" / "chart"
HINT = "scheduling.koordinator.sh/scheduling-hint"


def chart(version: str) -> str:
    return str(CHART / f"koord-scheduler-config-v{version}.yaml")


def doc(**plugins: Any) -> dict[str, Any]:
    return {"profiles": [{"schedulerName": "koord-scheduler", "plugins": plugins}]}


@pytest.mark.parametrize("version", ["1.5.0", "1.6.0", "1.7.0"])
def test_chart_configmap_loads_unchanged(version: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        cfg = load_config(chart(version))
    assert cfg.scheduler_name == "koord-scheduler"
    assert cfg.points["bind"] == ["Reservation", "DefaultBinder"]
    assert cfg.points["queueSort"] == (["PrioritySort"] if version == "1.7.0" else ["Coscheduling"])
    assert ("SchedulingHint" in cfg.points["preFilter"]) == (version == "1.7.0")
    made = profile(cfg)
    assert made.queue_sort is not None and made.queue_sort.name == cfg.points["queueSort"][0]
    assert [b.name for b in made.binders] == ["Reservation", "DefaultBinder"]
    assert ("SchedulingHint" in made.by_name) == (version == "1.7.0")
    messages = [r.getMessage() for r in caplog.records]
    # what is accepted without effect is said once
    assert sum("DefaultPreBind: accepted" in m for m in messages) == 1
    assert any("DefaultPreemption" in m and "not implemented" in m for m in messages) == (version != "1.7.0")


@pytest.mark.parametrize(("plugins", "message"), [
    ({"filter": {"enabled": [{"name": "SchedulingHint"}]}},
     'plugin "SchedulingHint" does not extend FilterPlugin plugin (it extends: preFilter)'),
    ({"bind": {"enabled": [{"name": "Coscheduling"}]}}, 'plugin "Coscheduling" does not extend BindPlugin plugin'),
    ({"queueSort": {"enabled": [{"name": "Coscheduling"}]}}, "only one queue sort plugin can be enabled, got "
                                                            "PrioritySort, Coscheduling"),
    ({"queueSort": {"disabled": [{"name": "*"}]}}, "plugins.queueSort: no queue sort plugin is enabled"),
    ({"bind": {"disabled": [{"name": "*"}]}}, "plugins.bind: at least one bind plugin is needed"),
    ({"preFilter": {"enabled": [{"name": "SchedulingHint"}, {"name": "SchedulingHint"}]}},
     'plugins.preFilter.enabled[1].name: plugin "SchedulingHint" already registered as "PreFilterPlugin"'),
    ({"preFilter": {"enabled": [{"name": "SchedulingHints"}]}},
     'PreFilterPlugin "SchedulingHints" does not exist (unknown plugin (did you mean \'SchedulingHint\'?))'),
])
def test_refused_in_kube_schedulers_words(plugins: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(doc(**plugins))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_plugin_config_for_a_plugin_not_in_the_profile() -> None:
    with pytest.raises(ConfigError, match=r"pluginConfig\[0\].name: plugin NodeResourcesFitPlus has a pluginConfig "
                                          "but is not enabled"):
        parse_config({"profiles": [{"pluginConfig": [{"name": "NodeResourcesFitPlus", "args": {}}]}]})
    # a kube-scheduler default plugin is in every profile unless disabled: its args are legal
    parse_config({"profiles": [{"pluginConfig": [{"name": "InterPodAffinity", "args": {}}]}]})
    with pytest.raises(ConfigError, match="InterPodAffinity has a pluginConfig"):
        parse_config({"profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "InterPodAffinity"}]}},
                                    "pluginConfig": [{"name": "InterPodAffinity", "args": {}}]}]})


def test_volume_plugins_are_accepted_as_no_ops_and_said_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        cfg = parse_config(doc(filter={"enabled": [{"name": "VolumeBinding"}, {"name": "NodeVolumeLimits"}]}))
    assert "VolumeBinding" in cfg.points["filter"]
    said = [r.getMessage() for r in caplog.records if "accepted" in r.getMessage()]
    assert sorted(m.split(":")[0] for m in said) == ["NodeVolumeLimits", "VolumeBinding"]
    with pytest.raises(ConfigError, match="ElasticQuotaV2 is not implemented"):
        parse_config(doc(score={"enabled": [{"name": "ElasticQuotaV2"}]}))


def pod(name: str, *, prio: int = 0, sub: str | None = None, gang: str = "", created: str = "",
        ns: str = "default") -> dict[str, Any]:
    labels = {"koordinator.sh/priority": sub} if sub is not None else {}
    annotations = {"gang.scheduling.koordinator.sh/name": gang,
                   "gang.scheduling.koordinator.sh/min-available": "1"} if gang else {}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations,
                         "creationTimestamp": created},
            "spec": {"priority": prio, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_coscheduling_less_of_v1_5_and_v1_6() -> None:
    """priority, then the koordinator.sh/priority sub-priority, then the gang's time, the gang id, the member's
    name (its child schedule cycle ties at the start); PrioritySort ignores the sub-priority."""
    pods = [pod("old-low", created="2024-01-01T00:00:00Z"),
            pod("sub9", sub="9", created="2024-01-01T00:00:05Z"),
            pod("bad-sub", sub="x", created="2024-01-01T00:00:01Z"),
            pod("high", prio=10, created="2024-01-01T00:00:09Z"),
            pod("gb-2", gang="b", created="2024-01-01T00:00:02Z"),
            pod("ga-1", gang="a", created="2024-01-01T00:00:03Z"),
            pod("gb-1", gang="b", created="2024-01-01T00:00:04Z"),
            pod("ga-0", gang="a", created="2024-01-01T00:00:02Z")]
    got = names(coscheduling_order(pods, lambda p: int(p["spec"]["priority"])))
    # gangs a and b both first seen at :02 → by gang id; a lone pod has no group id and sorts before them
    assert got == ["high", "sub9", "old-low", "bad-sub", "ga-0", "ga-1", "gb-1", "gb-2"]
    assert names(priority_order(pods, lambda p: int(p["spec"]["priority"])))[:3] == ["high", "old-low", "bad-sub"]


def two_nodes() -> list[dict[str, Any]]:
    return [{"kind": "Node", "metadata": {"name": n}, "status": {"allocatable": {"cpu": c, "memory": "8Gi",
                                                                                  "pods": "10"}}}
            for n, c in (("big", "16"), ("small", "2"))]


def test_scheduling_hint_narrows_the_nodes_and_a_bad_one_fails_the_pod() -> None:
    cfg = parse_config(doc(preFilter={"enabled": [{"name": "SchedulingHint"}]}, score={"enabled": [
        {"name": "NodeResourcesBalancedAllocation"}]}))
    hinted = pod("hinted")
    hinted["metadata"]["annotations"][HINT] = json.dumps({"nodeNames": ["small"], "extensions": {}})
    empty = pod("empty")
    empty["metadata"]["annotations"][HINT] = json.dumps({"nodeNames": []})
    bad = pod("bad")
    bad["metadata"]["annotations"][HINT] = "{nodeNames"
    too_big = pod("too-big")
    too_big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    too_big["metadata"]["annotations"][HINT] = json.dumps({"nodeNames": ["small"]})
    out = simulate(build_cluster(two_nodes()), [hinted, empty, bad, too_big], cfg)
    by_pod = {p["pod"]: p for p in out["placements"]}
    assert by_pod["default/hinted"]["node"] == "small"
    assert by_pod["default/empty"]["node"] is not None  # an empty list narrows nothing
    assert by_pod["default/bad"]["node"] is None and "invalid scheduling hint" in by_pod["default/bad"]["reason"]
    # only the hinted node is looked at: one reason, not two
    assert by_pod["default/too-big"]["node"] is None
    assert "1 Insufficient cpu" in by_pod["default/too-big"]["reason"]
    # without the plugin the hint is not read
    out = simulate(build_cluster(two_nodes()), [pod("x"), bad], None)
    assert all(p["node"] for p in out["placements"])


def test_bind_order_reservation_then_default_binder() -> None:
    reserve = {"metadata": {"name": "r", "annotations": {"scheduling.koordinator.sh/reserve-pod": "true"}}}
    cluster = build_cluster(two_nodes())
    chart_like = Scheduler(cluster, profile(parse_config(doc(bind={"disabled": [{"name": "*"}], "enabled": [
        {"name": "Reservation"}, {"name": "DefaultBinder"}]}))))
    assert chart_like.binder(pod("p")) == "DefaultBinder" and chart_like.binder(reserve) == "Reservation"
    # a file naming no bind plugin keeps kube-scheduler's: DefaultBinder alone, reserve pods included
    kube_only = Scheduler(cluster, profile(parse_config(doc())))
    assert kube_only.binder(pod("p")) == "DefaultBinder" and kube_only.binder(reserve) == "DefaultBinder"
    only_resv = Scheduler(cluster, profile(parse_config(doc(bind={"disabled": [{"name": "*"}], "enabled": [
        {"name": "Reservation"}]}))))
    assert only_resv.binder(pod("p")) is None and only_resv.binder(reserve) == "Reservation"
    # DefaultBinder ahead of Reservation takes the reserve pods too, and no reservation becomes Available
    cfg = parse_config(doc(filter={"enabled": [{"name": "Reservation"}]}, reserve={"enabled": [
        {"name": "Reservation"}]}, bind={"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultBinder"},
                                                                                  {"name": "Reservation"}]}))
    resv = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation", "metadata": {"name": "r1"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
                     "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}]}}
    out = simulate(build_cluster(two_nodes()), [resv], cfg)
    assert out["reservations"][0]["phase"] == "Pending"
    assert "no bind plugin binds reserve pods" in out["reservations"][0]["reason"]
    out = simulate(build_cluster(two_nodes()), [resv], None)
    assert out["reservations"][0]["phase"] == "Available"
