"""Prometheus families: upstream names/labels, fresh per scrape, gated NodeMetric mirror, capability series."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
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


def _sample_set(text: bytes) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                  for fam in text_string_to_metric_families(text.decode()) for s in fam.samples)


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

    # Parsed once per pod list: a changed manifest is a new list, and the next scrape shows the new value.
    pod["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/batch-cpu"] = "3500"  # type: ignore[index]
    manifest = tmp_path / "pods" / "spark.yaml"
    manifest.write_text(yaml.safe_dump(pod))
    st = manifest.stat()
    os.utime(manifest, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    agent.sync_pods()
    agent.collect(now=1e9 + 2, mono_ns=2 * SEC)
    req = {x.labels["resource"]: x.value for x in _samples(agent)["koordlet_container_resource_requests"]}
    assert req["kubernetes.io/batch-cpu"] == 3500.0


def test_missing_psi_on_cgroup_v1_is_a_capability_series_not_a_log_flood(tmp_path: Path, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    host = SimHost(tmp_path / "h", 1, CgroupDriver.SYSTEMD).setup()
    agent = _agent(tmp_path, host, [make_pod("a", UID, "Guaranteed")], gates="PSICollector=true")
    rel = host.pod_dir(K8sQoS.GUARANTEED, UID)
    host.write_cgroup(rel, SimCgroup())
    for _ in range(5):
        agent.collect_psi()
    [cap] = _samples(agent)["koordlet_agent_kernel_capability"]
    assert cap.labels == {"capability": "psi-cgroup-v1"} and cap.value == 0
    [line] = [r for r in caplog.records if "psi-cgroup-v1" in r.getMessage()]
    assert line.levelno == logging.INFO  # PSI idles on mainline v1 kernels: expected, not a warning
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


def test_pod_and_container_usage_series_after_collection(simhost: SimHost, tmp_path: Path) -> None:
    pod = make_pod("web", UID, "Burstable", containers=2, namespace="shop")
    agent = _agent(tmp_path, simhost, [pod])
    agent.advisor.cgroups.container_stride = 1  # containers every tick (the 10 s interval: test_container_interval)
    rel = simhost.pod_dir(K8sQoS.BURSTABLE, UID)
    cids = [cs["containerID"] for cs in pod["status"]["containerStatuses"]]  # type: ignore[index]
    ctrs = [simhost.container_dir(rel, cid) for cid in cids]
    mib = 1 << 20
    for tick in range(2):  # c0 uses 0.5 core and c1 0.25; the pod is throttled in 3 of its 12 periods
        simhost.write_cgroup(rel, SimCgroup(cpu_ns=int(0.75 * SEC) * tick, anon=96 * mib, file=500 * mib,
                                            kernel=8 * mib, nr_periods=12 * tick, nr_throttled=3 * tick,
                                            throttled_ns=SEC // 10 * tick))
        simhost.write_cgroup(ctrs[0], SimCgroup(cpu_ns=SEC // 2 * tick, anon=64 * mib))  # no CFS quota
        simhost.write_cgroup(ctrs[1], SimCgroup(cpu_ns=SEC // 4 * tick, anon=32 * mib, file=2 * mib,
                                                nr_periods=12 * tick, nr_throttled=6 * tick,
                                                throttled_ns=SEC // 20 * tick))
        agent.collect(now=1e9 + tick, mono_ns=tick * SEC)

    s = _samples(agent, "external")
    pod_labels = {"node": "n1", "namespace": "shop", "pod": "web", "uid": UID}
    [cpu] = s["koordlet_pod_cpu_usage_seconds_total"]
    assert cpu.labels == pod_labels and cpu.value == pytest.approx(0.75)
    [ws] = s["koordlet_pod_memory_working_set_bytes"]
    # cAdvisor's usage − inactive_file: anon, kernel memory and the active half of the page cache
    assert ws.labels == pod_labels and ws.value == 96 * mib + 8 * mib + 250 * mib
    assert [x.value for x in s["koordlet_pod_cpu_cfs_periods_total"]] == [12]
    assert [x.value for x in s["koordlet_pod_cpu_cfs_throttled_periods_total"]] == [3]
    assert [x.value for x in s["koordlet_pod_cpu_cfs_throttled_seconds_total"]] == [pytest.approx(0.1)]

    def by_container(name: str) -> dict[str, float]:
        out = {}
        for x in s.get(name, []):
            assert x.labels == {**pod_labels, "container": x.labels["container"]}
            out[x.labels["container"]] = x.value
        return out

    assert by_container("koordlet_container_cpu_usage_seconds_total") == pytest.approx({"c0": 0.5, "c1": 0.25})
    assert by_container("koordlet_container_memory_working_set_bytes") == {"c0": 64 * mib, "c1": 33 * mib}
    # CFS series only where a quota ran (c1), as cAdvisor
    assert by_container("koordlet_container_cpu_cfs_throttled_periods_total") == {"c1": 6}
    assert by_container("koordlet_container_cpu_cfs_throttled_seconds_total") == pytest.approx({"c1": 0.05})
    text = agent.metrics.render("external").decode()
    assert "# TYPE koordlet_pod_cpu_usage_seconds_total counter\n" in text
    assert "# TYPE koordlet_container_memory_working_set_bytes gauge\n" in text
    assert not any(old in text for old in ("pod_name=", "pod_namespace=", "used_cpu_cores{", "throttled_ratio"))
    assert "koordlet_pod_cpu_usage_seconds_total" not in _samples(agent, "internal")
    # the same samples as prometheus_client writes (its TYPE lines would add a second `_total` to the counters)
    assert _sample_set(agent.metrics.render("external")) == _sample_set(generate_latest(agent.metrics.external))

    # the working set is read when a scrape renders: with the cgroups gone, counters of the last tick remain
    simhost.remove_cgroup(rel)
    after_rm = _samples(agent, "external")
    assert after_rm["koordlet_pod_cpu_usage_seconds_total"][0].value == pytest.approx(0.75)
    assert "koordlet_pod_memory_working_set_bytes" not in after_rm
    # a deleted pod's series are gone after the next collection
    (tmp_path / "pods" / "web.yaml").unlink()
    agent.sync_pods()
    agent.collect(now=1e9 + 2, mono_ns=2 * SEC)
    after = _samples(agent, "external")
    ours = ("koordlet_pod_cpu_usage", "koordlet_pod_memory", "koordlet_container_")
    assert [n for n in after if n.startswith(ours)] == []


def test_counters_are_there_from_the_first_tick_and_reset_with_a_recreated_container(tmp_path: Path) -> None:
    """A counter needs no previous read; a restarted container is a new cgroup whose counter starts again, which
    Prometheus' rate() takes as a reset (as cAdvisor's series)."""
    host = SimHost(tmp_path / "h", 1, CgroupDriver.SYSTEMD).setup()
    pod = make_pod("a", UID, "Guaranteed")
    agent = _agent(tmp_path, host, [pod])
    agent.advisor.cgroups.container_stride = 1  # containers every tick (the 10 s interval: test_container_interval)
    rel = host.pod_dir(K8sQoS.GUARANTEED, UID)
    ctr = host.container_dir(rel, pod["status"]["containerStatuses"][0]["containerID"])  # type: ignore[index]
    host.write_cgroup(rel, SimCgroup(cpu_ns=5 * SEC, anon=1 << 20))
    host.write_cgroup(ctr, SimCgroup(cpu_ns=5 * SEC, anon=1 << 20))
    agent.collect(now=1e9, mono_ns=0)
    s = _samples(agent, "external")
    assert [x.value for x in s["koordlet_pod_cpu_usage_seconds_total"]] == [5.0]
    assert [x.value for x in s["koordlet_container_cpu_usage_seconds_total"]] == [5.0]
    assert [x.value for x in s["koordlet_pod_memory_working_set_bytes"]] == [1 << 20]
    host.remove_cgroup(ctr)
    host.write_cgroup(ctr, SimCgroup(cpu_ns=SEC // 2, anon=1 << 20))  # recreated: its counter starts again
    host.write_cgroup(rel, SimCgroup(cpu_ns=5 * SEC + SEC // 2, anon=1 << 20))  # the pod's keeps counting
    agent.collect(now=1e9 + 1, mono_ns=SEC)
    s = _samples(agent, "external")
    assert [x.value for x in s["koordlet_container_cpu_usage_seconds_total"]] == [0.5]
    assert [x.value for x in s["koordlet_pod_cpu_usage_seconds_total"]] == [5.5]


def test_disable_container_metrics_keeps_the_pod_series_only(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 2, CgroupDriver.SYSTEMD).setup()
    pod = make_pod("a", UID, "Burstable", containers=3)
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    (pods_dir / "a.yaml").write_text(yaml.safe_dump(pod))
    rel = host.pod_dir(K8sQoS.BURSTABLE, UID)
    host.write_cgroup(rel, SimCgroup(cpu_ns=SEC, anon=1 << 20))
    for cs in pod["status"]["containerStatuses"]:  # type: ignore[index]
        host.write_cgroup(host.container_dir(rel, cs["containerID"]), SimCgroup(cpu_ns=SEC, anon=1 << 20))
    counts = {}
    for off in (False, True):
        agent = Agent(Config(node_name="n1", paths=host.paths, pods_dir=str(pods_dir),
                             state_dir=str(tmp_path / f"s{off}"),
                             feature_gates=parse_feature_gates("PSICollector=true"),
                             disable_container_metrics=off))
        agent.sync_pods()
        agent.collect(now=1e9, mono_ns=0)
        agent.collect_psi()
        s = _samples(agent, "external")
        counts[off] = sum(len(v) for k, v in s.items() if k.startswith("koordlet_container_"))
        assert len(s["koordlet_pod_cpu_usage_seconds_total"]) == 1 and "koordlet_pod_psi" in s
    assert counts[False] > 0 and counts[True] == 0


def test_psi_series_use_upstream_precision_labels(tmp_path: Path) -> None:
    host = SimHost(tmp_path / "h", 2, CgroupDriver.SYSTEMD).setup()
    pod = make_pod("a", UID, "Guaranteed")
    agent = _agent(tmp_path, host, [pod], gates="PSICollector=true")
    rel = host.pod_dir(K8sQoS.GUARANTEED, UID)
    host.write_cgroup(rel, SimCgroup())
    # cpu.pressure without a `full` line (kernels before 5.13): no cpu full rows, label false for cpu only
    (host.cgroup_root() / rel / "cpu.pressure").write_text("some avg10=4.00 avg60=2.00 avg300=1.00 total=9\n")
    agent.collect_psi()
    rows = {(x.labels["psi_resource_type"], x.labels["psi_degree"], x.labels["psi_precision"]): x
            for x in _samples(agent, "external")["koordlet_pod_psi"]}
    assert rows[("cpu", "some", "avg10")].value == 4.0 and rows[("cpu", "some", "avg300")].value == 1.0
    assert rows[("mem", "full", "avg60")].value == 0.10  # simhost's memory.pressure
    assert not any(k[0] == "cpu" and k[1] == "full" for k in rows)
    assert {k[2] for k in rows} == {"avg10", "avg60", "avg300"}
    assert {r: rows[(r, "some", "avg10")].labels["cpu_full_supported"] for r in ("cpu", "mem", "io")} == {
        "cpu": "false", "mem": "true", "io": "true"}
    assert rows[("cpu", "some", "avg10")].labels["pod_name"] == "a"  # upstream's family: upstream's labels


def test_render_text_is_byte_identical_to_prometheus_client() -> None:
    """The fast gauge writer must not change one byte of what generate_latest would serve."""
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    from koordlet.exporter import render_text

    class Fams(Collector):
        def collect(self) -> Any:
            g = GaugeMetricFamily("g_labels", 'help with \\ and\nnewline "quoted"', labels=["zeta", "alpha"])
            g.add_metric(['back\\slash', 'new\nline'], 1e9)
            g.add_metric(['"quoted"', "plain"], 0.1)
            g.add_metric(["x", "y"], float("nan"))
            g.add_metric(["x", "z"], float("-inf"))
            yield g
            plain = GaugeMetricFamily("g_plain", "no labels")
            plain.add_metric([], 1073741824)
            yield plain
            yield GaugeMetricFamily("g_empty", "no samples", labels=["a"])
            ts = GaugeMetricFamily("g_timestamped", "has a timestamp", labels=["a"])
            ts.add_metric(["b"], 2.5, timestamp=1234.5)
            yield ts

    reg = CollectorRegistry(auto_describe=False)
    Counter("c", "a counter", ["k"], registry=reg).labels("v").inc(3)
    reg.register(Fams())
    Histogram("h", "a histogram", buckets=(0.1, 1.0), registry=reg).observe(0.5)
    assert render_text(reg) == generate_latest(reg)


def _text(agent: Agent) -> str:
    return agent.metrics.render("internal").decode()


def test_node_info_collections_are_counted_under_upstreams_counter_names(tmp_path: Path) -> None:
    """Upstream's node info collector counts each CPU and NUMA info collection by outcome; the series keep Go's
    names (no `_total`). A collection that finds no CPU fails, keeps the last info and skips the NUMA part."""
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    agent = _agent(tmp_path, host, [])
    agent.refresh_node_info()
    text = _text(agent)
    for info in ("cpu", "numa"):
        assert f"# TYPE koordlet_collect_node_{info}_info_status counter\n" in text
        assert f'koordlet_collect_node_{info}_info_status{{node="n1",status="succeeded"}} 2.0\n' in text
    assert "_info_status_total" not in text and 'status="failed"' not in text

    online = host.root / "sys/devices/system/cpu/online"
    saved = online.read_text()
    shutil.rmtree(host.root / "sys/devices/system/cpu")
    agent.refresh_node_info()
    text = _text(agent)
    assert 'koordlet_collect_node_cpu_info_status{node="n1",status="failed"} 1.0\n' in text
    assert 'koordlet_collect_node_numa_info_status{node="n1",status="succeeded"} 2.0\n' in text  # not collected
    assert 'koordlet_collect_node_numa_info_status{node="n1",status="failed"}' not in text
    assert [c.id for c in agent.state.node_info().cpu_topology.cpus] == [0, 1, 2, 3]  # the last info stays
    host.write_cpu_topology()
    assert online.read_text() == saved
    agent.refresh_node_info()
    assert 'koordlet_collect_node_cpu_info_status{node="n1",status="succeeded"} 3.0\n' in _text(agent)
    # the prometheus text parser reads them as counters
    fams = {f.name: f for f in text_string_to_metric_families(_text(agent))}
    assert fams["koordlet_collect_node_cpu_info_status"].type == "counter"


def _lsr_pod(name: str, uid: str, cpuset: str) -> dict[str, Any]:
    pod = make_pod(name, uid, "Guaranteed", labels={"koordinator.sh/qosClass": "LSR"})
    pod["metadata"]["annotations"] = {  # type: ignore[index]
        "scheduling.koordinator.sh/resource-status": f'{{"cpuset": "{cpuset}"}}'}
    return pod


def test_cpuset_share_pools_follow_the_rule_and_per_cpu_series_need_their_gate(tmp_path: Path) -> None:
    """Upstream cpu_cpuset.go as the cpuset hook's rule sets it: the LS and BE share pools' sizes (gate
    CPUSetAllocator, on) and, with gate PerCPUMetric, one series per CPU, reset with each rule."""
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()  # NUMA 0: CPUs 0-1, NUMA 1: 2-3
    lsr = _lsr_pod("lsr", UID, "0-1")
    for d in "abc":
        (tmp_path / d).mkdir()
    plain = _agent(tmp_path / "a", host, [lsr])
    per_cpu = _agent(tmp_path / "b", host, [lsr], gates="PerCPUMetric=true")
    off = _agent(tmp_path / "c", host, [lsr], gates="CPUSetAllocator=false,PerCPUMetric=true")
    assert "koordlet_cpuset_share_pool_cpu_cores" not in _samples(plain)  # no rule computed yet
    assert "# TYPE koordlet_cpuset_share_pool_cpu_cores gauge" in _text(plain)
    for a in (plain, per_cpu, off):
        a.nrt_status()
    for a in (plain, per_cpu):
        s = _samples(a)
        [ls] = s["koordlet_cpuset_share_pool_cpu_cores"]
        [be] = s["koordlet_cpuset_be_share_pool_cpu_cores"]
        assert ls.labels == {"node": "n1"} and ls.value == 2  # the LSR pod's CPUs left the LS pool
        assert be.value == 4  # BE pools keep LSR CPUs (upstream: only LSE pods leave them)
    assert "koordlet_cpuset_share_pool_info" not in _text(plain)
    s = _samples(per_cpu)
    assert sorted((x.labels["cpu"], x.value) for x in s["koordlet_cpuset_share_pool_info"]) == [("2", 1), ("3", 1)]
    assert sorted(x.labels["cpu"] for x in s["koordlet_cpuset_be_share_pool_info"]) == ["0", "1", "2", "3"]
    assert s["koordlet_cpuset_share_pool_info"][0].labels.keys() == {"node", "cpu"}
    assert "koordlet_cpuset_share_pool" not in _text(off)  # the hook's gate is off: no rule is parsed

    # the LSR pod leaves: a new rule, the per-CPU series as the new pools say (no stale CPU)
    (tmp_path / "b" / "pods" / "lsr.yaml").unlink()
    per_cpu.sync_pods()
    per_cpu.nrt_status()
    s = _samples(per_cpu)
    assert s["koordlet_cpuset_share_pool_cpu_cores"][0].value == 4
    assert sorted(x.labels["cpu"] for x in s["koordlet_cpuset_share_pool_info"]) == ["0", "1", "2", "3"]


def test_the_agents_qos_pass_feeds_the_update_and_reconciler_histograms(tmp_path: Path) -> None:
    """Wired in the agent: the CPUSetAllocator pass on an LSR pod (cpuset and unset quota) lands in upstream's
    histograms on /metrics; a steady pass (cached writes) adds nothing."""
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    agent = _agent(tmp_path, host, [_lsr_pod("lsr", UID, "0-1")])
    [pod] = agent.state.pods()
    for rel in (pod.cgroup_dir, str(pod.containers[0].cgroup_dir)):
        host.write_cgroup(rel, SimCgroup())
        (host.cgroup_root() / "cpuset" / rel / "cpuset.cpus").write_text("0-3\n")
        (host.cgroup_root() / "cpu" / rel / "cpu.cfs_quota_us").write_text("200000\n")
    agent.nrt_status()
    results = agent.qos_manager().reconcile(agent.qos_state())
    written = [r for r in results if r.result == "written"]
    assert len(written) == 3, results  # the container's cpuset, the pod's and the container's quota

    def counts() -> dict[str, dict[frozenset[tuple[str, str]], float]]:
        fams = {f.name: f for f in text_string_to_metric_families(agent.metrics.render().decode())}
        return {name: {frozenset(s.labels.items()): s.value for s in fams[name].samples if s.name == name + "_count"}
                for name in ("koordlet_resource_update_duration_milliseconds",
                             "koordlet_runtime_hook_reconciler_invoked_duration_milliseconds")}

    want = {"koordlet_resource_update_duration_milliseconds": {
                frozenset({("type", "cgroup"), ("status", "success")}): 3.0},
            "koordlet_runtime_hook_reconciler_invoked_duration_milliseconds": {
                frozenset({("node", "n1"), ("level", lvl), ("resource_type", res), ("status", "succeeded")}): 1.0
                for lvl, res in (("container", "cpuset.cpus"), ("pod", "cpu.cfs_quota_us"),
                                 ("container", "cpu.cfs_quota_us"))}}
    assert counts() == want
    agent.qos_manager().reconcile(agent.qos_state())
    assert counts() == want
