"""The MigrationController end to end through `koord-descheduler simulate`: LowNodeLoad picks the pods, the
MigrationController as the evictor turns them into PodMigrationJobs (valid against the CRD) within its limits —
maxMigratingPerNode, per-workload budgets, namespace gray-scale, jobs already in the cluster, the workload object
limiter over rounds — and both dry-run switches create none."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.descheduler import cli

from deschedbuild import config, evicted, node, node_metrics, refused, simulate
from migbuild import owned, pmj, workload

JSON = dict[str, Any]
Validate = Callable[[str, dict[str, Any]], None]
CRD = "scheduling.koordinator.sh_podmigrationjobs.yaml"
LOW, HIGH = {"cpu": 30, "pods": 30}, {"cpu": 50, "pods": 50}
WIDE = {"maxMigratingPerNode": 3, "maxMigratingPerWorkload": 5, "maxUnavailablePerWorkload": 5}


def pod400(name: str, node_name: str, owner: str = "rs-1", **kw: Any) -> JSON:
    return owned(name, node_name, owner, containers=[{"name": "c", "resources": {"requests": {"cpu": "400m"}}}],
                 **kw)


def cluster(extra: list[JSON] | None = None, namespace: str = "default") -> list[JSON]:
    """n1 holds 8 pods of rs-1 (80% cpu, 8 of 9 pods): LowNodeLoad would evict 4 to n2 (one pod); n3 cordoned."""
    nodes = [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10), node("n3", 4000, 3000, 10, unschedulable=True)]
    pods = [*(pod400(f"p{i}", "n1", namespace=namespace) for i in range(1, 9)), pod400("q", "n2", "rs-2")]
    objs = [workload("ReplicaSet", "rs-1", 10, namespace=namespace), workload("ReplicaSet", "rs-2", 10)]
    return [*nodes, *pods, *objs, *node_metrics(nodes, pods), *(extra or [])]


def migration_config(args: JSON | None = None, top: JSON | None = None) -> JSON:
    cfg = config(LOW, HIGH, top=top)
    prof = cfg["profiles"][0]
    prof["plugins"]["evict"] = {"disabled": [{"name": "*"}], "enabled": [{"name": "MigrationController"}]}
    prof["plugins"]["filter"] = {"disabled": [{"name": "*"}], "enabled": [{"name": "MigrationController"}]}
    prof["pluginConfig"] = [c for c in prof["pluginConfig"] if c["name"] != "DefaultEvictor"]
    prof["pluginConfig"].append({"name": "MigrationController", "args": args or {}})
    return cfg


def test_jobs_created_within_the_default_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                validate_crd: Validate) -> None:
    """Defaults: maxMigratingPerNode 2 (and 2 per workload of 10 replicas) stop LowNodeLoad's 4 at 2 jobs."""
    result = simulate(tmp_path, cluster(), migration_config(), capsys)
    jobs = result["podMigrationJobs"]
    assert len(evicted(result)) == 2 == len(jobs)
    reasons = {e["name"]: e["reason"] for e in result["evictions"]}
    for job in jobs:
        validate_crd(CRD, job)
        ref = job["spec"]["podRef"]
        ann = job["metadata"]["annotations"]
        assert ref == {"namespace": "default", "name": ref["name"], "uid": f"uid-{ref['name']}"}
        assert ann["koordinator.sh/evict-reason"] == reasons[ref["name"]]
        assert reasons[ref["name"]].startswith("node is overutilized, ")
        assert ann["koordinator.sh/evict-trigger"] == "LowNodeLoad" and ann["koordinator.sh/job-created-by"]
        assert (job["spec"]["mode"], job["spec"]["ttl"], job["status"]) == ("ReservationFirst", "5m0s",
                                                                            {"phase": "Pending"})
        assert job["metadata"]["creationTimestamp"] == "2024-05-01T00:00:00Z"
    assert len({j["metadata"]["name"] for j in jobs}) == 2


def test_wider_limits_let_more_migrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate(tmp_path, cluster(), migration_config(WIDE), capsys)
    assert len(result["podMigrationJobs"]) == 3
    result = simulate(tmp_path, cluster(), migration_config({**WIDE, "maxMigratingPerNode": 0,
                                                             "defaultJobMode": "EvictDirectly",
                                                             "defaultJobTTL": "0s"}), capsys)
    jobs = result["podMigrationJobs"]
    assert len(jobs) == 4 and all(j["spec"]["mode"] == "EvictDirectly" and "ttl" not in j["spec"] for j in jobs)


