"""The fast text format against prometheus_client's own rendering of the same families, and its kept texts."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED
from koordlet.agent import Agent
from koordlet.config import Config, parse_feature_gates
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS
from koordlet.schedlat.collector import SchedLatency
from koordlet.schedlat.hist import SLOTS, Totals
from koordlet.states.model import PodMeta
from koordlet.textformat import GoCounterFamily, HistogramRows, RowFamily, TextRenderer, render_text

from simhost import SimCgroup, SimHost, make_pod

NODE = Path(__file__).resolve().parents[1] / "examples" / "nodes" / "l20-pcie"  # 8 GPUs, 4 NICs with 32 VFs
SEC = 1_000_000_000
VF = ('{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},'
      '"extension":{"vfs":[{"minor":-1,"busID":"0000:1a:00.2"}]}}]}')  # mlx5_4, a VF of mlx5_0
MIB = 1 << 20


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class _Waits:
    """A run-queue wait backend of given totals (as the eBPF one reports them)."""

    source = "ebpf"

    def __init__(self) -> None:
        self.totals: dict[str, Totals] = {}

    def read(self, pods: list[PodMeta]) -> dict[str, Totals]:
        return dict(self.totals)

    def close(self) -> None:
        pass


def _reference(families: list[Metric]) -> bytes:
    """generate_latest's text, with GoCounterFamily's HELP/TYPE lines as a Go client writes them (prometheus_client
    appends `_total` to a counter's HELP and TYPE names; its samples are the same)."""
    text = generate_latest(_Families(families)).decode()
    for fam in families:
        if isinstance(fam, GoCounterFamily):
            text = text.replace(f"# HELP {fam.name}_total ", f"# HELP {fam.name} ")
            text = text.replace(f"# TYPE {fam.name}_total counter\n", f"# TYPE {fam.name} counter\n")
    return text.encode()


def _samples(text: bytes) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                  for fam in text_string_to_metric_families(text.decode()) for s in fam.samples)


def _gpu_rdma_node(tmp_path: Path) -> tuple[Agent, SimHost, _Waits, list[str]]:
    """The agent on the l20-pcie snapshot (GPUs and RDMA NICs) with 6 pods × 2 containers of cgroups, a pod with
    a quoted name, and run-queue waits."""
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    uids = []
    for i in range(6):
        uid = f"cccccccc-0000-4000-8000-{i:012d}"
        pod = make_pod(f"p{i}", uid, containers=2, namespace='we"ird\\ns' if i == 0 else "shop")
        if i == 1:  # batch requests, and a VF of the first NIC (the scheduler's annotation)
            pod["metadata"]["annotations"] = {ANNOTATION_DEVICE_ALLOCATED: VF}  # type: ignore[index]
            pod["spec"]["containers"][0]["resources"] = {  # type: ignore[index]
                "requests": {"kubernetes.io/batch-cpu": "2000"}, "limits": {"kubernetes.io/batch-cpu": "2000"}}
        (pods_dir / f"p{i}.yaml").write_text(yaml.safe_dump(pod))
        prel = host.pod_dir(K8sQoS.BURSTABLE, uid)
        host.write_cgroup(prel, SimCgroup(cpu_ns=(i + 1) * SEC, anon=(i + 10) * MIB, nr_periods=10, nr_throttled=i))
        for c in range(2):
            host.write_cgroup(f"{prel}/{uid.replace('-', '')}{c:02d}", SimCgroup(cpu_ns=SEC, anon=5 * MIB))
        uids.append(uid)
    paths = host.paths.with_overrides(sys_root=f"{NODE / 'sys'}/")
    agent = Agent(Config(node_name="gpu-node", paths=paths, pods_dir=str(pods_dir), state_dir=str(tmp_path / "s"),
                         nvml_snapshot=str(NODE / "nvml-snapshot.json"),
                         feature_gates=parse_feature_gates("Accelerators=true,RDMADevices=true,CPUSchedLatency=false")))
    waits = _Waits()
    agent.metrics.schedlat = SchedLatency(paths, 1, Health(), use_bcc=True, make=lambda *_: waits)
    assert agent.metrics.schedlat.wait_ready(10)
    agent.sync_pods()
    agent.refresh_devices()
    return agent, host, waits, uids


def _tick(agent: Agent, waits: _Waits, uids: list[str], n: int) -> None:
    hist = [0] * SLOTS
    hist[11], hist[14] = 4 * n, n  # waits of 1-2 ms and 8-16 ms
    waits.totals = {uid: Totals(5 * n, 6_000_000 * n + k, tuple(hist)) for k, uid in enumerate(uids)}
    waits.totals[uids[-1]] = Totals(3, 4000)  # schedstat-like: no histogram, +Inf alone
    assert agent.metrics.schedlat is not None
    agent.metrics.schedlat.collect(agent.state.pods(), 1000 * n)
    agent.collect(now=1e9 + n, mono_ns=n * SEC)


