"""`koordlet run --nvml-snapshot` on each bundled GPU node: /metrics holds the GPU telemetry families of every read the
snapshot holds (and none of a read it records as unsupported), with dcgm-exporter's labels; a GPU allocated to one pod
carries that pod's namespace/pod/container."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "examples" / "nodes"
SMI_NODES = ["a10-smi", "h100-hgx-smi", "rtx4090x8-smi", "a100-mig-smi", "a10g-smi", "t4-smi"]
# telemetry read → a family it feeds (as exposed: counters with _total)
READ_FAMILY = {
    "utilization": "koordlet_gpu_utilization_percent",
    "encoderUtilization": "koordlet_gpu_encoder_utilization_percent",
    "decoderUtilization": "koordlet_gpu_decoder_utilization_percent",
    "memory": "koordlet_gpu_framebuffer_reserved_bytes",
    "temperature": "koordlet_gpu_temperature_celsius",
    "memoryTemperature": "koordlet_gpu_memory_temperature_celsius",
    "powerUsage": "koordlet_gpu_power_usage_watts",
    "totalEnergyConsumption": "koordlet_gpu_energy_joules_total",
    "clocks": "koordlet_gpu_sm_clock_hertz",
    "clocksEventReasons": "koordlet_gpu_clocks_event_reasons",
    "eccErrors": "koordlet_gpu_ecc_errors_total",
    "retiredPages": "koordlet_gpu_retired_pages_total",
    "remappedRows": "koordlet_gpu_remapped_rows_total",
    "pcieThroughput": "koordlet_gpu_pcie_throughput_bytes_per_second",
    "pcieReplayCounter": "koordlet_gpu_pcie_replays_total",
    "nvlinkThroughput": "koordlet_gpu_nvlink_data_bytes_total",
    "nvlinkErrors": "koordlet_gpu_nvlink_errors_total",
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _first(node: str) -> dict[str, Any]:
    """The node's GPU of the lowest minor: the one the example pod is allocated."""
    doc = json.loads((NODES / node / "nvml-snapshot.json").read_text())
    return dict(min(doc["devices"], key=lambda d: d["minor"]))


def _pod(tmp: Path, minor: int) -> None:
    alloc = json.dumps({"gpu": [{"minor": minor, "resources": {"koordinator.sh/gpu-core": "100"}}]})
    (tmp / "pods").mkdir()
    (tmp / "pods" / "train.json").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "5f0c7a3e-0000-4000-8000-000000000001",
                     "annotations": {ANNOTATION_DEVICE_ALLOCATED: alloc}},
        "spec": {"containers": [{"name": "trainer", "image": "pytorch"}, {"name": "sidecar", "image": "envoy"}]},
        "status": {"phase": "Running"}}))


def _start(tmp: Path, node: str) -> tuple[subprocess.Popen[str], int]:
    port, work = _port(), NODES / node
    for d in ("vr", "kl", "state"):
        (tmp / d).mkdir(exist_ok=True)
    _pod(tmp, _first(node)["minor"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "koordlet", "run", f"--sys-root-dir={work / 'sys'}/",
         "--cgroup-root-dir=/sys/fs/cgroup/",
         "--sys-fs-root-dir=/sys/fs/", "--proc-root-dir=/proc/", "--run-root-dir=/run/",
         f"--var-run-root-dir={tmp / 'vr'}/", f"--var-lib-kubelet-dir={tmp / 'kl'}/", "--enable-nri-runtime-hook=false",
         f"--nvml-snapshot={work / 'nvml-snapshot.json'}", f"--pods-dir={tmp / 'pods'}", "--node-name=gpu-node",
         f"--state-dir={tmp / 'state'}", f"--addr=127.0.0.1:{port}", "--feature-gates=Accelerators=true",
         "--collect-res-used-interval=0.2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc, port


def _scrape(proc: subprocess.Popen[str], port: int, deadline: float) -> dict[str, list[Any]]:
    """The agent's /metrics once its first telemetry pass is in: family name → samples."""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            text = ""
        if "koordlet_gpu_temperature_celsius{" in text:
            return {f.name + ("_total" if f.type == "counter" else ""): f.samples
                    for f in text_string_to_metric_families(text)}
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    raise AssertionError("no GPU telemetry on /metrics in time")


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, list[Any]]]]:
    """Every bundled node's agent, started side by side (each takes seconds to start), scraped once."""
    agents = {node: _start(tmp_path_factory.mktemp(node), node) for node in SMI_NODES}
    try:
        deadline = time.monotonic() + 60
        yield {node: _scrape(proc, port, deadline) for node, (proc, port) in agents.items()}
    finally:
        for proc, _ in agents.values():
            proc.kill()  # nothing of theirs outlives them: no cgroups, state in the temp dirs
        for proc, _ in agents.values():
            proc.wait(timeout=10)