@pytest.mark.parametrize("top_level", [False, True])
def test_dry_run_creates_no_job(top_level: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Either switch: the pods are reported, no PodMigrationJob is made (so no limit counts them: all 4 go)."""
    cfg = migration_config(WIDE, top={"dryRun": True}) if top_level else migration_config({**WIDE, "dryRun": True})
    result = simulate(tmp_path, cluster(), cfg, capsys)
    assert len(evicted(result)) == 4 and result["podMigrationJobs"] == []


def test_namespace_gray_scale_and_scheduler_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate(tmp_path, cluster(namespace="team-a"),
                      migration_config({**WIDE, "namespaces": {"exclude": ["team-a"]}}), capsys)
    assert evicted(result) == [] and result["podMigrationJobs"] == []
    result = simulate(tmp_path, cluster(namespace="team-a"),
                      migration_config({**WIDE, "namespaces": {"include": ["team-a"]}}), capsys)
    assert len(evicted(result)) == 3
    result = simulate(tmp_path, cluster(), migration_config({**WIDE, "schedulerNames": ["other"]}), capsys)
    assert evicted(result) == []


def test_jobs_in_the_cluster_count_and_their_pods_are_not_migrated_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Running job for p1 and a pending one for p2 (arbitrated before the round): both pods are left alone and
    both count against maxMigratingPerNode 3, so one more job is made; the pending job comes out passed."""
    objs = cluster()
    p1, p2 = objs[3], objs[4]
    result = simulate(tmp_path, [*objs, pmj("running", p1, "Running"), pmj("waiting", p2)], migration_config(WIDE),
                      capsys)
    names = evicted(result)
    assert len(names) == 1 and not {"p1", "p2"} & set(names)
    jobs = {j["metadata"]["name"]: j for j in result["podMigrationJobs"]}
    assert jobs["waiting"]["metadata"]["annotations"]["descheduler.koordinator.sh/passed-arbitration"] == "true"
    assert "running" not in jobs and len(jobs) == 2


def test_workload_object_limiter_over_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Round 1 migrates 2 pods of rs-1; their evictions use up the workload's bucket (2 per 5m, burst 1), so the
    next round 10s later migrates none of rs-1 though n1 is still hot — unless the limiter is off."""
    top = {"deschedulingInterval": "10s"}
    args = {"maxMigratingPerNode": 2, "maxMigratingPerWorkload": 2, "maxUnavailablePerWorkload": 5}
    result = simulate(tmp_path, cluster(), migration_config(args, top), capsys, rounds=2)
    assert len(result["podMigrationJobs"]) == 2
    off = {**args, "objectLimiters": {"workload": {"duration": "0s"}}}
    result = simulate(tmp_path, cluster(), migration_config(off, top), capsys, rounds=2)
    assert len(result["podMigrationJobs"]) == 4
    stamps = sorted(j["metadata"]["creationTimestamp"] for j in result["podMigrationJobs"])
    assert stamps == ["2024-05-01T00:00:00Z"] * 2 + ["2024-05-01T00:00:10Z"] * 2


@pytest.mark.parametrize("arbitration", [{}, {"arbitrationArgs": {"enabled": False}}])
def test_given_pending_jobs_are_arbitrated_in_turn(arbitration: JSON, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Three pending jobs on n1, maxMigratingPerNode 2: the first two pass arbitration (each counted for the
    next), the third waits, and no new job fits on n1. [quirk, mirrored] arbitrationArgs.enabled is read by
    nothing: false arbitrates the same."""
    objs = cluster()
    given = [pmj(f"given-{i}", objs[2 + i], created=f"2024-04-30T00:00:0{i}Z") for i in (1, 2, 3)]
    result = simulate(tmp_path, [*objs, *given],
                      migration_config({**WIDE, "maxMigratingPerNode": 2, **arbitration}), capsys)
    listed = {j["metadata"]["name"] for j in result["podMigrationJobs"]}
    assert listed == {"given-3", "given-2"} and evicted(result) == []


def test_an_unknown_eviction_policy_is_refused_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(tmp_path, migration_config({"evictionPolicy": "Vanish"}), capsys)
    assert "evictionPolicy" in line and "unsupported evicition policy" in line and "Vanish" in line


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "descheduler" / "migration"


def test_the_migration_example(capsys: pytest.CaptureFixture[str], validate_crd: Validate) -> None:
    """examples/descheduler/migration (upstream's shipped configuration with LowNodeLoad on): two jobs for the hot
    node (maxMigratingPerNode 2), listed in the table too."""
    argv = ["simulate", "--cluster", str(EXAMPLE / "cluster.yaml"), "--config",
            str(EXAMPLE / "koord-descheduler-config.yaml"), "--now", "2024-05-01T00:00:30Z"]
    assert cli.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    jobs = result["podMigrationJobs"]
    assert len(jobs) == 2 and {e["node"] for e in result["evictions"]} == {"node-1"}
    for job in jobs:
        validate_crd(CRD, job)
    assert cli.main([*argv, "-o", "table"]) == 0
    table = capsys.readouterr().out
    rows = table.split("PODMIGRATIONJOB", 1)[1].splitlines()[1:]
    assert sorted(r.split()[1] for r in rows if r.strip()) == sorted(
        f"default/{j['spec']['podRef']['name']}" for j in jobs)
