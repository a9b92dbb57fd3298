"""`koordlet plan -o json` and `koordlet qos --once` on a simulated node: the contract, apply, then nothing to do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from koordlet.host.driver import CgroupDriver, K8sQoS

from simhost import SimCgroup, SimHost, make_pod

KOORDLET = [sys.executable, "-m", "koordlet"]
BE_UID = "eeeeeeee-0000-4000-8000-000000000005"
LS_UID = "ffffffff-0000-4000-8000-000000000006"
BAD_UID = "abababab-0000-4000-8000-000000000007"


def _node(tmp_path: Path) -> tuple[SimHost, list[str]]:
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    be = make_pod("batch", BE_UID, "BestEffort", labels={"koordinator.sh/qosClass": "BE"})
    ls = make_pod("web", LS_UID, "Burstable", labels={"koordinator.sh/qosClass": "LS"})
    bad = make_pod("odd", BAD_UID, "Burstable", labels={"koordinator.sh/qosClass": "LS"})
    bad["metadata"]["annotations"] = {"koordinator.sh/cpuQOS": "{not json"}  # type: ignore[index]
    for pod, qos in ((be, K8sQoS.BESTEFFORT), (ls, K8sQoS.BURSTABLE), (bad, K8sQoS.BURSTABLE)):
        rel = host.pod_dir(qos, pod["metadata"]["uid"])  # type: ignore[index]
        host.write_cgroup(rel, SimCgroup())
        (host.cgroup_root() / "cpu" / rel / "cpu.idle").write_text("0\n")
        (host.cgroup_root() / "cpu" / rel / "cpu.shares").write_text("2\n" if qos == K8sQoS.BESTEFFORT else "1024\n")
        (pods_dir / f"{pod['metadata']['name']}.yaml").write_text(yaml.safe_dump(pod))  # type: ignore[index]
    (host.cgroup_root() / "cpu/kubepods/cpu.idle").write_text("0\n")
    slo = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "sim"},
           "spec": {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}},
                                            "lsClass": {"cpuQOS": {"enable": True}}}}}
    (tmp_path / "nodeslo.yaml").write_text(yaml.safe_dump(slo))
    args = ["--host-root", str(host.root), "--pods-dir", str(pods_dir), "--nodeslo", str(tmp_path / "nodeslo.yaml"),
            "--node-name", "sim", "--state-dir", str(tmp_path / "state")]
    return host, args


def _run(cmd: str, args: list[str], *extra: str) -> dict[str, Any]:
    out = subprocess.run([*KOORDLET, cmd, *args, *extra], capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_plan_apply_then_nothing_to_do(tmp_path: Path) -> None:
    host, args = _node(tmp_path)
    plan = _run("plan", args, "-o", "json")
    assert set(plan) == {"writes", "errors"}
    be_idle = f"sys/fs/cgroup/cpu/kubepods/besteffort/pod{BE_UID}/cpu.idle"
    assert {"path": be_idle, "value": "1"}.items() <= next(w for w in plan["writes"] if w["path"] == be_idle).items()
    assert all(set(w) >= {"path", "value", "reason"} and not w["path"].startswith("/") for w in plan["writes"])
    [err] = plan["errors"]
    assert err["object"] == "Pod/default/odd" and "cpuQOS" in err["field"]
    assert (host.cgroup_root() / f"cpu/kubepods/besteffort/pod{BE_UID}/cpu.idle").read_text() == "0\n"  # dry run

    applied = _run("qos", args, "--once")
    assert applied["results"].get("written", 0) == len(plan["writes"])
    assert (host.cgroup_root() / f"cpu/kubepods/besteffort/pod{BE_UID}/cpu.idle").read_text() == "1"
    audit = (tmp_path / "state/audit/qos.jsonl").read_text().splitlines()
    assert any(json.loads(line)["path"] == be_idle for line in audit)

    again = _run("plan", args, "-o", "json")
    assert again["writes"] == [] and len(again["errors"]) == 1
