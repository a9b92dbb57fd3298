"""`koordlet plan -o json` and `koordlet qos --once` on a simulated node: the contract, apply, then nothing to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet import cli
from koordlet.host.driver import CgroupDriver, K8sQoS
from koordlet.qos import executor

from simhost import SimCgroup, SimHost, cpu_qos_node, make_pod

KOORDLET = [sys.executable, "-m", "koordlet"]
BE_UID = "eeeeeeee-0000-4000-8000-000000000005"
LS_UID = "ffffffff-0000-4000-8000-000000000006"
BAD_UID = "abababab-0000-4000-8000-000000000007"


def _node(tmp_path: Path) -> tuple[SimHost, list[str]]:
    be = make_pod("batch", BE_UID, "BestEffort", labels={"koordinator.sh/qosClass": "BE"})
    ls = make_pod("web", LS_UID, "Burstable", labels={"koordinator.sh/qosClass": "LS"})
    bad = make_pod("odd", BAD_UID, "Burstable", labels={"koordinator.sh/qosClass": "LS"})
    bad["metadata"]["annotations"] = {"koordinator.sh/cpuQOS": "{not json"}  # type: ignore[index]
    return cpu_qos_node(tmp_path, [(be, K8sQoS.BESTEFFORT), (ls, K8sQoS.BURSTABLE), (bad, K8sQoS.BURSTABLE)])


def _run(cmd: str, args: list[str], *extra: str) -> dict[str, Any]:
    out = subprocess.run([*KOORDLET, cmd, *args, *extra], capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_plan_apply_then_nothing_to_do(tmp_path: Path) -> None:
    host, args = _node(tmp_path)
    plan = _run("plan", args, "-o", "json")
    assert set(plan) == {"writes", "evictions", "errors"}
    assert plan["evictions"] == []  # no eviction gate on
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


# ---- a plan that creates a resctrl group configures it in the same pass ---------------------------------------------


def _resctrl_node(tmp_path: Path) -> tuple[SimHost, list[str]]:
    """A cgroup v1 node with an Intel RDT CPU and resctrl mounted (no koordlet groups yet), a BE pod whose container
    runs threads 41 and 42, and a NodeSLO that gives the BE class 30 % of the cache ways and 30 % memory bandwidth."""
    host = SimHost(tmp_path / "host", 1, CgroupDriver.CGROUPFS).setup()
    proc = host.root / "proc"
    (proc / "cpuinfo").write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu cat_l3 mba\n\n")
    (proc / "mounts").write_text("resctrl /sys/fs/resctrl resctrl rw,relatime 0 0\n")
    resctrl = host.root / "sys/fs/resctrl"
    for name, value in (("L3/cbm_mask", "7ff"), ("L3/num_closids", "16"), ("L3/min_cbm_bits", "1"),
                        ("MB/num_closids", "8"), ("MB/bandwidth_gran", "10"), ("MB/min_bandwidth", "10")):
        (resctrl / "info" / name).parent.mkdir(parents=True, exist_ok=True)
        (resctrl / "info" / name).write_text(value + "\n")
    (resctrl / "schemata").write_text("    L3:0=7ff\n    MB:0=100\n")
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    be = make_pod("batch", BE_UID, "BestEffort", labels={"koordinator.sh/qosClass": "BE"})
    (pods_dir / "batch.yaml").write_text(yaml.safe_dump(be))
    rel = host.pod_dir(K8sQoS.BESTEFFORT, BE_UID)
    host.write_cgroup(rel, SimCgroup())
    cid = be["status"]["containerStatuses"][0]["containerID"].split("://")[1]  # type: ignore[index]
    host.write_cgroup(host.container_dir(rel, f"containerd://{cid}"), SimCgroup())
    for d, tids in ((rel, ""), (host.container_dir(rel, f"containerd://{cid}"), "41\n42\n")):
        (host.cgroup_root() / "cpu" / d / "tasks").write_text(tids)
    slo = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "sim"},
           "spec": {"resourceQOSStrategy": {"beClass": {"resctrlQOS": {
               "enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 30, "mbaPercent": 30}}}}}
    (tmp_path / "nodeslo.yaml").write_text(yaml.safe_dump(slo))
    return host, ["--host-root", str(host.root), "--pods-dir", str(pods_dir), "--nodeslo",
                  str(tmp_path / "nodeslo.yaml"), "--node-name", "sim", "--state-dir", str(tmp_path / "state")]


def _emulate_resctrl_kernel(monkeypatch: pytest.MonkeyPatch, resctrl: Path) -> None:
    """What the kernel does that a plain directory does not: mkdir of a group creates its schemata (everything
    unrestricted) and tasks; a schemata write changes only the resource it names; a tasks write adds one task."""
    real_mkdir, real_write = os.mkdir, executor._write

    def mkdir(path: str, mode: int = 0o777) -> None:
        real_mkdir(path, mode)
        if Path(path).parent == resctrl:
            Path(path, "schemata").write_text("    L3:0=7ff\n    MB:0=100\n")
            Path(path, "tasks").write_text("")

    def write(path: str, value: str) -> None:
        if Path(path).name != "schemata":
            return real_write(path, value)
        lines = {line.split(":")[0].strip(): line.strip() for line in Path(path).read_text().splitlines()}
        lines[value.split(":")[0]] = value.strip().rstrip(";")
        return real_write(path, "".join(f"    {line}\n" for line in lines.values()))

    def write_ids(path: str, ids: str) -> int:
        with open(path, "a") as f:
            f.write("".join(f"{i}\n" for i in ids.split()))
        return 0

    monkeypatch.setattr(os, "mkdir", mkdir)  # wraps the real one: only resctrl groups get kernel files
    monkeypatch.setattr(executor, "_write", write)
    monkeypatch.setattr(executor, "_write_ids", write_ids)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli.main(list(argv)) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_a_new_group_is_planned_and_configured_in_one_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    host, args = _resctrl_node(tmp_path)
    resctrl = host.root / "sys/fs/resctrl"
    plan = _cli(capsys, "plan", *args, "-o", "json")
    be = [(w.get("op", "write"), w["path"].removeprefix("sys/fs/resctrl/"), w["value"]) for w in plan["writes"]
          if w["path"].startswith("sys/fs/resctrl/BE")]
    # the dry run shows what one pass does to the group it creates, in order: mkdir, schemata (L3, MB), tasks
    assert be == [("mkdir", "BE", ""), ("write", "BE/schemata", "L3:0=f;\n"), ("write", "BE/schemata", "MB:0=30;\n"),
                  ("tids", "BE/tasks", "41 42")]
    assert not (resctrl / "BE").exists() and plan["errors"] == []

    _emulate_resctrl_kernel(monkeypatch, resctrl)
    applied = _cli(capsys, "qos", *args, "--once")
    assert applied["results"] == {"written": len(plan["writes"])}
    assert (resctrl / "BE/schemata").read_text() == "    L3:0=f\n    MB:0=30\n"
    assert (resctrl / "BE/tasks").read_text() == "41\n42\n"
    assert _cli(capsys, "plan", *args, "-o", "json")["writes"] == []


# ---- a refused NodeSLO explains itself -----------------------------------------------------------------------------


def test_plan_explains_a_refused_nodeslo(tmp_path: Path) -> None:
    _, args = _node(tmp_path)
    slo = yaml.safe_load((tmp_path / "nodeslo.yaml").read_text())
    slo["spec"]["resourceQOSStrategy"]["beClass"]["cpuQOS"]["groupIdentity"] = 7  # upstream allows -1..2
    slo["spec"]["resourceQOSStrategy"]["lsClass"]["cpuQOS"]["enable"] = "yes"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(slo))
    args[args.index("--nodeslo") + 1] = str(tmp_path / "bad.yaml")
    plan = _run("plan", args, "-o", "json")
    refused = [e for e in plan["errors"] if e["object"] == "NodeSLO/sim"]
    assert {e["field"] for e in refused} == {"spec.resourceQOSStrategy.beClass.cpuQOS.groupIdentity",
                                             "spec.resourceQOSStrategy.lsClass.cpuQOS.enable"}
    assert all(e["reason"] == "InvalidNodeSLO" and "refused as a whole" in e["message"] for e in refused)
    assert plan["writes"] == []  # nothing from it: no NodeSLO in effect, so no CPU QoS either

    (tmp_path / "bad.yaml").write_text("spec: [unclosed\n")
    unreadable = _run("plan", args, "-o", "json")
    [err] = [e for e in unreadable["errors"] if e["object"] == "NodeSLO/sim"]
    assert err["reason"] == "InvalidNodeSLO" and str(tmp_path / "bad.yaml") in err["field"]