def test_fast_text_is_prometheus_clients_on_a_gpu_rdma_node_with_pod_series_and_waits(tmp_path: Path) -> None:
    agent, _, waits, uids = _gpu_rdma_node(tmp_path)
    try:
        renderer = TextRenderer()
        for n in (1, 2, 2, 3):  # the second render of tick 2 is served from the kept texts
            _tick(agent, waits, uids, n)
            families = [*agent.metrics.internal.collect(), *agent.metrics.external.collect()]
            fast = renderer.render(_Families(families))
            reference = _reference(families)
            assert _samples(fast) == _samples(reference)
            assert fast == reference  # byte for byte, HELP and TYPE lines included
        names = {name for name, _, _ in _samples(fast)}
        for family in ("koordlet_gpu_memory_total_bytes", "koordlet_pod_rdma_device_info",
                       "koordlet_rdma_link_downed_total", "koordlet_pod_cpu_usage_seconds_total",
                       "koordlet_container_memory_working_set_bytes", "koordlet_pod_rdma_port_packets_received_total",
                       "koordlet_pod_cpu_schedule_latency_seconds_bucket", "koordlet_container_resource_requests",
                       "koordlet_device_healthy", "process_cpu_seconds_total"):
            assert family in names, family
        assert b'namespace="we\\"ird\\\\ns"' in fast
        # the exporter's own render of /metrics (its renderer keeps texts across ticks too): the same series
        external = [*agent.metrics.external.collect()]
        assert _samples(agent.metrics.render("external")) == _samples(_reference(external))
    finally:
        agent.close()


def test_a_histogram_row_is_rewritten_only_when_its_key_changes() -> None:
    calls: list[str] = []

    def buckets(pod: str, n: int) -> Any:
        def make() -> list[tuple[str, float]]:
            calls.append(pod)
            return [("0.001", float(n)), ("+Inf", float(2 * n))]
        return make

    def registry(counts: dict[str, int]) -> _Families:
        h = HistogramRows("waits_seconds", "waits", ["pod", "node"])
        ref = HistogramMetricFamily("waits_seconds", "waits", labels=["pod", "node"])
        for pod, n in counts.items():
            h.add_metric([pod, "n1"], buckets(pod, n), n / 10, key=n)
            ref.add_metric([pod, "n1"], buckets(pod, n)(), n / 10)
        calls.clear()
        registry.reference = generate_latest(_Families([ref]))  # type: ignore[attr-defined]
        return _Families([h])

    r = TextRenderer()
    assert r.render(registry({"a": 1, "b": 2})) == registry.reference  # type: ignore[attr-defined]
    assert sorted(calls) == ["a", "b"]
    assert r.render(registry({"a": 1, "b": 3})) == registry.reference  # type: ignore[attr-defined]
    assert calls == ["b"]  # a's rows came from the last render's text
    assert r.render(registry({"a": 1, "b": 3})) == registry.reference  # type: ignore[attr-defined]
    assert calls == []


def test_rows_escape_sort_and_fall_back_as_generate_latest() -> None:
    g = RowFamily("g_rows", 'help with \\ and\nnewline', ["zeta", "alpha"])
    g.add_metric(['back\\slash', 'new\nline'], 1e9)
    g.add_metric(['"quoted"', "plain"], float("nan"))
    g.add_metric(["x", "y"], 12345678.0)
    c = GoCounterFamily("c_things", "go counter", ["k"])
    c.add_metric(["v"], 3)
    plain = RowFamily("g_plain", "no labels", [])
    plain.add_metric([], -0.5)
    counter = CounterMetricFamily("c_plain", "a client counter", labels=["k"])
    counter.add_metric(["v"], 7)
    created = CounterMetricFamily("c_created", "with _created", labels=["k"])
    created.add_metric(["v"], 1, created=100.0)  # generate_latest writes it (a `_created` gauge of its own)
    ts = GaugeMetricFamily("g_ts", "timestamped", labels=["a"])
    ts.add_metric(["b"], 2.5, timestamp=1234.5)
    families: list[Metric] = [g, c, plain, counter, created, ts]
    assert TextRenderer().render(_Families(families)) == _reference(families)
    assert len(g.samples) == 3 and g.samples[0].labels == {"zeta": "back\\slash", "alpha": "new\nline"}
    with pytest.raises(ValueError, match="label values"):
        g.add_metric(["only one"], 1.0)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Families([g]))
    assert render_text(reg) == generate_latest(reg)
