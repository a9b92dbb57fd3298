"""Prometheus families: upstream names/labels, fresh per scrape, gated NodeMetric mirror, capability series."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from koordlet.agent import Agent
from koordlet.config import Config, parse_feature_gates
from koordlet.host.driver import CgroupDriver, K8sQoS

from simhost import SimCgroup, SimHost, make_pod

UID = "dddddddd-0000-4000-8000-000000000004"
SEC = 1_000_000_000


def _samples(agent: Agent, which: str = "all") -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(agent.metrics.render(which).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _agent(tmp_path: Path, host: SimHost, pods: list[dict[str, Any]], gates: str = "") -> Agent:
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir(exist_ok=True)
    for p in pods:
        (pods_dir / f"{p['metadata']['name']}.yaml").write_text(yaml.safe_dump(p))
    agent = Agent(Config(node_name="n1", paths=host.paths, pods_dir=str(pods_dir), state_dir=str(tmp_path / "s"),
                         feature_gates=parse_feature_gates(gates)))
    agent.sync_pods()
    return agent


def test_batch_resources_and_host_apps(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    pod = make_pod("spark", UID, "BestEffort", labels={"koordinator.sh/qosClass": "BE"})
    pod["spec"]["containers"][0]["resources"] = {  # type: ignore[index]
        "requests": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"},
        "limits": {"kubernetes.io/batch-cpu": "2000"}}
    agent = _agent(tmp_path, host, [pod])
    agent.set_nodeslo({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n1"},
                       "spec": {"hostApplications": [{"name": "nginx", "qos": "LS", "priority": "koord-prod"}]}})
    host.write_cgroup("host-latency-sensitive/nginx", SimCgroup(cpu_ns=0, anon=300 << 20))
    agent.collect(now=1e9, mono_ns=0)
    host.write_cgroup("host-latency-sensitive/nginx", SimCgroup(cpu_ns=SEC // 2, anon=300 << 20))
    agent.collect(now=1e9 + 1, mono_ns=SEC)

    s = _samples(agent)
    req = {x.labels["resource"]: (x.labels["unit"], x.value) for x in s["koordlet_container_resource_requests"]}
    assert req == {"kubernetes.io/batch-cpu": ("integer", 2000.0), "kubernetes.io/batch-memory": ("byte", 4 << 30)}
    [lim] = s["koordlet_container_resource_limits"]
    assert lim.labels["unit"] == "byte"  # [quirk] kept from upstream for batch-cpu limits
    assert lim.labels["pod_uid"] == UID and lim.labels["container_id"].startswith("containerd://")
    apps = {x.labels["resource"]: x for x in s["koordlet_host_application_resource_usage"]}
    assert apps["cpu"].value == 0.5 and apps["memory"].value == 300 << 20
    assert apps["cpu"].labels == {"node": "n1", "host_application_name": "nginx", "resource": "cpu",
                                  "priority_class": "koord-prod", "qos": "LS"}
    # pod requests/limits are external metrics, host-app usage internal (as upstream's registries)
    assert "koordlet_container_resource_requests" in _samples(agent, "external")
    assert "koordlet_container_resource_requests" not in _samples(agent, "internal")
    assert _samples(agent, "internal")["process_resident_memory_bytes"][0].value > 0


def test_missing_psi_on_cgroup_v1_is_a_capability_series_not_a_log_flood(tmp_path: Path, caplog: Any) -> None:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.SYSTEMD).setup()
    agent = _agent(tmp_path, host, [make_pod("a", UID, "Guaranteed")], gates="PSICollector=true")
    rel = host.pod_dir(K8sQoS.GUARANTEED, UID)
    host.write_cgroup(rel, SimCgroup())
    for _ in range(5):
        agent.collect_psi()
    [cap] = _samples(agent)["koordlet_agent_kernel_capability"]
    assert cap.labels == {"capability": "psi-cgroup-v1"} and cap.value == 0
    assert sum("psi-cgroup-v1" in r.getMessage() for r in caplog.records) == 1
    assert "koordlet_pod_psi" not in _samples(agent)


def test_nodemetric_mirror_needs_its_gate(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 2, CgroupDriver.SYSTEMD).setup()
    off = _agent(tmp_path, host, [])
    on = _agent(tmp_path, host, [], gates="NodeMetricPromMetrics=true")
    for tick in range(3):
        host.busy({0: 50})
        for a in (off, on):
            a.collect(now=1e9 + tick, mono_ns=tick * SEC)
    for a in (off, on):
        a.build_nodemetric(now=1e9 + 2)
    assert "koordlet_node_metric_node_usage" not in _samples(off)
    usage = {x.labels["resource"]: x for x in _samples(on)["koordlet_node_metric_node_usage"]}
    assert usage["cpu"].labels["unit"] == "core" and usage["cpu"].value == 0.5
    assert usage["memory"].labels["unit"] == "byte" and usage["memory"].value > 0
    numa = _samples(on)["koordlet_node_metric_numa_node_usage"]
    assert {x.labels["numa_node_id"] for x in numa} == {"0", "1"}
