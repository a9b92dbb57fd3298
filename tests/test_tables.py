"""`-o table`: the kubectl-style renderer, and the Device / NodeMetric / plan views the CLI prints with it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from koordlet.host.driver import K8sQoS
from koordlet.tables import NONE, device_table, nodemetric_table, plan_table, qos_table, render

from simhost import cpu_qos_node, make_pod

KOORDLET = [sys.executable, "-m", "koordlet"]
NODES = Path(__file__).resolve().parents[1] / "examples" / "nodes"
UID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"


def parse(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """Read a table back by the header's column starts, checking that every row is aligned to them."""
    header, *rows = text.rstrip("\n").split("\n")
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    assert header == header.upper() and "|" not in header
    out = []
    for row in rows:
        assert row == row.rstrip(), "trailing spaces"
        for s in starts[1:]:
            assert row[s - 1] == " " and row[s] != " ", f"column at {s} not aligned in {row!r}"
        ends = [*starts[1:], len(row)]
        out.append({n: row[s:e].strip() for n, s, e in zip(names, starts, ends, strict=True)})
    return names, out


def split_sections(text: str) -> list[str]:
    return [t + "\n" for t in text.rstrip("\n").split("\n\n")]


# --- the renderer ----------------------------------------------------------------------------------------------

def test_render_aligns_columns_one_line_per_row() -> None:
    text = render(("name", "value", "note"), [("a", 1, "short"), ("longer-name", None, "free text, with spaces"),
                                              ("b", True, "")])
    names, rows = parse(text)
    assert names == ["NAME", "VALUE", "NOTE"]
    assert rows == [{"NAME": "a", "VALUE": "1", "NOTE": "short"},
                    {"NAME": "longer-name", "VALUE": NONE, "NOTE": "free text, with spaces"},
                    {"NAME": "b", "VALUE": "true", "NOTE": NONE}]
    assert len(text.splitlines()) == 4
    assert text.splitlines()[0].index("VALUE") == len("longer-name") + 3  # kubectl's padding of three


def test_render_keeps_every_value_on_its_line() -> None:
    text = render(("path", "value"), [("cpu.idle", "1\n"), ("schemata", "L3:0=ff\nMB:0=100")])
    assert len(text.splitlines()) == 3
    assert parse(text)[1][1]["VALUE"] == "L3:0=ff\\nMB:0=100"


def test_render_header_only_and_bad_rows() -> None:
    assert render(("a", "b"), []) == "A   B\n"
    with pytest.raises(ValueError):
        render(("a", "b"), [("only-one",)])


# --- views of the objects --------------------------------------------------------------------------------------

def _device(entries: list[dict[str, Any]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"kind": "Device", "metadata": {"name": "n", "labels": labels or {}}, "spec": {"devices": entries}}


def test_device_table_columns() -> None:
    gpu = {"id": "GPU-1", "minor": 1, "type": "gpu", "health": False,
           "resources": {"koordinator.sh/gpu-memory": "80Gi"},
           "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:15", "busID": "0000:19:00.0"},
           "conditions": [{"type": "Healthy", "status": "False", "reason": "XidCritical", "message": "xid 79"}]}
    nic = {"id": "0000:1a:00.0", "minor": 0, "type": "rdma", "health": True,
           "resources": {"koordinator.sh/rdma": "100"},
           "topology": {"socketID": -1, "nodeID": -1, "pcieID": "pci0000:15", "busID": "0000:1a:00.0"},
           "labels": {"node.koordinator.sh/rdma-netdev": "ens1f0np0"},
           "vfGroups": [{"vfs": [{"minor": -1, "busID": "0000:1a:00.2"}, {"minor": -1, "busID": "0000:1a:00.3"}]}]}
    _, rows = parse(device_table(_device([gpu, nic], {"node.koordinator.sh/gpu-model": "H800"})))
    assert rows == [
        {"TYPE": "gpu", "MINOR": "1", "ID": "GPU-1", "HEALTH": "XidCritical", "MODEL": "H800", "MEMORY": "80Gi",
         "NUMA": "1", "PCIE": "pci0000:15", "BUS": "0000:19:00.0", "VFS": NONE, "NETDEV": NONE},
        {"TYPE": "rdma", "MINOR": "0", "ID": "0000:1a:00.0", "HEALTH": "Healthy", "MODEL": NONE, "MEMORY": NONE,
         "NUMA": NONE, "PCIE": "pci0000:15", "BUS": "0000:1a:00.0", "VFS": "2", "NETDEV": "ens1f0np0"}]
    assert parse(device_table(_device([])))[1] == []


