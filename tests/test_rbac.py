"""Least privilege, proven: deploy/rbac.yaml's ClusterRole grants exactly the (verb, resource) pairs the agent's API
client issues across the test suite (recorded by the API double), no fewer and no unused verb; deploy/scheduler/
rbac.yaml's roles the same for koord-sched across tests/scheduler, deploy/descheduler/rbac.yaml's for
koord-descheduler across tests/descheduler (a test acting as a user or another controller sends its own User-Agent:
kubedouble.driver_client)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from apirecord import Call, granted
from conftest import API_CALLS, TESTS_DIR

ROLE_FILE = TESTS_DIR.parent / "deploy" / "rbac.yaml"
SCHEDULER_ROLE_FILE = TESTS_DIR.parent / "deploy" / "scheduler" / "rbac.yaml"
DESCHEDULER_ROLE_FILE = TESTS_DIR.parent / "deploy" / "descheduler" / "rbac.yaml"
# The API client library's own tests: they send made-up verbs on made-up resources to test the client, not the agent.
NOT_THE_AGENT = {"apis/test_kubeapi.py"}
# The fault suite's koord-sched files: koord-sched's client, proven against koord-sched's roles.
SCHEDULER_FAULTS = {"faults/test_extender_faults.py", "faults/test_sched_faults.py"}


def agent_api_test_files() -> list[str]:
    """Test files that run the agent against the API double (tests/scheduler/ and tests/descheduler/ test
    koord-sched's and koord-descheduler's clients, which are not deployed with this role)."""
    return sorted(str(p.relative_to(TESTS_DIR)) for p in TESTS_DIR.rglob("test_*.py")
                  if not {"scheduler", "descheduler"} & set(p.relative_to(TESTS_DIR).parts)
                  and p.name != "test_rbac.py"
                  and str(p.relative_to(TESTS_DIR)) not in NOT_THE_AGENT | SCHEDULER_FAULTS
                  and "kmock" in p.read_text())


def scheduler_api_test_files() -> list[str]:
    """tests/scheduler files that run koord-sched against the API double."""
    return sorted([str(p.relative_to(TESTS_DIR)) for p in (TESTS_DIR / "scheduler").glob("test_*.py")
                   if "kmock" in p.read_text()] + sorted(SCHEDULER_FAULTS))


def descheduler_api_test_files() -> list[str]:
    """tests/descheduler files that run koord-descheduler against the API double."""
    return sorted(str(p.relative_to(TESTS_DIR)) for p in (TESTS_DIR / "descheduler").glob("test_*.py")
                  if "kmock" in p.read_text())


def recorded_calls(tmp_path: Path, files: list[str] | None = None) -> dict[str, set[Call]]:
    """What this session recorded, plus a run of the API test files it did not include (`pytest tests/test_rbac.py`
    alone, or a -k selection): the proof always covers every file."""
    files = agent_api_test_files() if files is None else files
    calls = {k: set(v) for k, v in API_CALLS.items() if k in files}
    missing = [f for f in files if f not in calls]
    if missing:
        out = tmp_path / "calls.json"
        env = {**os.environ, "KOORDLET_API_RECORD": str(out)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                               *(str(TESTS_DIR / f) for f in missing)], cwd=TESTS_DIR.parent, env=env,
                              capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, f"the API tests failed, so nothing is proven:\n{proc.stdout[-3000:]}"
        for k, v in json.loads(out.read_text()).items():
            calls.setdefault(k, set()).update(Call(*c) for c in v)
    return calls


def cluster_role(path: Path = ROLE_FILE) -> dict:  # type: ignore[type-arg]
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    [role] = [d for d in docs if d["kind"] == "ClusterRole"]
    return role


def test_every_api_test_file_is_found() -> None:
    files = agent_api_test_files()
    assert "test_cluster.py" in files and "test_nodemetric_api.py" in files and "test_nrt.py" in files
    assert not any(f.startswith("scheduler/") for f in files) and not SCHEDULER_FAULTS & set(files)
    assert all((TESTS_DIR / f).exists() for f in SCHEDULER_FAULTS)


@pytest.mark.after_api_tests
def test_cluster_role_grants_exactly_what_the_agent_uses(tmp_path: Path) -> None:
    assert_exact(recorded_calls(tmp_path), granted(cluster_role()), "the agent")


@pytest.mark.after_api_tests
def test_scheduler_roles_grant_exactly_what_koord_sched_uses(tmp_path: Path) -> None:
    files = scheduler_api_test_files()
    assert "scheduler/test_runner.py" in files and "scheduler/test_noderesource.py" in files
    docs = [d for d in yaml.safe_load_all(SCHEDULER_ROLE_FILE.read_text()) if d]
    [role] = [d for d in docs if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "koordinator-system" and {r for rule in role["rules"]
                                                                      for r in rule["resources"]} == {"configmaps"}
    assert_exact(recorded_calls(tmp_path, files), granted(cluster_role(SCHEDULER_ROLE_FILE)) | granted(role),
                 "koord-sched")
    [sa] = [d for d in docs if d["kind"] == "ServiceAccount"]
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                        "namespace": sa["metadata"]["namespace"]}]


@pytest.mark.after_api_tests
def test_descheduler_roles_grant_exactly_what_koord_descheduler_uses(tmp_path: Path) -> None:
    files = descheduler_api_test_files()
    assert {"descheduler/test_descheduler_run.py", "descheduler/test_descheduler_incluster.py"} <= set(files)
    docs = [d for d in yaml.safe_load_all(DESCHEDULER_ROLE_FILE.read_text()) if d]
    [role] = [d for d in docs if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "koordinator-system"  # the Lease of the config's leaderElection only
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"leases"}
    assert_exact(recorded_calls(tmp_path, files), granted(cluster_role(DESCHEDULER_ROLE_FILE)) | granted(role),
                 "koord-descheduler")
    [sa] = [d for d in docs if d["kind"] == "ServiceAccount"]
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                        "namespace": sa["metadata"]["namespace"]}]


ANY_SCALE = "*/scale"  # RBAC's "every resource's scale subresource": an owner of any kind (migration/scale.py)


def assert_exact(calls: dict[str, set[Call]], grants: set[Call], who: str) -> None:
    """The grants are exactly the calls. The one wildcard allowed is `*/scale` get in a group: the kinds whose scale
    koord-descheduler reads are not known in advance; it stands for the scale gets recorded in that group."""
    used = set().union(*calls.values())
    any_scale = {c.group for c in grants if (c.resource, c.verb) == (ANY_SCALE, "get")}
    grants = {c for c in grants if (c.resource, c.verb) != (ANY_SCALE, "get")} | {
        c for c in used if c.group in any_scale and c.verb == "get" and c.resource.endswith("/scale")}
    assert not any_scale - {c.group for c in used if c.resource.endswith("/scale")}, \
        f"{who} reads no scale in {sorted(any_scale)}"
    assert not any("*" in (c.group, c.resource, c.verb) for c in grants), "wildcards are not least privilege"
    where = {c: sorted(f for f, cs in calls.items() if c in cs) for c in used}
    missing = sorted(used - grants)
    unused = sorted(grants - used)
    assert not missing, f"{who} issues calls the role does not grant:\n" + "\n".join(
        f"  {c.verb} {c.group or 'core'}/{c.resource} (in {', '.join(where[c])})" for c in missing)
    assert not unused, f"the role grants what {who} never issues:\n" + "\n".join(
        f"  {c.verb} {c.group or 'core'}/{c.resource}" for c in unused)


def test_role_is_bound_to_the_daemonset_service_account() -> None:
    docs = [d for d in yaml.safe_load_all(ROLE_FILE.read_text()) if d]
    [binding] = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    [sa] = [d for d in docs if d["kind"] == "ServiceAccount"]
    ds = yaml.safe_load((TESTS_DIR.parent / "deploy" / "daemonset.yaml").read_text())
    assert binding["roleRef"]["name"] == cluster_role()["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert ds["metadata"]["namespace"] == sa["metadata"]["namespace"] == "koordinator-system"
