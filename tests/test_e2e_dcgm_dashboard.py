"""End to end: Debian's prometheus scrapes `koordlet run` on the H100 node (snapshot from the real nvidia-smi -q output)
with the shipped scrape job and deploy/prometheus/dcgm-rules.yaml, and every query of dcgm-exporter's Grafana
dashboard returns data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from demo.processes import wait_answering
from demo.stack import DEPLOY, free_port, local_scrape_config

from conftest import require

ROOT = Path(__file__).resolve().parents[1]
NODE = ROOT / "examples" / "nodes" / "h100-hgx-smi"
# grafana/dcgm-exporter-dashboard.json (NVIDIA/dcgm-exporter): its template variables and its panels' queries, with
# $instance and $gpu as Grafana fills them when "All" is chosen
DASHBOARD = [
    "DCGM_FI_DEV_GPU_TEMP",  # label_values(DCGM_FI_DEV_GPU_TEMP, instance) and (…, gpu)
    'DCGM_FI_DEV_GPU_TEMP{instance=~".*", gpu=~".*"}',
    'avg(DCGM_FI_DEV_GPU_TEMP{instance=~".*", gpu=~".*"})',
    'DCGM_FI_DEV_POWER_USAGE{instance=~".*", gpu=~".*"}',
    'sum(DCGM_FI_DEV_POWER_USAGE{instance=~".*", gpu=~".*"})',
    'DCGM_FI_DEV_SM_CLOCK{instance=~".*", gpu=~".*"} * 1000000',
    'DCGM_FI_DEV_GPU_UTIL{instance=~".*", gpu=~".*"}',
    'DCGM_FI_DEV_FB_USED{instance=~".*", gpu=~".*"}',
]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    require(binary is not None, "Debian's prometheus is not installed (make test installs it)")
    assert binary is not None
    work = tmp_path_factory.mktemp("dcgm-e2e")
    for d in ("vr", "kl", "state", "pods"):
        (work / d).mkdir()
    agent_port, prom_port = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "koordlet", "run", f"--sys-root-dir={NODE / 'sys'}/",
             "--cgroup-root-dir=/sys/fs/cgroup/", "--sys-fs-root-dir=/sys/fs/", "--proc-root-dir=/proc/",
             "--run-root-dir=/run/", f"--var-run-root-dir={work / 'vr'}/", f"--var-lib-kubelet-dir={work / 'kl'}/",
             "--enable-nri-runtime-hook=false", f"--nvml-snapshot={NODE / 'nvml-snapshot.json'}",
             f"--pods-dir={work / 'pods'}", "--node-name=h100-hgx", f"--state-dir={work / 'state'}",
             f"--addr=127.0.0.1:{agent_port}", "--feature-gates=Accelerators=true",
             "--collect-res-used-interval=0.5"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        config = local_scrape_config(agent_port, "h100-hgx", "1s")
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [str(DEPLOY / "prometheus" / "dcgm-rules.yaml")]
        (work / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        procs.append(subprocess.Popen(
            [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_answering(f"http://127.0.0.1:{prom_port}/-/ready", procs[-1], "prometheus", timeout=30)
        yield f"http://127.0.0.1:{prom_port}"
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.mark.parametrize("promql", DASHBOARD)
def test_every_dashboard_query_returns_data(prometheus: str, promql: str) -> None:
    want = 1 if promql.startswith(("avg(", "sum(")) else 8
    deadline = time.monotonic() + 30
    while len(result := _query(prometheus, promql)) < want and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(result) == want, f"{promql}: {len(result)} series"
    if want == 8:
        gpus = sorted(int(s["metric"]["gpu"]) for s in result)
        assert gpus == list(range(8)) and {s["metric"]["instance"] for s in result} == {"h100-hgx"}
        assert {s["metric"]["modelName"] for s in result} == {"NVIDIA H100 80GB HBM3"}


def test_values_are_the_snapshots_in_dcgm_units(prometheus: str) -> None:
    doc = json.loads((NODE / "nvml-snapshot.json").read_text())
    power = {s["metric"]["UUID"]: float(s["value"][1]) for s in _query(prometheus, "DCGM_FI_DEV_POWER_USAGE")}
    assert power == {d["uuid"]: d["telemetry"]["powerUsage"] / 1000 for d in doc["devices"]}
    [replays] = _query(prometheus, 'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu="0"}')
    assert float(replays["value"][1]) == doc["devices"][0]["telemetry"]["pcieReplayCounter"]