def _nodemetric(pods: list[dict[str, Any]], devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"resources": {"cpu": "1500m", "memory": "3Gi"}}
    if devices:
        usage["devices"] = devices
    return {"kind": "NodeMetric", "metadata": {"name": "node-1"},
            "status": {"updateTime": "2026-01-02T03:04:05Z", "podsMetric": pods,
                       "nodeMetric": {"nodeUsage": usage, "systemUsage": {"resources": {"cpu": "200m"}}}}}


def _gpu_usage(uuid: str, minor: int, core: str, mem: str) -> dict[str, Any]:
    return {"id": uuid, "minor": minor, "type": "gpu",
            "resources": {"koordinator.sh/gpu-core": core, "koordinator.sh/gpu-memory": mem}}


def test_nodemetric_table_node_line_then_one_line_per_pod() -> None:
    pods = [{"namespace": "default", "name": "web", "qos": "LS", "priority": "koord-prod",
             "podUsage": {"resources": {"cpu": "250m", "memory": "100Mi"}}},
            {"namespace": "batch", "name": "job", "podUsage": {"resources": {"cpu": "1", "memory": "2Gi"}}}]
    node, pod_table = split_sections(nodemetric_table(_nodemetric(pods)))
    assert parse(node)[1] == [{"NODE": "node-1", "CPU": "1500m", "MEMORY": "3Gi", "SYSTEM-CPU": "200m",
                               "SYSTEM-MEMORY": NONE, "PODS": "2", "UPDATED": "2026-01-02T03:04:05Z"}]
    names, rows = parse(pod_table)
    assert names == ["NAMESPACE", "NAME", "QOS", "PRIORITY", "CPU", "MEMORY"]  # no GPU columns without GPUs
    assert [(r["NAME"], r["QOS"], r["PRIORITY"], r["CPU"], r["MEMORY"]) for r in rows] == [
        ("web", "LS", "koord-prod", "250m", "100Mi"), ("job", NONE, NONE, "1", "2Gi")]


