"""ElasticQuota: validation, runtime quota (upstream group_quota_manager_test cases), PreFilter and simulate."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main, simulate
from scheduler.cluster import build_cluster
from scheduler.elasticquota.manager import GroupQuotaManager
from scheduler.elasticquota.model import QuotaSpec, add, add_non_negative, non_negative, validate_quotas
from scheduler.elasticquota.runtime import redistribute

from chartconfig import chart_config

SEEDS = Path(__file__).resolve().parents[3] / "shared" / "seeds"
GI = 1 << 30


def res(cpu: float, mem: int = 0) -> dict[str, int]:
    return {"cpu": int(cpu * 1000), "memory": mem}


def spec(name: str, parent: str = "koordinator-root-quota", mx: tuple[float, int] = (96, 0),
         mn: tuple[float, int] = (0, 0), lent: bool = True, is_parent: bool = False) -> QuotaSpec:
    return QuotaSpec(name, "default", parent, is_parent, lent, res(*mx), res(*mn), res(*mx))


def manager(total: dict[str, int], *specs: QuotaSpec, scale: bool = True) -> GroupQuotaManager:
    m = GroupQuotaManager(enable_min_scale=scale)
    m.set_cluster_total(total)
    m.set_quotas(specs)
    return m


def request(m: GroupQuotaManager, quota: str, name: str, r: dict[str, int]) -> None:
    m.on_pod_add(quota, f"default/{name}", r, assigned=False)


def cpu(r: dict[str, int]) -> int:
    return r.get("cpu", 0) // 1000


# -- runtime -------------------------------------------------------------------------------------------------
def test_redistribute_integer_remainders_go_by_name() -> None:
    # 4 units left over three equal weights: 1 each, the last one by name (remainders tie)
    assert redistribute(200002, ["c", "b", "a"], [300000] * 3, [66666] * 3, [1] * 3, [True] * 3) == [
        66667, 66667, 66668]


def test_two_levels_borrowing_up_to_request_and_max() -> None:
    # upstream MultiUpdateQuotaRequest2: test1 > test1-a > a-123; a request within min, above min, above max
    m = manager(res(96, 160 * GI), spec("test1", mx=(96, 160 * GI), mn=(80, 80 * GI), is_parent=True),
                spec("test1-a", "test1", (60, 80 * GI), (50, 80 * GI), is_parent=True),
                spec("a-123", "test1-a", (30, 60 * GI), (20, 40 * GI)))
    request(m, "a-123", "p1", res(10, 30 * GI))
    assert m.refresh_runtime("a-123") == res(10, 30 * GI)
    assert m.refresh_runtime("test1") == res(10, 30 * GI)
    request(m, "a-123", "p2", res(15, 15 * GI))
    assert m.refresh_runtime("a-123") == res(25, 45 * GI)
    assert m.quotas["test1"].request == res(25, 45 * GI)
    request(m, "a-123", "p3", res(30, 30 * GI))  # 55 cpu asked, max 30: the request passed up is capped
    assert m.refresh_runtime("a-123") == res(30, 60 * GI)
    assert m.quotas["test1-a"].request == res(30, 60 * GI)


def test_shared_weight_splits_what_is_left() -> None:
    m = manager(res(100), spec("a", mx=(100, 0), mn=(10, 0)), spec("b", mx=(100, 0), mn=(10, 0)))
    m.quotas["b"].shared_weight = res(300)  # weight 1:3
    m.calcs["koordinator-root-quota"].upsert("b", {}, res(10), res(300), True)
    request(m, "a", "pa", res(100))
    request(m, "b", "pb", res(100))
    # min 10 each, the other 80 by weight 100:300 → 20 and 60
    assert cpu(m.refresh_runtime("a")) == 30 and cpu(m.refresh_runtime("b")) == 70


def test_not_lending_quota_keeps_its_min() -> None:
    # upstream NotAllowLentResource_3: the lending child gets nothing without requests, the other keeps its min
    m = manager(res(100), spec("test-root", mx=(96, 0), mn=(60, 0), lent=True, is_parent=True),
                spec("test-child1", "test-root", (96, 0), (20, 0), lent=False),
                spec("test-child2", "test-root", (96, 0), (20, 0), lent=True))
    assert [cpu(m.refresh_runtime(q)) for q in ("test-root", "test-child1", "test-child2")] == [20, 20, 0]
    request(m, "test-child1", "p1", res(40))
    assert [cpu(m.refresh_runtime(q)) for q in ("test-root", "test-child1", "test-child2")] == [40, 40, 0]
    request(m, "test-child1", "p2", res(20))
    assert [cpu(m.refresh_runtime(q)) for q in ("test-root", "test-child1", "test-child2")] == [60, 60, 0]


def test_lending_off_takes_min_from_others() -> None:
    # upstream NotAllowLentResource: test2 does not lend its 40, so test1 asking 120 gets only 60
    m = manager(res(100), spec("test1", mx=(96, 0), mn=(60, 0)), spec("test2", mx=(96, 0), mn=(40, 0), lent=False))
    request(m, "test1", "p", res(120))
    assert cpu(m.refresh_runtime("test1")) == 60 and cpu(m.refresh_runtime("test2")) == 40


def test_cluster_shrink_scales_min_down_and_back() -> None:
    # upstream MultiUpdateQuotaRequest_WithScaledMinQuota1
    m = manager({}, spec("p", mx=(1000, 1000 * GI), mn=(300, 300 * GI), is_parent=True),
                *(spec(c, "p", (1000, 1000 * GI), (100, 100 * GI)) for c in "abc"))
    for c in "abc":
        request(m, c, f"pod-{c}", res(200, 200 * GI))
    m.set_cluster_total(res(200, 200 * GI))
    assert m.refresh_runtime("p") == res(200, 200 * GI)
    for c in "abc":
        m.refresh_runtime(c)
    assert m.refresh_runtime("a") == {"cpu": 66667, "memory": 200 * GI // 3 + 1}
    assert m.refresh_runtime("b") == {"cpu": 66667, "memory": 200 * GI // 3 + 1}
    assert m.quotas["a"].auto_min == {"cpu": 66666, "memory": 200 * GI // 3}
    assert m.quotas["p"].auto_min == res(200, 200 * GI)
    m.add_cluster_total(res(400, 400 * GI))
    assert m.refresh_runtime("p") == res(600, 600 * GI)
    assert all(m.refresh_runtime(c) == res(200, 200 * GI) for c in "abc")
    assert m.quotas["a"].auto_min == res(100, 100 * GI)


def test_min_scale_off_keeps_min() -> None:
    m = manager(res(200, 200 * GI), spec("p", mx=(1000, 1000 * GI), mn=(300, 300 * GI), is_parent=True),
                *(spec(c, "p", (1000, 1000 * GI), (100, 100 * GI)) for c in "abc"), scale=False)
    for c in "abc":
        request(m, c, f"pod-{c}", res(200, 200 * GI))
    assert m.refresh_runtime("p") == res(300, 300 * GI)
    assert m.refresh_runtime("a") == res(100, 100 * GI)


def test_pod_delete_and_used() -> None:
    m = manager(res(10), spec("q", mx=(10, 0), mn=(2, 0)))
    request(m, "q", "p", res(4))
    m.reserve("q", "default/p")
    assert m.quotas["q"].used == res(4) and m.quotas["koordinator-root-quota"].used == res(4)
    m.on_pod_delete("q", "default/p")
    assert m.quotas["q"].used == res(0) and m.quotas["q"].request == res(0)
    assert cpu(m.refresh_runtime("q")) == 0


# -- validation ----------------------------------------------------------------------------------------------
def eq(name: str, mx: dict[str, Any], mn: dict[str, Any], labels: dict[str, str] | None = None,
       annotations: dict[str, str] | None = None, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"max": mx, "min": mn}}


def test_validation_reasons() -> None:
    parent = {"quota.scheduling.koordinator.sh/is-parent": "true"}
    objs = [
        eq("p", {"cpu": 10}, {"cpu": 8}, parent),
        eq("c1", {"cpu": 5}, {"cpu": 5}, {"quota.scheduling.koordinator.sh/parent": "p"}),
        eq("c2", {"cpu": 5}, {"cpu": 4}, {"quota.scheduling.koordinator.sh/parent": "p"}),  # 5 + 4 > 8
        eq("minmax", {"cpu": 1}, {"cpu": 2}),
        eq("orphan", {"cpu": 1}, {}, {"quota.scheduling.koordinator.sh/parent": "nope"}),
        eq("leafparent", {"cpu": 1}, {}, {"quota.scheduling.koordinator.sh/parent": "minmax"}),
        eq("grandchild", {"cpu": 1}, {}, {"quota.scheduling.koordinator.sh/parent": "orphan"}),
        eq("notparent", {"cpu": 2}, {"cpu": 1}),
        eq("underleaf", {"cpu": 1}, {}, {"quota.scheduling.koordinator.sh/parent": "notparent"}),
        eq("keys", {"memory": "1Gi"}, {}, {"quota.scheduling.koordinator.sh/parent": "p"}),
        eq("badq", {"cpu": "lots"}, {}),
        eq("badw", {"cpu": 1}, {}, annotations={"quota.scheduling.koordinator.sh/shared-weight": "{"}),
        eq("p", {"cpu": 1}, {}, ns="other"),
    ]
    specs, rejected = validate_quotas(objs)
    assert [s.name for s in specs] == ["notparent", "p", "c1"]
    why = dict(rejected)
    assert why["default/c2"] == "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: p"
    assert why["default/minmax"] == "resourceKey cpu of quota minmax min 2 > max 1"
    assert "parentName nope but not find parentInfo" in why["default/orphan"]
    assert "parentName minmax but not find parentInfo" in why["default/leafparent"]
    assert why["default/grandchild"] == "grandchild: its parent orphan was left out"
    assert why["default/underleaf"] == "underleaf has parentName notparent but the parentQuotaInfo's IsParent is false"
    assert "max keys are not the same" in why["default/keys"]
    assert "badq spec.max[cpu]" in why["default/badq"]
    assert "not JSON" in why["default/badw"]
    assert "already taken by default/p" in why["other/p"]


# -- simulate ------------------------------------------------------------------------------------------------
def node(name: str, cpu_: int, mem: str = "64Gi") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": str(cpu_), "memory": mem, "pods": "110"}}}


def pod(name: str, cpu_: float, quota: str | None = None, ns: str = "default", node_name: str = "",
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    lab = dict(labels or {})
    if quota:
        lab["quota.scheduling.koordinator.sh/name"] = quota
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": lab},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {
                "cpu": str(cpu_), "memory": "1Gi"}}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


def test_prefilter_reason_names_quota_and_resource() -> None:
    cluster = build_cluster([node("n1", 8), node("n2", 8),
                             eq("team-a", {"cpu": 4, "memory": "8Gi"}, {"cpu": 2, "memory": "4Gi"}),
                             eq("team-b", {"cpu": 16, "memory": "32Gi"}, {"cpu": 10, "memory": "16Gi"},
                                {"quota.scheduling.koordinator.sh/allow-lent-resource": "false"})])
    pods = [pod("a1", 3, "team-a"), pod("a2", 2, "team-a"), pod("b1", 1, "team-b")]
    result = simulate(cluster, pods)
    by = {p["pod"]: p for p in result["placements"]}
    assert by["default/a1"]["node"] and by["default/b1"]["node"]
    # team-a: total 16, team-b keeps its min 10 (no lending) → team-a's runtime 5 (≤ max 4 → 4)
    assert by["default/a2"]["reason"] == (
        "0/2 nodes are available: Insufficient quotas, quotaName: team-a, runtime: cpu:4,memory:2Gi, "
        "used: cpu:3,memory:1Gi, pod's request: cpu:2,memory:1Gi, exceedDimensions: [cpu].")
    quotas = {q["name"]: q for q in result["quotas"]}
    assert quotas["team-a"]["refused"] == ["default/a2"]
    assert quotas["team-a"]["used"] == {"cpu": "3", "memory": "1Gi"}
    assert quotas["team-b"]["runtime"]["cpu"] == "10"


def test_pods_join_by_namespace_then_default() -> None:
    cluster = build_cluster([node("n1", 8), eq("ns1", {"cpu": 1}, {"cpu": 1}, ns="ns1")])
    result = simulate(cluster, [pod("x", 2, ns="ns1"), pod("y", 2, ns="ns2"), pod("z", 2, "missing")])
    by = {p["pod"]: p for p in result["placements"]}
    assert "quotaName: ns1" in by["ns1/x"]["reason"]
    assert by["ns2/y"]["node"] and by["default/z"]["node"]  # default quota, unlimited


def test_seed_v07_hierarchy_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       validate_crd: Any) -> None:
    """The v0.7 release's ElasticQuota snippets (parentA, childA1, the pod label) work as written."""
    text = (SEEDS / "004_1fc6b0f939de439b.txt").read_text()
    start = text.index("apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: ElasticQuota")
    block = text[start:text.index("Pods can be linked", start)].strip()
    docs = list(yaml.safe_load_all(block))
    assert [d["metadata"]["name"] for d in docs] == ["parentA", "childA1"]
    for d in docs:
        validate_crd("scheduling.sigs.k8s.io_elasticquotas.yaml", d)
    cdir = tmp_path / "cluster"
    cdir.mkdir()
    (cdir / "quotas.yaml").write_text(block)
    (cdir / "nodes.yaml").write_text(yaml.safe_dump_all([node(f"n{i}", 64, "256Gi") for i in range(2)]))
    pods = [pod("in-child", 30, "childA1"), pod("over-child", 20, "childA1"),
            pod("demo-pod", 1, "elastic-quota-a")]  # the snippet's label names a quota that does not exist
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    assert main(["simulate", "--cluster", str(cdir), "--pods", str(tmp_path / "pods.yaml"), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by = {p["pod"]: p for p in out["placements"]}
    assert by["default/in-child"]["node"] and by["default/demo-pod"]["node"]
    assert "quotaName: childA1" in by["default/over-child"]["reason"]
    quotas = {q["name"]: q for q in out["quotas"]}
    assert quotas["childA1"]["max"] == {"cpu": "40", "memory": "100Gi"}
    assert quotas["childA1"]["min"] == {"cpu": "20", "memory": "40Gi"}
    assert quotas["parentA"]["used"]["cpu"] == "30" and quotas["childA1"]["runtime"]["cpu"] == "40"
    assert out["rejectedQuotas"] == []


# -- quota-aware job preemption ------------------------------------------------------------------------------
def gang_pod(name: str, cpu_: float, quota: str, priority: int) -> dict[str, Any]:
    p = pod(name, cpu_, quota)
    p["metadata"]["annotations"] = {"gang.scheduling.koordinator.sh/name": "job",
                                    "gang.scheduling.koordinator.sh/min-available": "1"}
    p["spec"]["priority"] = priority
    return p


def running(name: str, cpu_: float, quota: str, node_name: str, priority: int) -> dict[str, Any]:
    p = pod(name, cpu_, quota, node_name=node_name)
    p["spec"]["priority"] = priority
    return p


def preemption_case(tmp_path: Path, qb_min: int, qa_running: bool, runtime: bool, third: str = "qb"
                    ) -> dict[str, Any]:
    objs = [node("n1", 4), node("n2", 4), node("n3", 4),
            eq("qa", {"cpu": 12, "memory": "64Gi"}, {"cpu": 4}),
            eq("qb", {"cpu": 12, "memory": "64Gi"}, {"cpu": qb_min}),
            running("qb-1", 4, "qb", "n1", 1), running("qb-2", 4, "qb", "n2", 1),
            running("qa-0" if qa_running else "third", 4, "qa" if qa_running else third, "n3", 1000)]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps(chart_config(pluginConfig=[
        {"name": "ElasticQuota", "args": {"enableRuntimeQuota": runtime}}])))
    return simulate(build_cluster(objs), [gang_pod("hp", 4, "qa", 100)], str(cfg))


def test_job_within_min_evicts_borrowed_pods_of_another_quota(tmp_path: Path) -> None:
    out = preemption_case(tmp_path, qb_min=4, qa_running=False, runtime=True)
    [pre] = out["preemptions"]
    assert pre["victims"] in (["default/qb-1"], ["default/qb-2"])


def test_job_over_its_min_cannot_evict_other_quotas(tmp_path: Path) -> None:
    out = preemption_case(tmp_path, qb_min=4, qa_running=True, runtime=False)
    assert out["preemptions"] == []
    assert "preemption: no potential victims" in out["placements"][0]["reason"]


def test_job_cannot_evict_pods_of_a_quota_within_its_min(tmp_path: Path) -> None:
    out = preemption_case(tmp_path, qb_min=8, qa_running=False, runtime=False, third="")  # qb uses its 8
    assert out["preemptions"] == []
    assert "preemption: no potential victims" in out["placements"][0]["reason"]


def test_quota_refusal_is_not_preempted_for(tmp_path: Path) -> None:
    out = preemption_case(tmp_path, qb_min=4, qa_running=True, runtime=True)
    assert out["preemptions"] == []
    assert "Insufficient quotas, quotaName: qa" in out["placements"][0]["reason"]
    assert "not eligible: the job is refused by ElasticQuota" in out["placements"][0]["reason"]


def test_add_non_negative_is_the_sum_clamped_at_zero() -> None:
    rng = random.Random(5)
    names = ["cpu", "memory", "pods", "koordinator.sh/gpu"]
    for _ in range(200):
        a = {k: rng.randint(0, 9) for k in rng.sample(names, rng.randint(0, 4))}
        b = {k: rng.randint(-12, 9) for k in rng.sample(names, rng.randint(0, 4))}
        got = add_non_negative(a, b)
        assert got == non_negative(add(a, b)) and list(got) == list(non_negative(add(a, b)))
        assert got is not a and all(v >= 0 for v in got.values())
