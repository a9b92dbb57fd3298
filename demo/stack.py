"""The demo stack: one agent per bundled NVIDIA GPU node (the simulated l20-pcie with RDMA NICs, and the nodes whose
NVML snapshots come from real nvidia-smi outputs), pods with real cgroups on this host, split between the nodes as
their device-allocated says, whose processes the NVML snapshots give GPU work, and Prometheus configured from
deploy/ (Kubernetes discovery replaced by the DaemonSet pod's own labels)."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from demo.pods import DEMO_XIDS, EXAMPLE_GPU_WORK, GPU_PODS, example_pods, gpu_minors, manifest
from demo.processes import stop_all, wait_answering
from koordlet import examplepods
from koordlet.cli import config_from_args, parse_args
from koordlet.health import Health

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
NODES_DIR = ROOT / "examples" / "nodes"


@dataclass(frozen=True)
class DemoNode:
    name: str
    dir: Path  # an examples/nodes/ tree: sys/ and nvml-snapshot.json
    pods: tuple[str, ...]  # the pods on this node (their device-allocated names its devices)


def _gpu_pods_on(node: str) -> tuple[str, ...]:
    return tuple(p.name for p in GPU_PODS if p.node == node)


# Every bundled NVIDIA node but h800-nvlink, which has no real output behind it either and so shows what l20-pcie
# shows (no telemetry read answers); ascend-910b and mlu370 are not NVIDIA (no GPU telemetry, no GPU panels).
NODES = (
    # 8 L20 GPUs and 4 ConnectX-6 Dx NICs with 8 VFs each on their PCIe switches; no GPU telemetry (no real output)
    DemoNode("l20-pcie", NODES_DIR / "l20-pcie", ("web-0",)),
    # from real nvidia-smi -q outputs (examples/nodes/*-smi/README.md names each): 8 H100 SXM with 18 NVLinks each
    DemoNode("h100-hgx", NODES_DIR / "h100-hgx-smi", ("spark-executor-1",)),
    DemoNode("a10", NODES_DIR / "a10-smi", _gpu_pods_on("a10")),  # 1 A10 in a VM, remapped rows pending
    DemoNode("a100-mig", NODES_DIR / "a100-mig-smi", _gpu_pods_on("a100-mig")),  # 1 A100 in MIG mode, 4 instances
    DemoNode("a10g", NODES_DIR / "a10g-smi", _gpu_pods_on("a10g")),  # 1 A10G (AWS g5)
    DemoNode("rtx4090x8", NODES_DIR / "rtx4090x8-smi", _gpu_pods_on("rtx4090x8")),  # 8 GeForce: no ECC
    DemoNode("t4", NODES_DIR / "t4-smi", _gpu_pods_on("t4")),  # 1 T4: retired pages, not remapped rows
)
NODE_NAME = NODES[0].name


@dataclass(frozen=True)
class GpuWork:
    """A pod's process on a GPU of its node (`index`: NVML's, which dcgm-exporter's `gpu` label names)."""

    pod: str
    node: str
    index: int
    sm: int  # %
    memory: int  # bytes


@functools.cache
def pod_manifests() -> dict[str, dict[str, Any]]:
    """Every pod of the stack by name: examples/pods/ and demo.pods' GPU pods (sized to their GPU)."""
    out = example_pods()
    for pod in GPU_PODS:
        [node] = [n for n in NODES if n.name == pod.node]
        [dev] = [d for d in _snapshot(node)["devices"] if d["minor"] == pod.minor]
        out[pod.name] = manifest(pod, int(dev["memoryTotal"]))
    return out


@functools.cache
def _snapshot(node: DemoNode) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((node.dir / "nvml-snapshot.json").read_text())
    return doc


@functools.cache
def gpu_work() -> tuple[GpuWork, ...]:
    """Each pod's GPU work, on the GPU its device-allocated names (minor → the node's NVML index)."""
    work = {p.name: (p.sm, p.memory) for p in GPU_PODS} | EXAMPLE_GPU_WORK
    out = []
    for node in NODES:
        index = {d["minor"]: d["index"] for d in _snapshot(node)["devices"]}
        for name in node.pods:
            for minor in gpu_minors(pod_manifests()[name]):
                out.append(GpuWork(name, node.name, index[minor], *work[name]))
    return tuple(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daemonset() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text()) if d]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    out: dict[str, Any] = ds
    return out