@pytest.mark.parametrize("node", SMI_NODES)
def test_families_and_dcgm_labels_from_each_bundled_snapshot(scraped: dict[str, Any], node: str) -> None:
    doc = json.loads((NODES / node / "nvml-snapshot.json").read_text())
    first = _first(node)
    fams = scraped[node]
    temps = {s.labels["UUID"]: s.labels for s in fams["koordlet_gpu_temperature_celsius"]}
    for d in doc["devices"]:
        labels = temps[d["uuid"]]
        domain, rest = d["pciBusId"].split(":", 1)
        want = {"node": "gpu-node", "gpu": str(d["index"]), "UUID": d["uuid"], "device": f"nvidia{d['index']}",
                "pci_bus_id": f"{int(domain, 16):08X}:{rest.upper()}", "modelName": d["name"], "Hostname": "gpu-node",
                "DCGM_FI_DRIVER_VERSION": doc["driverVersion"]}
        assert {k: labels[k] for k in want} == want
        owner = ("ml", "train-0", "trainer") if d["uuid"] == first["uuid"] else ("", "", "")
        assert (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", "")) == owner
        for read, family in READ_FAMILY.items():
            has = any(s.labels["UUID"] == d["uuid"] for s in fams.get(family, []))
            if read == "pcieThroughput":  # one GPU's a pass (a 20 ms sample): the others' come in later passes
                assert not has or read in d["telemetry"], (node, d["uuid"], read)
                continue
            assert has == (read in d["telemetry"]), (node, d["uuid"], read)
    pcie = {s.labels["UUID"] for s in fams.get("koordlet_gpu_pcie_throughput_bytes_per_second", [])}
    assert len(pcie) >= 1 or not any("pcieThroughput" in d["telemetry"] for d in doc["devices"])
    power = {s.labels["UUID"]: s.value for s in fams["koordlet_gpu_power_usage_watts"]}
    assert power == {d["uuid"]: d["telemetry"]["powerUsage"] / 1000 for d in doc["devices"]}
    [last] = [s for s in fams["koordlet_gpu_last_xid"] if s.labels["UUID"] == first["uuid"]]
    assert last.value == 0  # no XID events in these snapshots


def test_mig_instances_have_their_own_framebuffer_series(scraped: dict[str, Any]) -> None:
    doc = json.loads((NODES / "a100-mig-smi" / "nvml-snapshot.json").read_text())
    migs = doc["devices"][0]["telemetry"]["migDevices"]
    fams = scraped["a100-mig-smi"]
    used = {(s.labels.get("GPU_I_PROFILE", ""), s.labels.get("GPU_I_ID", "")): s.value
            for s in fams["koordlet_gpu_framebuffer_used_bytes"]}
    want = {("1g.20gb", str(m["gpuInstanceId"])): float(m["memoryUsed"]) for m in migs}
    assert used == {("", ""): float(doc["devices"][0]["telemetry"]["memory"]["used"]), **want}
    assert "koordlet_gpu_utilization_percent" not in fams or not fams["koordlet_gpu_utilization_percent"]
