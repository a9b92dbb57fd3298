"""Each chart version's ConfigMap resolves to exactly the plugin lists of dropin.md §e: kube-scheduler's default
plugins at every point they implement (unless the chart disables `*` there), then the chart's own, in order — and
koord-sched says the resolved lists when it starts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from scheduler.cli import main, profile
from scheduler.config import load_config
from scheduler.config.describe import point_line
from scheduler.gang.plugin import Coscheduling

from chartconfig import KEY, chart_file

VERSIONS = ("1.5.0", "1.6.0", "1.7.0")
SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec" / "dropin.md"

# dropin.md §e "v1.7.0 plugins", as the spec prints it
V17 = """
preEnqueue  Coscheduling
queueSort   disabled *, enabled PrioritySort
preFilter   SchedulingHint, Coscheduling, Reservation, NodeNUMAResource, DeviceShare, ElasticQuota
filter      Reservation, LoadAwareScheduling, NodeNUMAResource, DeviceShare
postFilter  disabled *, enabled Reservation, Coscheduling, ElasticQuota
preScore    Reservation
score       LoadAwareScheduling 1, NodeNUMAResource 1, DeviceShare 1, Reservation 5000
reserve     Reservation, LoadAwareScheduling, NodeNUMAResource, DeviceShare, Coscheduling, ElasticQuota
permit      Coscheduling
preBind     NodeNUMAResource, DeviceShare, Reservation, DefaultPreBind
bind        disabled *, enabled Reservation, DefaultBinder
postBind    Coscheduling
"""
# dropin.md §e.1: kube-scheduler's default plugins (multiPoint), in order, with their weights
KUBE_DEFAULTS = ("SchedulingGates, PrioritySort, NodeUnschedulable, NodeName, TaintToleration(3), NodeAffinity(2), "
                 "NodePorts, NodeResourcesFit(1), VolumeRestrictions, EBSLimits, GCEPDLimits, NodeVolumeLimits, "
                 "AzureDiskLimits, VolumeBinding, VolumeZone, PodTopologySpread(2), InterPodAffinity(2), "
                 "DefaultPreemption, NodeResourcesBalancedAllocation(1), ImageLocality(1), DefaultBinder")
# the extension points each of them implements (k8s v1.28 pkg/scheduler/framework/plugins/*: the framework
# interfaces each plugin type asserts)
KUBE_POINTS = {
    "SchedulingGates": ("preEnqueue",), "PrioritySort": ("queueSort",), "NodeUnschedulable": ("filter",),
    "NodeName": ("filter",), "TaintToleration": ("filter", "preScore", "score"),
    "NodeAffinity": ("preFilter", "filter", "preScore", "score"), "NodePorts": ("preFilter", "filter"),
    "NodeResourcesFit": ("preFilter", "filter", "preScore", "score"), "VolumeRestrictions": ("preFilter", "filter"),
    "EBSLimits": ("filter",), "GCEPDLimits": ("filter",), "NodeVolumeLimits": ("filter",),
    "AzureDiskLimits": ("filter",),
    "VolumeBinding": ("preFilter", "filter", "preScore", "score", "reserve", "preBind"), "VolumeZone": ("filter",),
    "PodTopologySpread": ("preFilter", "filter", "preScore", "score"),
    "InterPodAffinity": ("preFilter", "filter", "preScore", "score"), "DefaultPreemption": ("postFilter",),
    "NodeResourcesBalancedAllocation": ("preScore", "score"), "ImageLocality": ("score",), "DefaultBinder": ("bind",),
}
NOT_BUILT: set[str] = set()  # kube defaults left out of koord-sched's profile (said at start): none now
POINTS = ("preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score", "reserve", "permit",
          "preBind", "bind", "postBind")

Lists = dict[str, tuple[bool, list[tuple[str, int]]]]  # point → ("*" disabled, enabled (name, weight))


def parse_block(text: str) -> Lists:
    out: Lists = {}
    for line in text.strip().splitlines():
        point, rest = line.split(None, 1)
        star = rest.startswith("disabled *, enabled ")
        rest = rest.removeprefix("disabled *, enabled ")
        entries = [e.split() for e in rest.split(", ")]
        out[point] = (star, [(e[0], int(e[1]) if len(e) > 1 else 0) for e in entries])
    return out


def spec_lists(version: str) -> Lists:
    """§e's lists for a chart version: v1.7's block, and the differences the spec states for v1.6 and v1.5."""
    lists = parse_block(V17)
    if version == "1.7.0":
        return lists
    del lists["preEnqueue"]  # v1.6: no preEnqueue, SchedulingHint or CoschedulingArgs
    lists["queueSort"] = (True, [("Coscheduling", 0)])
    names = ["Coscheduling", "Reservation", "NodeNUMAResource", "DeviceShare", "ElasticQuota"]
    star, post = lists["postFilter"]
    lists["postFilter"] = (star, [*post, ("DefaultPreemption", 0)])  # also DefaultPreemption (last)
    if version == "1.5.0":
        names = ["Reservation", "NodeNUMAResource", "DeviceShare", "Coscheduling", "ElasticQuota"]
        lists["filter"] = (False, [(n, 0) for n in ("LoadAwareScheduling", "NodeNUMAResource", "DeviceShare",
                                                      "Reservation")])
    lists["preFilter"] = (False, [(n, 0) for n in names])
    return lists


def fixture_lists(version: str) -> Lists:
    doc = yaml.safe_load(yaml.safe_load(chart_file(version).read_text())["data"][KEY])
    out: Lists = {}
    for point, section in doc["profiles"][0]["plugins"].items():
        star = [d["name"] for d in section.get("disabled", [])] == ["*"]
        out[point] = (star, [(e["name"], e.get("weight", 0)) for e in section.get("enabled", [])])
    return out


def kube_defaults() -> list[tuple[str, int]]:
    out = []
    for item in KUBE_DEFAULTS.split(", "):
        name, _, weight = item.rstrip(")").partition("(")
        out.append((name, int(weight or 0)))
    return out


def expected(lists: Lists) -> tuple[dict[str, list[str]], dict[str, int]]:
    """kube-scheduler's mergePlugins + MultiPoint expansion for a file that re-configures no default: per point the
    defaults implementing it (none where `*` is disabled), then the file's plugins; score weights (0 means 1)."""
    points: dict[str, list[str]] = {}
    weights: dict[str, int] = {}
    for point in POINTS:
        star, enabled = lists.get(point, (False, []))
        assert not {n for n, _ in enabled} & set(KUBE_POINTS) - {"PrioritySort", "DefaultBinder",
                                                                "DefaultPreemption"}, "re-configures a default"
        defaults = [] if star else [(n, w) for n, w in kube_defaults()
                                    if point in KUBE_POINTS[n] and n not in NOT_BUILT and n not in dict(enabled)]
        points[point] = [n for n, _ in [*defaults, *enabled]]
        if point == "score":
            weights = {n: w or 1 for n, w in [*defaults, *enabled]}
    return points, weights