def _meta_name(key: str) -> str:
    """Prometheus' Kubernetes discovery turns a label or annotation name into a meta label suffix this way."""
    return "".join(c if c.isalnum() else "_" for c in key)


def local_scrape_config(port: int, node: str, interval: str | None = None) -> dict[str, Any]:
    """deploy/prometheus/scrape-config.yaml with its Kubernetes discovery replaced by one static target carrying
    the meta labels discovery would give the DaemonSet's pod on `node`; the shipped relabelling then runs as is.
    The port annotation names `port`, where this agent listens (9316 in the cluster)."""
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "prometheus" / "scrape-config.yaml").read_text())
    tmpl = daemonset()["spec"]["template"]
    labels = {f"__meta_kubernetes_pod_label_{_meta_name(k)}": v for k, v in tmpl["metadata"]["labels"].items()}
    annotations = dict(tmpl["metadata"]["annotations"], **{"prometheus.io/port": str(port)})
    labels |= {f"__meta_kubernetes_pod_annotation_{_meta_name(k)}": v for k, v in annotations.items()}
    labels |= {"__meta_kubernetes_pod_node_name": node, "__meta_kubernetes_namespace": "koordinator-system"}
    for job in config["scrape_configs"]:
        sd = job.pop("kubernetes_sd_configs")
        assert sd[0]["role"] == "pod"
        job["static_configs"] = [{"targets": ["127.0.0.1:9316"], "labels": labels}]
        if interval:
            job["scrape_interval"] = interval
    return config


def gpu_snapshot(node: DemoNode, pids: dict[str, int]) -> dict[str, Any]:
    """The node's NVML snapshot with gpu_work()'s processes running as the given pods' PIDs, and no other (the
    processes a real output lists ran on the machine it came from, their PIDs mean nothing on this host), and
    DEMO_XIDS' events."""
    snap = copy.deepcopy(_snapshot(node))
    by_index = {d["index"]: d for d in snap["devices"]}
    for dev in snap["devices"]:
        dev["processes"], dev["utilization"] = [], []
    for w in gpu_work():
        if w.pod not in pids or w.node != node.name:
            continue
        dev = by_index[w.index]
        dev["processes"].append({"pid": pids[w.pod], "usedGpuMemory": w.memory})
        dev["utilization"].append({"pid": pids[w.pod], "smUtil": w.sm, "timeStamp": 1})
    snap["xidEvents"] = snap.get("xidEvents", []) + [
        {"xid": xid, "pciBusId": by_index[index]["pciBusId"], "uuid": by_index[index]["uuid"]}
        for on, index, xid in DEMO_XIDS if on == node.name]
    return snap


def _pod_pids(made: examplepods.ExamplePods | None) -> dict[str, int]:
    """Pod name → the PID of its (first) container's sleeper, found from the process' own cgroup."""
    out: dict[str, int] = {}
    if made is None:
        return out
    uids = {pod["metadata"]["uid"]: name for name, pod in pod_manifests().items()}
    for p in made.sleepers:
        with contextlib.suppress(OSError):
            cgroup = Path(f"/proc/{p.pid}/cgroup").read_text()
            for uid, name in uids.items():
                if uid in cgroup or uid.replace("-", "_") in cgroup:
                    out.setdefault(name, p.pid)
    return out


