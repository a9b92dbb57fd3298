"""deploy/prometheus/dcgm-rules.yaml under `promtool test rules`: the agent's GPU families, as it exposes them for a
bundled snapshot node, become dcgm-exporter's DCGM_FI_* series in dcgm-exporter's units and labels, and the queries
of dcgm-exporter's Grafana dashboard answer from them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.devices.gpu_series import telemetry_families
from koordlet.devices.nvidia.snapshot import load_snapshot
from koordlet.devices.nvidia.telemetry import TelemetryCollector, XidCounts
from koordlet.health import Health

from conftest import require

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "dcgm-rules.yaml"
NODES = ROOT / "examples" / "nodes"
MIB = 1 << 20
TARGET = {"instance": "node-1", "job": "koordlet"}
# grafana/dcgm-exporter-dashboard.json (NVIDIA/dcgm-exporter): its panels' queries with $instance and $gpu chosen
DASHBOARD = [
    'DCGM_FI_DEV_GPU_TEMP{instance=~"node-1", gpu=~".*"}',
    'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"node-1", gpu=~".*"})',
    'DCGM_FI_DEV_POWER_USAGE{instance=~"node-1", gpu=~".*"}',
    'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"node-1", gpu=~".*"})',
    'DCGM_FI_DEV_SM_CLOCK{instance=~"node-1", gpu=~".*"} * 1000000',
    'DCGM_FI_DEV_GPU_UTIL{instance=~"node-1", gpu=~".*"}',
    'DCGM_FI_DEV_FB_USED{instance=~"node-1", gpu=~".*"}',
]


def _exposed(node: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the koordlet_gpu_* samples the agent exposes for the node, the snapshot document)."""
    path = NODES / node / "nvml-snapshot.json"
    backend = load_snapshot(str(path))
    backend.init()
    gpus = [backend.device(b) for b in backend.bus_ids()]
    tel = TelemetryCollector(backend, Health(), period=0)
    for _ in gpus:  # PCIe throughput is sampled for one GPU a pass
        tel.collect([g.bus_id for g in gpus])
    samples = []
    for fam in telemetry_families("node-1", gpus, backend.driver_version(), tel.latest, XidCounts(), []):
        for s in fam.samples:
            samples.append({"name": s.name, "labels": {k: v for k, v in s.labels.items() if v}, "value": s.value})
    return samples, backend.doc


def _series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted({**labels, **TARGET}.items())) + "}"


def _promtool(tmp_path: Path, input_series: list[dict[str, str]], tests: list[dict[str, Any]]) -> None:
    require(shutil.which("promtool") is not None, "promtool (Debian's prometheus) is not installed")
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": input_series, "promql_expr_test": tests}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = subprocess.run(["promtool", "test", "rules", str(tmp_path / "test.yaml")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def _expect(expr: str, rows: list[tuple[dict[str, str], float]]) -> dict[str, Any]:
    return {"expr": expr, "eval_time": "2m",
            "exp_samples": [{"labels": _series("", labels) if "__name__" not in labels else
                             _series(labels.pop("__name__"), labels), "value": value} for labels, value in rows]}


def test_the_prometheus_rule_carries_the_rules_file_group() -> None:
    [rule] = list(yaml.safe_load_all((ROOT / "deploy" / "servicemonitor" / "prometheusrule-dcgm.yaml").read_text()))
    [monitor] = list(yaml.safe_load_all((ROOT / "deploy" / "servicemonitor" / "servicemonitor.yaml").read_text()))
    assert (rule["kind"], rule["metadata"]["namespace"]) == ("PrometheusRule", monitor["metadata"]["namespace"])
    assert rule["metadata"]["labels"] == monitor["metadata"]["labels"]
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


@pytest.mark.parametrize("node", ["h100-hgx-smi", "a10-smi"])
def test_dcgm_names_units_and_labels_from_the_agents_series(tmp_path: Path, node: str) -> None:
    samples, doc = _exposed(node)
    inputs = [{"series": _series(s["name"], s["labels"]), "values": f"{s['value']:f}x5"} for s in samples]
    by_bus = {d["pciBusId"]: d for d in doc["devices"]}
    gpu_labels = {s["labels"]["pci_bus_id"]: {k: v for k, v in s["labels"].items()} for s in samples
                  if s["name"] == "koordlet_gpu_temperature_celsius"}
    assert len(gpu_labels) == len(doc["devices"])

    def per_gpu(record: str, value: Any) -> list[tuple[dict[str, str], float]]:
        rows = []
        for bus, labels in sorted(gpu_labels.items()):
            tel = by_bus["0000:" + bus.split(":", 1)[1].lower()]["telemetry"]
            v = value(tel)
            if v is not None:
                rows.append(({"__name__": record, **labels}, float(v)))
        return rows

    def read(name: str, key: str | None = None) -> Any:
        return lambda t: None if name not in t else (t[name][key] if key else t[name])

    checks = {  # DCGM field → its value in dcgm-exporter's unit, straight from the snapshot
        "DCGM_FI_DEV_GPU_TEMP": read("temperature"),
        "DCGM_FI_DEV_MEMORY_TEMP": read("memoryTemperature"),
        "DCGM_FI_DEV_POWER_USAGE": lambda t: t["powerUsage"] / 1000,
        "DCGM_FI_DEV_SM_CLOCK": read("clocks", "sm"),
        "DCGM_FI_DEV_MEM_CLOCK": read("clocks", "memory"),
        "DCGM_FI_DEV_GPU_UTIL": read("utilization", "gpu"),
        "DCGM_FI_DEV_FB_USED": lambda t: t["memory"]["used"] / MIB,
        "DCGM_FI_DEV_FB_FREE": lambda t: t["memory"]["free"] / MIB,
        "DCGM_FI_DEV_FB_RESERVED": lambda t: t["memory"]["reserved"] / MIB,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": read("pcieReplayCounter"),
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": read("pcieThroughput", "txKBps"),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": read("clocksEventReasons"),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": read("remappedRows", "uncorrectable"),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda t: float(t["remappedRows"]["failure"]),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": read("eccErrors", "volatileUncorrectable"),
        "DCGM_FI_DEV_XID_ERRORS": lambda t: 0,
    }
    tests = [_expect(record, per_gpu(record, value)) for record, value in checks.items()]
    assert all(t["exp_samples"] for t in tests if t["expr"] != "DCGM_FI_DEV_MEMORY_TEMP" or node == "h100-hgx-smi")
    _promtool(tmp_path, inputs, tests)


