"""ElasticQuota trees by tree-id (upstream quota_handler_test.go tree cases, restated): each tree its own manager,
total and runtime; pods resolve within their quota's tree; nothing is lent across trees. And the guaranteed quota
of ElasticQuotaGuaranteeUsage."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler import kubeflags
from scheduler.cli import main, profile, simulate
from scheduler.cluster import build_cluster
from scheduler.elasticquota.forest import QuotaForest
from scheduler.elasticquota.manager import GroupQuotaManager
from scheduler.elasticquota.model import QuotaSpec, validate_quotas
from scheduler.elasticquota.plugin import ElasticQuota
from scheduler.framework import Scheduler
from scheduler.services import DiagnosisAPI

TREE = "quota.scheduling.koordinator.sh/tree-id"
PARENT = "quota.scheduling.koordinator.sh/parent"
IS_PARENT = "quota.scheduling.koordinator.sh/is-parent"
IS_ROOT = "quota.scheduling.koordinator.sh/is-root"
TOTAL = "quota.scheduling.koordinator.sh/total-resource"
IGNORE_DEFAULT = "quota.scheduling.koordinator.sh/ignore-default-tree"
GI = 1 << 30


def eq(name: str, mx: dict[str, Any], mn: dict[str, Any], tree: str = "", parent: str = "", is_parent: bool = False,
       root_total: dict[str, str] | None = None, ignore_default: bool = False) -> dict[str, Any]:
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if tree:
        labels[TREE] = tree
    if parent:
        labels[PARENT] = parent
    if is_parent:
        labels[IS_PARENT] = "true"
    if root_total is not None:
        labels[IS_ROOT] = "true"
        annotations[TOTAL] = json.dumps(root_total)
    if ignore_default:
        labels[IGNORE_DEFAULT] = "true"
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": "default", "labels": labels, "annotations": annotations},
            "spec": {"max": mx, "min": mn}}


def node(name: str, cpu: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}}}


def pod(name: str, cpu: float, quota: str, node_name: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"quota.scheduling.koordinator.sh/name": quota}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {
                "cpu": str(cpu), "memory": "1Gi"}}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


def res(cpu: int, mem_gi: int) -> dict[str, int]:
    return {"cpu": cpu * 1000, "memory": mem_gi * GI}


def q(cpu: int, mem_gi: int) -> dict[str, str]:
    return {"cpu": str(cpu), "memory": f"{mem_gi}Gi"}


def test_quotas_land_in_the_manager_of_their_tree() -> None:
    # OnQuotaAddWithTreeID: "3" in tree-a, "4" in tree-b, "1" in the default tree; none in another's
    specs, rejected = validate_quotas([eq("1", {}, {}), eq("3", {}, {}, "tree-a"), eq("4", {}, {}, "tree-b")])
    assert rejected == []
    forest = QuotaForest()
    forest.set_quotas(specs)
    assert set(forest.trees) == {"", "tree-a", "tree-b"}
    assert "3" in forest.trees["tree-a"].quotas and "4" not in forest.trees["tree-a"].quotas
    assert "4" in forest.trees["tree-b"].quotas and "3" not in forest.trees["tree-b"].quotas
    assert "3" not in forest.default.quotas and "1" in forest.default.quotas
    # only the default tree has the system and default quotas
    assert "koordinator-default-quota" in forest.default.quotas
    assert "koordinator-default-quota" not in forest.trees["tree-a"].quotas


def tree_cluster(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    # OnQuotaUpdateAndDeleteWithTreeID: tree-a test1 > {test1-a > a-123, test1-b > b-123}, tree-b test2 > test2-a
    return [
        eq("test1", q(100, 200), q(100, 160), "tree-a", is_parent=True, root_total=q(100, 200)),
        eq("test1-a", q(100, 200), q(50, 80), "tree-a", "test1", True),
        eq("a-123", q(100, 200), q(50, 80), "tree-a", "test1-a"),
        eq("test1-b", q(100, 200), q(50, 80), "tree-a", "test1", True),
        eq("b-123", q(100, 200), q(50, 80), "tree-a", "test1-b"),
        eq("test2", q(100, 200), q(100, 160), "tree-b", is_parent=True, root_total=q(100, 200)),
        eq("test2-a", q(100, 200), q(50, 80), "tree-b", "test2"),
        *extra,
    ]


def test_runtime_is_computed_per_tree_from_the_pods_of_that_tree() -> None:
    plugin = ElasticQuota()
    cluster = build_cluster([node("n1", 300), *tree_cluster()])
    plugin.bind(cluster)
    a = plugin.forest.trees["tree-a"]
    b = plugin.forest.trees["tree-b"]
    plugin.add_pending([pod("p1", 40, "a-123")], cluster)
    assert plugin.forest.manager_of("a-123") is a
    assert a.refresh_runtime("a-123") == res(40, 1)
    assert a.refresh_runtime("test1-a") == res(40, 1) and a.refresh_runtime("test1") == res(40, 1)
    plugin.add_pending([pod("p2", 40, "b-123")], cluster)
    assert a.refresh_runtime("b-123") == res(40, 1) and a.refresh_runtime("test1-b") == res(40, 1)
    assert a.refresh_runtime("test1") == res(80, 2)
    plugin.add_pending([pod("p3", 20, "test2-a")], cluster)
    assert b.refresh_runtime("test2-a") == res(20, 1) and b.refresh_runtime("test2") == res(20, 1)
    # tree-b's request does not touch tree-a's numbers, nor the default tree's root
    assert a.refresh_runtime("test1") == res(80, 2)
    assert plugin.forest.default.quotas["koordinator-root-quota"].request == {}
    summaries = plugin.summaries(tree="tree-b")
    assert sorted(summaries) == ["test2", "test2-a"] and summaries["test2-a"]["tree"] == "tree-b"
    assert set(plugin.summaries()) >= {"test1", "test2-a", "koordinator-default-quota"}


def test_tree_totals_come_from_the_root_annotation_and_leave_the_default_tree() -> None:
    plugin = ElasticQuota()
    cluster = build_cluster([node("n1", 300), node("n2", 100),
                             *tree_cluster(eq("ignored", q(50, 50), {}, "tree-c", is_parent=True,
                                              root_total=q(50, 50), ignore_default=True))])
    plugin.bind(cluster)
    assert plugin.forest.trees["tree-a"].total == res(100, 200)
    assert plugin.forest.trees["tree-c"].total == res(50, 50)
    # 400 cpu of nodes less tree-a's and tree-b's 100 each; tree-c is labelled ignore-default-tree
    assert plugin.forest.default.total["cpu"] == 200_000


def test_a_tree_does_not_lend_to_another() -> None:
    # tree-a's 100 cpu are idle; a tree-b pod asking beyond tree-b's 100 is refused, while the default tree,
    # with the nodes' 100 cpu left, places a default-quota pod
    objs = [node("n1", 150), node("n2", 150), *tree_cluster()]
    result = simulate(build_cluster(objs), [pod("big", 120, "test2-a"), pod("fits", 90, "test2-a"),
                                             pod("plain", 90, "koordinator-default-quota")])
    by = {p["pod"]: p for p in result["placements"]}
    assert "Insufficient quotas, quotaName: test2-a" in by["default/big"]["reason"]
    assert "runtime: cpu:100" in by["default/big"]["reason"]
    assert by["default/fits"]["node"] and by["default/plain"]["node"]
    rows = {r["name"]: r for r in result["quotas"]}
    assert rows["test2-a"]["tree"] == "tree-b" and rows["test2-a"]["refused"] == ["default/big"]
    assert "tree" not in rows["koordinator-default-quota"]


def test_a_child_in_another_tree_than_its_parent_is_left_out() -> None:
    specs, rejected = validate_quotas([eq("p", q(10, 10), q(5, 5), "tree-a", is_parent=True, root_total=q(10, 10)),
                                       eq("c", q(10, 10), q(1, 1), "tree-b", "p")])
    assert [s.name for s in specs] == ["p"]
    assert dict(rejected)["default/c"] == "c is in quota tree 'tree-b' but its parent p is in tree 'tree-a'"


def test_parent_check_stays_within_the_tree() -> None:
    # enableCheckParentQuota walks test2-a's ancestors of tree-b only
    cfg_plugin = ElasticQuota()
    cfg_plugin.args.enable_check_parent_quota = True
    cluster = build_cluster([node("n1", 400), *tree_cluster()])
    cfg_plugin.bind(cluster)
    assert cfg_plugin.prefilter(pod("x", 60, "test2-a"), cluster) is None
    assert cfg_plugin.quota_of(pod("y", 1, "test1")) == "test1"
    assert cfg_plugin.quota_of(pod("z", 1, "nope")) == "koordinator-default-quota"


# -- guaranteed quota (ElasticQuotaGuaranteeUsage; group_quota_manager_test.go OnPodUpdateUsedForGuarantee) --------
def guarantee_manager(total: dict[str, int], *specs: QuotaSpec) -> GroupQuotaManager:
    m = GroupQuotaManager(guarantee_usage=True)
    m.set_cluster_total(total)
    m.set_quotas(specs)
    return m


def qspec(name: str, parent: str, mx: int, mn: int, is_parent: bool = False) -> QuotaSpec:
    return QuotaSpec(name, "default", parent, is_parent, True, {"cpu": mx, "memory": mx}, {"cpu": mn, "memory": mn},
                     {"cpu": mx, "memory": mx})


def both(n: int) -> dict[str, int]:
    return {"cpu": n, "memory": n}


def test_guaranteed_is_the_larger_of_used_and_min_and_parents_sum_their_children() -> None:
    m = guarantee_manager(both(50), qspec("1", "koordinator-root-quota", 40, 20, True), qspec("2", "1", 40, 10),
                          qspec("3", "1", 40, 5))
    q1, q2 = m.quotas["1"], m.quotas["2"]
    m.on_pod_add("2", "default/p1", both(5), assigned=True)
    assert q2.child_request == both(5) and q2.request == both(10)  # no quota lends: it asks for its min
    assert q2.used == both(5) and q2.allocated == both(5) and q2.guaranteed == both(10)
    assert q1.allocated == both(15) and q1.guaranteed == both(20)  # the children's min guaranteed: 10 + 5
    m.on_pod_add("2", "default/p2", both(10), assigned=True)
    assert q2.request == both(15) and q2.allocated == both(15) and q2.guaranteed == both(15)
    assert q1.allocated == both(20) and q1.guaranteed == both(20)
    m.on_pod_add("2", "default/p3", both(10), assigned=True)
    assert q2.request == both(25) and q2.allocated == both(25) and q2.guaranteed == both(25)
    assert q1.allocated == both(30) and q1.guaranteed == both(30)
    m.on_pod_delete("2", "default/p3")
    assert q2.guaranteed == both(15) and q1.guaranteed == both(20)
    assert m.quotas["2"].summary()["guaranteed"] == {"cpu": "15m", "memory": "15"}


def test_a_guarantee_keeps_what_a_quota_uses_beyond_its_min() -> None:
    # A borrowed 30 of 40 while B idled; B now asks for 30. Without the guarantee A's runtime falls to 20 (its
    # min 10 and half of what is left), below what it uses; with it A keeps its 30 and B gets the rest
    for guarantee, a_runtime in ((False, 20), (True, 30)):
        m = GroupQuotaManager(guarantee_usage=guarantee)
        m.set_cluster_total(both(40))
        m.set_quotas([qspec("A", "koordinator-root-quota", 40, 10), qspec("B", "koordinator-root-quota", 40, 10)])
        m.on_pod_add("A", "default/a", both(30), assigned=True)
        m.on_pod_add("B", "default/b", both(30), assigned=False)
        assert m.refresh_runtime("A")["cpu"] == a_runtime
        assert m.refresh_runtime("B")["cpu"] == 40 - a_runtime


def test_feature_gate_turns_the_guarantee_on_in_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    cdir = tmp_path / "cluster"
    cdir.mkdir()
    (cdir / "objs.yaml").write_text(yaml.safe_dump_all([node("n1", 40), eq("A", q(40, 64), q(10, 0)),
                                                        eq("B", q(40, 64), q(10, 0)), pod("a", 30, "A", "n1")]))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([pod("b", 30, "B")]))
    args = ["simulate", "--cluster", str(cdir), "--pods", str(tmp_path / "pods.yaml"), "-o", "json"]
    runtimes = []
    for gates in ("", "ElasticQuotaGuaranteeUsage=true"):
        assert main([*args, f"--feature-gates={gates}"]) == 0
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["quotas"]}
        runtimes.append(rows["A"]["runtime"]["cpu"])
    assert runtimes == ["20", "30"]  # the guarantee keeps A's 30 in use
    assert main([*args, "--feature-gates=ElasticQuotaGuaranteeUsage"]) == 2
    assert "--feature-gates: 'ElasticQuotaGuaranteeUsage' (want Name=true|false)" in caplog.text


def test_only_the_gates_not_acted_on_are_named() -> None:
    def named(text: str) -> list[str]:
        return kubeflags.not_acted_on(argparse.Namespace(feature_gates=text))

    assert named("ElasticQuotaGuaranteeUsage=true,Foo=true") == ["--feature-gates=Foo=true"]
    assert named("ElasticQuotaGuaranteeUsage=true") == []
    assert named("") == ["--feature-gates="]
    assert kubeflags.gates("A=true, B=false") == {"A": True, "B": False}


def test_the_quotas_service_answers_one_tree() -> None:
    cluster = build_cluster([node("n1", 300), *tree_cluster()])
    sched = Scheduler(cluster, profile(None))

    @contextmanager
    def state() -> Iterator[tuple[Scheduler | None, list[dict[str, Any]]]]:
        yield sched, []

    api = DiagnosisAPI(state)
    status, _, body = api.serve("GET", "/apis/v1/plugins/ElasticQuota/quotas?tree=tree-b")
    assert status == 200 and sorted(body) == ["test2", "test2-a"]
    status, _, body = api.serve("GET", "/apis/v1/plugins/ElasticQuota/quotas")
    assert {"test1", "test2", "koordinator-default-quota"} <= set(body)
    status, _, body = api.serve("GET", "/apis/v1/plugins/ElasticQuota/quotas/a-123")
    assert status == 200 and body["tree"] == "tree-a" and body["parentName"] == "test1-a"


def test_multi_quota_tree_false_puts_every_quota_in_the_default_tree(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cdir = tmp_path / "cluster"
    cdir.mkdir()
    small = eq("small", q(100, 200), {}, "tree-s", root_total=q(10, 10))  # a tree of 10 cpu
    (cdir / "objs.yaml").write_text(yaml.safe_dump_all([node("n1", 300), *tree_cluster(small)]))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([pod("big", 50, "small")]))
    args = ["simulate", "--cluster", str(cdir), "--pods", str(tmp_path / "pods.yaml"), "-o", "json"]
    for gates, placed in (("MultiQuotaTree=true", False), ("MultiQuotaTree=false", True)):
        assert main([*args, f"--feature-gates={gates}"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert bool(out["placements"][0]["node"]) is placed  # one tree of 300 cpu: small may take 50
        assert all("tree" not in r for r in out["quotas"]) is placed
