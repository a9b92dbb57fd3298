"""Builders for koord-descheduler tests: nodes, pods and NodeMetrics as upstream's descheduler test helpers build
them (pkg/descheduler/test/test_utils.go; loadaware setupNodeMetrics), a configuration, and `simulate` run through
the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.descheduler import cli

NOW = "2024-05-01T00:00:00Z"
JSON = dict[str, Any]
CRITICAL = 2_000_000_000
MIRROR = {"kubernetes.io/created-by": '{"kind":"SerializedReference","apiVersion":"corev1","reference":{"kind":"Pod"}}',
          "kubernetes.io/config.source": "api", "kubernetes.io/config.mirror": "mirror"}
LOCAL_VOLUME = [{"name": "sample", "hostPath": {"path": "somePath"}, "emptyDir": {"sizeLimit": "10"}}]


def node(name: str, millicpu: int, memory: int, pods: int, *, unschedulable: bool = False,
         labels: dict[str, str] | None = None, extended: dict[str, int] | None = None) -> JSON:
    resources = {"cpu": f"{millicpu}m", "memory": str(memory), "pods": str(pods),
                 **{k: str(v) for k, v in (extended or {}).items()}}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"capacity": dict(resources), "allocatable": dict(resources),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, millicpu: int, memory: int, node_name: str, *, owner: str | None = "ReplicaSet",
        namespace: str = "default", priority: int | None = None, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, volumes: list[JSON] | None = None,
        best_effort: bool = False, extended: dict[str, int] | None = None, **spec: Any) -> JSON:
    """BuildTestPod: one container requesting `millicpu` and `memory` (no limits: Burstable), bound to the node;
    `owner` the ownerReference kind (upstream's RS/DS/"Pod" helpers; None: a bare pod)."""
    requests = {} if best_effort else {"cpu": f"{millicpu}m", "memory": str(memory)}
    requests.update({k: str(v) for k, v in (extended or {}).items()})
    meta: JSON = {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {},
                  "uid": f"uid-{namespace}-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": owner, "name": f"{owner.lower()}-1",
                                    "uid": f"uid-{owner.lower()}-1"}]
    body: JSON = {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": requests}}], **spec}
    if priority is not None:
        body["priority"] = priority
    if volumes:
        body["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": {"phase": "Running"}}


def protected_pods(millicpu: int, memory: int, node_name: str, names: tuple[str, str, str] = ("p6", "p7", "p8"),
                   **kw: Any) -> list[JSON]:
    """The three pods upstream's cases never evict: a DaemonSet pod, a mirror pod with local storage, a
    system-critical pod in kube-system."""
    ds, mirror, critical = names
    return [pod(ds, millicpu, memory, node_name, owner="DaemonSet", **kw),
            pod(mirror, millicpu, memory, node_name, owner="Pod", annotations=dict(MIRROR), volumes=LOCAL_VOLUME,
                **kw),
            pod(critical, millicpu, memory, node_name, owner=None, namespace="kube-system", priority=CRITICAL, **kw)]


def node_metrics(nodes: list[JSON], pods: list[JSON], usage: dict[str, JSON] | None = None,
                 update_time: str | None = NOW) -> list[JSON]:
    """setupNodeMetrics: each pod's usage is its requests (unless given), the node's usage their sum; every node
    has a NodeMetric."""
    out: dict[str, JSON] = {}
    for n in nodes:
        out[n["metadata"]["name"]] = {
            "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
            "metadata": {"name": n["metadata"]["name"]},
            "status": {"updateTime": update_time, "nodeMetric": {"nodeUsage": {"resources": {}}}, "podsMetric": []}}
    for p in pods:
        nm = out.get(p["spec"].get("nodeName"))
        if nm is None:
            continue
        key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        resources = (usage or {}).get(key, p["spec"]["containers"][0]["resources"]["requests"])
        nm["status"]["podsMetric"].append({"namespace": p["metadata"]["namespace"], "name": p["metadata"]["name"],
                                           "podUsage": {"resources": dict(resources)}})
    return list(out.values())


def config(low: JSON | None = None, high: JSON | None = None, *, evictor: JSON | None = None,
           top: JSON | None = None, profile: JSON | None = None, balance: bool = True, **lownodeload: Any) -> JSON:
    """A DeschedulerConfiguration: DefaultEvictor as the evict and filter plugin (MigrationController disabled),
    LowNodeLoad under balance with consecutiveAbnormalities 1 (as upstream's table tests) unless given."""
    args: JSON = {"anomalyCondition": {"consecutiveAbnormalities": 1, "consecutiveNormalities": 1}, **lownodeload}
    if low is not None:
        args["lowThresholds"] = low
    if high is not None:
        args["highThresholds"] = high
    plugins: JSON = {"evict": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]},
                     "filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "DefaultEvictor"}]}}
    if balance:
        plugins["balance"] = {"enabled": [{"name": "LowNodeLoad"}]}
    prof: JSON = {"name": "koord-descheduler", "plugins": plugins,
                  "pluginConfig": [{"name": "LowNodeLoad", "args": args},
                                   {"name": "DefaultEvictor", "args": evictor or {}}], **(profile or {})}
    return {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerConfiguration", "profiles": [prof],
            **(top or {})}


def simulate(tmp: Path, objects: list[JSON], cfg: JSON | None, capsys: pytest.CaptureFixture[str], *,
             rounds: int = 1, now: str = NOW, extra: tuple[str, ...] = ()) -> JSON:
    """`koord-descheduler simulate --cluster DIR [--config FILE] --rounds N --now T -o json`, parsed."""
    cluster = tmp / "cluster"
    cluster.mkdir(exist_ok=True)
    (cluster / "objects.yaml").write_text(yaml.safe_dump_all(objects))
    argv = ["simulate", "--cluster", str(cluster), "--rounds", str(rounds), "--now", now, "-o", "json", *extra]
    if cfg is not None:
        (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
        argv += ["--config", str(tmp / "config.yaml")]
    capsys.readouterr()
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    result: JSON = json.loads(out)
    return result


def refused(tmp: Path, cfg: JSON | str, capsys: pytest.CaptureFixture[str], objects: list[JSON] | None = None
            ) -> str:
    """Run simulate with a configuration that must be refused: exit 2, one line on stderr (returned)."""
    cluster = tmp / "cluster"
    cluster.mkdir(exist_ok=True)
    (cluster / "objects.yaml").write_text(yaml.safe_dump_all(objects or [node("n1", 1000, 1000, 10)]))
    path = tmp / "config.yaml"
    path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg))
    capsys.readouterr()
    rc = cli.main(["simulate", "--cluster", str(cluster), "--config", str(path), "--now", NOW])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def evicted(result: JSON) -> list[str]:
    return [e["name"] for e in result["evictions"]]