def write_pods(directory: Path, names: tuple[str, ...] | None = None) -> Path:
    """The stack's pods (or those named) as manifests in `directory`, as kubelet's /pods stand-in reads them."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, pod in pod_manifests().items():
        if names is None or name in names:
            (directory / f"{name}.yaml").write_text(yaml.safe_dump(pod, sort_keys=False))
    return directory


def scrape_config(ports: dict[str, int], interval: str | None = None) -> dict[str, Any]:
    """local_scrape_config with one target per node (node name → the port its agent listens on)."""
    configs = [local_scrape_config(port, node, interval) for node, port in ports.items()]
    for job, *others in zip(*(c["scrape_configs"] for c in configs), strict=True):
        job["static_configs"] = [sc for j in (job, *others) for sc in j["static_configs"]]
    return configs[0]


@dataclass
class Stack:
    agent_url: str  # the first node's
    agent_urls: dict[str, str]  # node name → its agent
    prometheus_url: str
    workdir: Path
    pod_pids: dict[str, int]

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def agent_argv(node: DemoNode, port: int, work: Path, snapshot: Path) -> list[str]:
    """`koordlet run` with the DaemonSet's flags, the simulated node's sysfs for devices and this host's cgroups
    and /proc; standalone (the node's pods, written to work/pods)."""
    [ctr] = daemonset()["spec"]["template"]["spec"]["containers"]
    kept = [a for a in ctr["args"] if a.startswith(("-feature-gates=", "-collect-res-used-interval="))]
    for d in ("var-run", "kubelet"):
        (work / d).mkdir(parents=True, exist_ok=True)
    write_pods(work / "pods", node.pods)
    return [sys.executable, "-m", "koordlet", *ctr["command"][1:], *kept, f"--addr=127.0.0.1:{port}",
            f"--node-name={node.name}", f"--sys-root-dir={node.dir / 'sys'}/", "--cgroup-root-dir=/sys/fs/cgroup/",
            "--sys-fs-root-dir=/sys/fs/", "--proc-root-dir=/proc/", "--run-root-dir=/run/",
            f"--var-run-root-dir={work / 'var-run'}/", f"--var-lib-kubelet-dir={work / 'kubelet'}/",
            f"--pods-dir={work / 'pods'}", f"--state-dir={work / 'state'}", f"--nvml-snapshot={snapshot}",
            "--enable-nri-runtime-hook=false"]


@contextlib.contextmanager
def running(work: Path, interval: str = "1s") -> Iterator[Stack]:
    """Everything up and ready; torn down (cgroups removed) on exit. `interval`: scrape and rule evaluation period
    (the shipped job says 15s; the test does not wait that long)."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        raise RuntimeError("Debian's prometheus is not installed (scripts/install.sh dev installs it)")
    work.mkdir(parents=True, exist_ok=True)
    ns = parse_args(["run", f"--pods-dir={write_pods(work / 'pods')}", "--host-root=/"])
    made = examplepods.start(config_from_args(ns), Health())
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        pids = _pod_pids(made)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        ports = {node.name: free_port() for node in NODES}
        agents = []
        for node in NODES:  # started together, waited for after
            (work / node.name).mkdir(exist_ok=True)
            snapshot = work / node.name / "nvml-snapshot.json"
            snapshot.write_text(json.dumps(gpu_snapshot(node, pids), indent=2))
            logs.append(open(work / node.name / "koordlet.log", "wb"))  # noqa: SIM115 - closed in finally
            procs.append(subprocess.Popen(agent_argv(node, ports[node.name], work / node.name, snapshot), cwd=ROOT,
                                          env=env, stdout=logs[-1], stderr=subprocess.STDOUT,
                                          start_new_session=True))
            agents.append(procs[-1])
        prom_port = free_port()  # Prometheus starts while the agents do (a target not up yet is scraped again)
        config = scrape_config(ports, interval)
        config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
        config["rule_files"] = [str(DEPLOY / "prometheus" / name) for name in ("rules.yaml", "dcgm-rules.yaml")]
        (work / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        logs.append(open(work / "prometheus.log", "wb"))  # noqa: SIM115 - closed in finally
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=logs[-1], stderr=subprocess.STDOUT, start_new_session=True))
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        for (name, url), proc in zip(urls.items(), agents, strict=True):
            wait_answering(f"{url}/readyz", proc, f"koordlet on {name} (log in the work dir)")
        prom_url = f"http://127.0.0.1:{prom_port}"
        wait_answering(f"{prom_url}/-/ready", procs[-1], "prometheus (log in the work dir)")
        yield Stack(urls[NODE_NAME], urls, prom_url, work, pids)
    finally:
        stop_all(procs)
        for f in logs:
            f.close()
        if made is not None:
            made.stop()