@pytest.mark.parametrize("version", VERSIONS)
def test_the_chart_configmap_is_the_spec_table(version: str) -> None:
    assert fixture_lists(version) == spec_lists(version)


@pytest.mark.skipif(not SPEC.exists(), reason="the shared spec is not beside this checkout")
def test_the_restated_table_is_the_specs() -> None:
    text = SPEC.read_text()
    assert V17.strip() in text and f"**Default plugins** (multiPoint): `{KUBE_DEFAULTS}`" in text


@pytest.mark.parametrize("version", VERSIONS)
def test_the_profile_resolves_to_kube_defaults_then_the_charts_lists(version: str) -> None:
    cfg = load_config(str(chart_file(version)))
    points, weights = expected(spec_lists(version))
    for point in POINTS:
        assert (point, cfg.points[point]) == (point, points[point])
    assert cfg.weights == weights
    assert cfg.left_out == sorted(NOT_BUILT)


@pytest.mark.parametrize("version", VERSIONS)
def test_koordinator_plugins_run_only_where_the_chart_names_them(version: str) -> None:
    cfg = load_config(str(chart_file(version)))
    made = profile(cfg)
    lists = spec_lists(version)
    koord = {"Coscheduling", "Reservation", "NodeNUMAResource", "DeviceShare", "ElasticQuota", "LoadAwareScheduling",
             "SchedulingHint"}
    for point, built in (("filter", made.filters), ("score", made.scorers)):
        names = [p.name for p in built]
        assert [n for n in names if n in koord] == [n for n, _ in lists[point][1] if n in koord]
        assert [n for n in cfg.points[point] if n in names] == names  # built in the resolved order
    assert "NodeResourcesBalancedAllocation" in [s.name for s in made.scorers]  # kube's default score runs
    assert [b.name for b in made.binders] == [n for n, _ in lists["bind"][1]]
    assert made.queue_sort is not None and made.queue_sort.name == lists["queueSort"][1][0][0]
    cos = made.by_name["Coscheduling"]
    assert isinstance(cos, Coscheduling) and not cos.prebind  # no chart version enables it at preBind


@pytest.mark.parametrize("version", VERSIONS)
def test_koord_sched_says_the_resolved_profile(version: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.yaml").write_text("")
    config = str(chart_file(version))
    with caplog.at_level(logging.INFO, logger="koord-sched"):
        assert main(["simulate", "--config", config, "--cluster", str(tmp_path / "empty.yaml"), "--pods",
                     str(tmp_path / "empty.yaml")]) == 0
    capsys.readouterr()
    said = [r.getMessage() for r in caplog.records if r.name == "koord-sched"]
    cfg = load_config(config)
    assert "profile koord-scheduler (the file's plugins merged onto kube-scheduler's default plugins):" in said
    for point in POINTS:
        assert f"  {point}: {point_line(cfg, point)}" in said
    assert not any(line.startswith("  left out") for line in said)
    assert "ImageLocality(1)" in next(line for line in said if line.startswith("  score: "))
    score = next(line for line in said if line.startswith("  score: "))
    assert "TaintToleration(3)" in score and "Reservation(5000)" in score


def test_without_a_file_our_default_profile_is_said_at_debug(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.yaml").write_text("")
    with caplog.at_level(logging.DEBUG, logger="koord-sched"):
        assert main(["simulate", "--cluster", str(tmp_path / "empty.yaml"), "--pods",
                     str(tmp_path / "empty.yaml")]) == 0
    capsys.readouterr()
    heads = [r for r in caplog.records if r.getMessage().startswith("profile ")]
    assert [(r.getMessage(), r.levelno) for r in heads] == [
        ("profile default-scheduler (koord-sched's default profile):", logging.DEBUG)]