def test_dcgm_exporters_dashboard_queries_answer(tmp_path: Path) -> None:
    samples, doc = _exposed("h100-hgx-smi")
    inputs = [{"series": _series(s["name"], s["labels"]), "values": f"{s['value']:f}x5"} for s in samples]
    tel = [d["telemetry"] for d in doc["devices"]]
    temps = {s["labels"]["gpu"]: s for s in samples if s["name"] == "koordlet_gpu_temperature_celsius"}
    labels = {gpu: s["labels"] for gpu, s in temps.items()}
    by_gpu = {str(d["index"]): d["telemetry"] for d in doc["devices"]}
    expected: list[list[tuple[dict[str, str], float]]] = [
        [({"__name__": "DCGM_FI_DEV_GPU_TEMP", **labels[g]}, by_gpu[g]["temperature"]) for g in sorted(labels)],
        [({}, sum(t["temperature"] for t in tel) / len(tel))],
        [({"__name__": "DCGM_FI_DEV_POWER_USAGE", **labels[g]}, by_gpu[g]["powerUsage"] / 1000)
         for g in sorted(labels)],
        [({}, sum(t["powerUsage"] for t in tel) / 1000)],
        [(dict(labels[g]), by_gpu[g]["clocks"]["sm"] * 1e6) for g in sorted(labels)],
        [({"__name__": "DCGM_FI_DEV_GPU_UTIL", **labels[g]}, by_gpu[g]["utilization"]["gpu"]) for g in sorted(labels)],
        [({"__name__": "DCGM_FI_DEV_FB_USED", **labels[g]}, by_gpu[g]["memory"]["used"] / MIB) for g in sorted(labels)],
    ]
    tests = []
    for expr, rows in zip(DASHBOARD, expected, strict=True):
        if expr.startswith(("avg(", "sum(")):  # an aggregate (no labels), summed in no fixed order: within 1e-9
            tests.append({"expr": f"abs({expr} - {rows[0][1]!r}) < bool 1e-9", "eval_time": "2m",
                          "exp_samples": [{"labels": "{}", "value": 1}]})
        else:
            tests.append(_expect(expr, rows))
    _promtool(tmp_path, inputs, tests)


def test_nvlink_bandwidth_and_mig_framebuffer(tmp_path: Path) -> None:
    """NVLink bandwidth as dcgm-exporter's value behaves (MB/s over both directions) and MIG instances' framebuffer
    with GPU_I_PROFILE/GPU_I_ID, from the A100 MIG node."""
    samples, doc = _exposed("a100-mig-smi")
    gpu = next(s["labels"] for s in samples if s["name"] == "koordlet_gpu_temperature_celsius")
    inputs = [{"series": _series(s["name"], s["labels"]), "values": f"{s['value']:f}x5"} for s in samples
              if s["name"].startswith("koordlet_gpu_framebuffer")]
    inputs += [{"series": _series("koordlet_gpu_nvlink_data_bytes_total", {**gpu, "direction": "tx"}),
                "values": "0+60000000x5"},
               {"series": _series("koordlet_gpu_nvlink_data_bytes_total", {**gpu, "direction": "rx"}),
                "values": "0+120000000x5"}]
    migs = doc["devices"][0]["telemetry"]["migDevices"]
    assert [m["profile"] for m in migs] == ["1g.20gb"] * 4
    rows = [({"__name__": "DCGM_FI_DEV_FB_USED", **gpu, "GPU_I_PROFILE": m["profile"],
              "GPU_I_ID": str(m["gpuInstanceId"])}, m["memoryUsed"] / MIB) for m in migs]
    _promtool(tmp_path, inputs, [
        _expect('DCGM_FI_DEV_FB_USED{GPU_I_ID!=""}', rows),
        _expect("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", [({"__name__": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", **gpu},
                                                         3.0)]),
    ])
