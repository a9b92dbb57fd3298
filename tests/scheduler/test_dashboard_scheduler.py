"""deploy/monitoring/'s koord-scheduler dashboard against a real koord-sched: kmock as the API server, the
scheduler placing GPU pods, its /metrics scraped by Debian's prometheus; every panel returns data but those this
cluster cannot fill (listed with why)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kmock
import yaml
from test_deploy_dashboards import substituted

from apis.client.kubeapi import KubeClient, KubeConfig
from demo.dashboards import SCHEDULER
from demo.processes import stop, wait_answering
from scheduler.cli import profile
from scheduler.cluster import Cluster
from scheduler.framework import Scheduler
from scheduler.metrics import SchedulerMetrics
from scheduler.runner import SecondaryScheduler
from scheduler.services import DiagnosisAPI, DiagnosisServer

from conftest import require
from gpu_cluster import pod, seed

NAME = "koord-py"
PODGROUPS = "scheduling.sigs.k8s.io/v1alpha1/podgroups"
NO_DATA_HERE = {"Gang groups decided": "no PodGroup in this cluster"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def prometheus(work: Path, target: str) -> Iterator[Callable[[str], list[dict[str, Any]]]]:
    """Debian's prometheus scraping `target` each second; yields an instant-query function."""
    binary = shutil.which("prometheus")
    require(binary is not None, "Debian's prometheus is not installed (scripts/install.sh dev installs it)")
    assert binary is not None
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": "koord-sched", "static_configs": [{"targets": [target]}]}]}
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{_free_port()}"
    with open(work / "prometheus.log", "wb") as log:
        proc = subprocess.Popen([binary, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address={url[7:]}"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def query(promql: str) -> list[dict[str, Any]]:
            with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}),
                                        timeout=10) as r:
                body = json.load(r)
            assert body["status"] == "success", body
            result: list[dict[str, Any]] = body["data"]["result"]
            return result

        try:
            try:
                wait_answering(f"{url}/-/ready", proc, "prometheus", timeout=30)
            except RuntimeError as e:
                raise AssertionError(f"{e}: {(work / 'prometheus.log').read_text()[-2000:]}") from None
            yield query
        finally:
            stop(proc)


async def test_every_panel_of_the_scheduler_dashboard_returns_data(kmock: kmock.KubernetesEmulator,
                                                                   tmp_path: Path) -> None:
    seed(kmock, (PODGROUPS,))
    # one malformed object, so the malformed-objects panel has data here as in a cluster that has one
    kmock.objects["v1/nodes", None, "broken"] = {"apiVersion": "v1", "metadata": {"name": "broken"},
                                                 "status": {"allocatable": {"cpu": "lots"}}}
    for name, gpus in (("p1", 1), ("p2", 2), ("huge", 64)):
        p = pod(name, {"nvidia.com/gpu": gpus})
        p["spec"]["schedulerName"] = NAME
        kmock.objects["v1/pods", "default", name] = p

    def make(cluster: Cluster) -> Scheduler:
        return Scheduler(cluster, profile(None))

    runner = SecondaryScheduler(KubeClient(KubeConfig(server=str(kmock.url))), NAME, make)
    runner.metrics = SchedulerMetrics(NAME)
    await asyncio.to_thread(runner.run_once)
    server = DiagnosisServer(("127.0.0.1", 0), DiagnosisAPI(runner.state, runner.metrics))
    server.start()
    try:
        with prometheus(tmp_path, f"127.0.0.1:{server.server_address[1]}") as query:
            panels = {p.title: [substituted(q.expr) for q in p.queries] for row in SCHEDULER.rows
                      for p in row.panels}
            assert set(NO_DATA_HERE) <= set(panels)
            want = set(panels) - set(NO_DATA_HERE)
            deadline = time.monotonic() + 30  # targets reach the scrape loop after ~5 s; rates need two scrapes
            while True:
                have = await asyncio.to_thread(lambda: {t for t, exprs in panels.items()
                                                        if any(query(e) for e in exprs)})
                if want <= have or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert want - have == set(), f"panels without data: {sorted(want - have)}"
            assert not have & set(NO_DATA_HERE), "a panel listed as empty here has data: take it off NO_DATA_HERE"
    finally:
        server.shutdown()
        server.server_close()