def test_nodemetric_table_gpus() -> None:
    pods = [{"namespace": "default", "name": "train", "podUsage": {
                "resources": {"cpu": "1", "memory": "1Gi"},
                "devices": [_gpu_usage("GPU-a", 0, "40", "10Gi"), _gpu_usage("GPU-b", 1, "20", "6Gi")]}},
            {"namespace": "default", "name": "web", "podUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}}]
    node, gpus, pod_table = split_sections(nodemetric_table(_nodemetric(
        pods, [_gpu_usage("GPU-a", 0, "40", "10Gi"), _gpu_usage("GPU-b", 1, "20", "6Gi")])))
    assert parse(node)[1][0]["NODE"] == "node-1"
    assert [(r["MINOR"], r["ID"], r["GPU-CORE"], r["GPU-MEMORY"]) for r in parse(gpus)[1]] == [
        ("0", "GPU-a", "40", "10Gi"), ("1", "GPU-b", "20", "6Gi")]
    assert [(r["NAME"], r["GPU-CORE"], r["GPU-MEMORY"]) for r in parse(pod_table)[1]] == [
        ("train", "40+20", "10Gi+6Gi"), ("web", NONE, NONE)]


def test_plan_and_qos_tables_writes_then_errors() -> None:
    plan = {"writes": [{"op": "mkdir", "path": "sys/fs/resctrl/koordlet-u1", "value": "", "reason": "pod u1"},
                       {"path": "sys/fs/resctrl/koordlet-u1/schemata", "value": "L3:0=f", "reason": "pod u1"}],
            "errors": [{"object": "Pod/default/odd", "field": "annotations[koordinator.sh/cpuQOS]",
                        "message": "not JSON: bad", "reason": "InvalidQoSConfig"}]}
    writes, errors = split_sections(plan_table(plan))
    assert [(r["OP"], r["PATH"], r["VALUE"]) for r in parse(writes)[1]] == [
        ("mkdir", "sys/fs/resctrl/koordlet-u1", NONE), ("write", "sys/fs/resctrl/koordlet-u1/schemata", "L3:0=f")]
    assert parse(errors)[1] == [{"OBJECT": "Pod/default/odd", "FIELD": "annotations[koordinator.sh/cpuQOS]",
                                 "REASON": "InvalidQoSConfig", "MESSAGE": "not JSON: bad"}]
    assert split_sections(plan_table({"writes": [], "errors": []})) == ["OP   PATH   VALUE   REASON\n"]
    counts, _ = split_sections(qos_table({"results": {"written": 3, "unchanged": 5}, "errors": plan["errors"]}))
    assert parse(counts)[1] == [{"RESULT": "unchanged", "WRITES": "5"}, {"RESULT": "written", "WRITES": "3"}]


# --- the commands: the table shows the same items as -o json ---------------------------------------------------

def _run(*args: str) -> str:
    return subprocess.run([*KOORDLET, *args], capture_output=True, text=True, timeout=60, check=True).stdout


@pytest.mark.parametrize("node", ["l20-pcie", "ascend-910b"])
def test_devices_table_matches_json(node: str) -> None:
    args = ["devices", "--host-root", str(NODES / node), "--node-name", node]
    snapshot = NODES / node / "nvml-snapshot.json"
    if snapshot.exists():
        args += ["--nvml-snapshot", str(snapshot)]
    obj = json.loads(_run(*args, "-o", "json"))
    _, rows = parse(_run(*args, "-o", "table"))
    assert [(r["TYPE"], r["MINOR"], r["ID"], r["BUS"]) for r in rows] == [
        (d["type"], str(d["minor"]), d["id"], d["topology"]["busID"]) for d in obj["spec"]["devices"]]


def _sim_node(tmp_path: Path) -> list[str]:
    be = make_pod("batch", UID_A, "BestEffort", labels={"koordinator.sh/qosClass": "BE"})
    ls = make_pod("web", UID_B, "Burstable", labels={"koordinator.sh/qosClass": "LS"})
    ls["metadata"]["annotations"] = {"koordinator.sh/cpuQOS": "{not json"}  # type: ignore[index]
    return cpu_qos_node(tmp_path, [(be, K8sQoS.BESTEFFORT), (ls, K8sQoS.BURSTABLE)])[1]


def test_plan_table_matches_json(tmp_path: Path) -> None:
    args = _sim_node(tmp_path)
    plan = json.loads(_run("plan", *args, "-o", "json"))
    assert plan["writes"] and plan["errors"]  # the scenario has both
    writes, errors = split_sections(_run("plan", *args, "-o", "table"))
    assert [(r["PATH"], r["VALUE"]) for r in parse(writes)[1]] == [
        (w["path"], w["value"] or NONE) for w in plan["writes"]]
    assert [(r["OBJECT"], r["MESSAGE"]) for r in parse(errors)[1]] == [
        (e["object"], e["message"]) for e in plan["errors"]]


def test_nodemetric_table_lists_every_pod(tmp_path: Path) -> None:
    args = _sim_node(tmp_path)
    text = _run("nodemetric", *args, "--window", "0.6", "--collect-res-used-interval", "0.5", "-o", "table")
    node, pods = split_sections(text)
    assert parse(node)[1][0]["NODE"] == "sim"
    assert sorted((r["NAMESPACE"], r["NAME"], r["QOS"]) for r in parse(pods)[1]) == [
        ("default", "batch", "BE"), ("default", "web", "LS")]
