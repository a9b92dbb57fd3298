"""Concurrent scrapers against the agent's real HTTP server and exporter: one render per collection tick, shared."""

from __future__ import annotations

import gzip
import http.client
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from koordlet.agent import Agent
from koordlet.config import Config
from koordlet.exporter import HttpServer
from koordlet.host.driver import CgroupDriver, K8sQoS

from simhost import SimCgroup, SimHost, make_pod

PODS, CONTAINERS = 30, 3
MIB = 1 << 20
SEC = 1_000_000_000


class RenderProbe(Collector):
    """Registered in the agent's external registry, so collected once per render of /metrics: counts renders,
    holds each one `delay` seconds (a slow render), raises while `fail` is set (a failing render)."""

    def __init__(self) -> None:
        self.count = 0
        self.delay = 0.0
        self.fail = False
        self._lock = threading.Lock()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            self.count += 1
        if self.delay:
            time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("injected render failure")
        return []


@dataclass
class Node:
    host: SimHost
    agent: Agent
    server: HttpServer
    probe: RenderProbe
    rels: list[str]  # the pods' cgroups, the first one's memory marks each tick
    ticks: int = 0

    def tick(self) -> int:
        """One collection tick after the pods' memory changed; returns the marker (MiB) it shows."""
        self.ticks += 1
        for i, rel in enumerate(self.rels):
            self.host.write_cgroup(rel, SimCgroup(cpu_ns=self.ticks * SEC // 10, anon=(self.ticks + i) * MIB))
        self.agent.collect(now=1e9 + self.ticks, mono_ns=self.ticks * SEC)
        return self.ticks


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    host = SimHost(tmp_path / "h", 1, CgroupDriver.CGROUPFS).setup()
    pods_dir = tmp_path / "pods"
    pods_dir.mkdir()
    rels: list[str] = []
    for i in range(PODS):
        uid = f"eeeeeeee-0000-4000-8000-{i:012d}"
        pod = make_pod(f"p{i}", uid, containers=CONTAINERS)
        prel = host.pod_dir(K8sQoS.BURSTABLE, uid)
        rels.append(prel)  # pods are read every tick (containers every 10 s)
        for cs in pod["status"]["containerStatuses"]:  # type: ignore[index]
            host.write_cgroup(host.container_dir(prel, cs["containerID"]), SimCgroup(anon=MIB))
        (pods_dir / f"p{i}.yaml").write_text(yaml.safe_dump(pod))
    agent = Agent(Config(node_name="n1", paths=host.paths, pods_dir=str(pods_dir), state_dir=str(tmp_path / "s")))
    agent.sync_pods()
    probe = RenderProbe()
    agent.metrics.external.register(probe)
    server = HttpServer("127.0.0.1", 0, agent.metrics, lambda: (True, ""), lambda: (True, ""))
    server.start()
    n = Node(host, agent, server, probe, rels)
    n.tick()
    try:
        yield n
    finally:
        server.stop()
        agent.close()


@dataclass
class Scrape:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def text(self) -> str:
        gzipped = self.headers.get("content-encoding") == "gzip"
        return (gzip.decompress(self.raw) if gzipped else self.raw).decode()


def scrape(port: int, accept_encoding: str | None = None, path: str = "/metrics") -> Scrape:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Accept-Encoding": accept_encoding} if accept_encoding else {})
        r = conn.getresponse()
        return Scrape(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def together(port: int, n: int) -> list[Scrape]:
    """n scrapers released at once; every other one asks for gzip, as prometheus_client's clients do."""
    gate = threading.Barrier(n)

    def one(i: int) -> Scrape:
        gate.wait()
        return scrape(port, "gzip" if i % 2 else None)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def marker(text: str) -> float:
    """The first pod's working set (MiB), the value each tick changes; checks the whole exposition too."""
    values = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "koordlet_pod_memory_working_set_bytes":
            values = {s.labels["pod"]: s.value for s in fam.samples}
    assert len(values) == PODS, "incomplete exposition"
    first = min(values)  # pods' names sort as the pods were made
    return values[first] / MIB


def test_concurrent_scrapers_share_one_render_per_tick(node: Node) -> None:
    """Fault: 40 scrapers at once on /metrics, half asking gzip, over 4 collection ticks. Invariant: one render
    per tick however many scrape; each scraper gets a complete exposition that parses and shows that tick's values;
    the gzip bodies decode to the same text."""
    node.agent.metrics.max_staleness = 60.0  # only the ticks make a render stale here
    for _ in range(4):
        want = node.tick()
        before = node.probe.count
        results = together(node.server.port, 40)
        assert node.probe.count - before == 1, f"{node.probe.count - before} renders for 40 scrapes of one tick"
        assert {r.status for r in results} == {200}
        assert sum(r.headers.get("content-encoding") == "gzip" for r in results) == 20
        texts = {r.text for r in results}
        assert len(texts) == 1
        assert marker(texts.pop()) == want


def test_scrapers_arriving_during_a_render_share_it(node: Node) -> None:
    """Fault: a slow render (0.3 s) with 50 scrapers arriving while it runs (thundering herd). Invariant: they all
    wait for that one render and get its body; no second render starts."""
    node.agent.metrics.max_staleness = 60.0
    node.tick()
    node.probe.delay = 0.3
    before = node.probe.count
    results = together(node.server.port, 50)
    assert node.probe.count - before == 1
    assert len({r.text for r in results}) == 1 and {r.status for r in results} == {200}


def test_a_render_begun_before_a_tick_is_not_served_after_it(node: Node) -> None:
    """Fault: a collection tick completes while a slow render is under way. Invariant: a scraper that starts after
    the tick is not handed that render: it gets one made after the tick (fresh), the earlier scraper the old one."""
    node.agent.metrics.max_staleness = 60.0
    old = node.tick()
    node.probe.delay = 0.4
    before = node.probe.count
    early: list[Scrape] = []
    t = threading.Thread(target=lambda: early.append(scrape(node.server.port)))
    t.start()
    deadline = time.monotonic() + 5
    while node.probe.count == before and time.monotonic() < deadline:  # the early render is under way
        time.sleep(0.01)
    new = node.tick()
    late = scrape(node.server.port)
    t.join()
    assert marker(early[0].text) == old and marker(late.text) == new
    assert node.probe.count - before == 2


def test_counters_between_ticks_are_at_most_max_staleness_old(node: Node) -> None:
    """Fault: the agent's own counters change with no collection tick (a stalled or slow collect loop).
    Invariant: a render is reused only within the staleness bound; past it the next scrape shows the change."""
    node.agent.metrics.max_staleness = 0.5
    node.tick()
    first = scrape(node.server.port)
    renders = node.probe.count
    node.agent.health.skipped[("fault", "injected")] += 1
    again = scrape(node.server.port)
    assert node.probe.count == renders and again.raw == first.raw  # within the bound: the same render
    time.sleep(0.55)
    later = scrape(node.server.port)
    assert node.probe.count == renders + 1
    assert 'koordlet_agent_skipped_items_total{kind="fault",reason="injected"} 1.0' in later.text


_ACCEPT = [("gzip", True), ("gzip, deflate", True), ("br;q=1.0, gzip;q=0.5", True), ("*", True), ("x-gzip", True),
           (None, False), ("identity", False), ("gzip;q=0", False), ("*, gzip;q=0", False), ("deflate", False)]


def test_gzip_when_asked_from_the_same_render(node: Node) -> None:
    """Fault: scrapers with every kind of Accept-Encoding. Invariant: gzip exactly when the header allows it
    (Content-Encoding and Vary set), decoding to the plain body of the same render; one render serves all."""
    node.agent.metrics.max_staleness = 60.0
    node.tick()
    before = node.probe.count
    plain = scrape(node.server.port)
    for accept, gzipped in _ACCEPT:
        asked = scrape(node.server.port, accept)
        assert asked.status == 200 and asked.headers.get("vary") == "Accept-Encoding"
        assert (asked.headers.get("content-encoding") == "gzip") is gzipped, accept
        assert asked.headers["content-length"] == str(len(asked.raw))
        assert asked.text == plain.raw.decode()
        if gzipped:
            assert len(asked.raw) < len(plain.raw) / 4
    assert node.probe.count - before == 1


def test_views_render_separately_and_health_is_not_cached(node: Node) -> None:
    """Fault: scrapers of the internal and external views and of /healthz between two ticks. Invariant: each view
    is rendered once per tick and holds only its registry's families; health probes are answered live."""
    node.agent.metrics.max_staleness = 60.0
    node.tick()
    before = node.probe.count
    ext = [scrape(node.server.port, path="/external-metrics") for _ in range(3)]
    internal = [scrape(node.server.port, path="/internal-metrics") for _ in range(3)]
    assert node.probe.count - before == 1  # the probe is in the external registry: the internal view skips it
    assert "koordlet_container_cpu_usage_seconds_total" in ext[0].text and "koordlet_start_time" not in ext[0].text
    assert "koordlet_start_time" in internal[0].text
    assert len({r.raw for r in internal}) == 1
    assert scrape(node.server.port, path="/healthz").raw == b"ok\n"


def test_a_failing_render_fails_its_scrapers_once_then_recovers(node: Node, caplog: pytest.LogCaptureFixture
                                                                ) -> None:
    """Fault: the render raises (a collector fails) while 20 scrapers wait for it. Invariant: one render, each
    scraper answered 500, one ERROR logged (not one per scraper); the next scrape renders again and succeeds."""
    node.agent.metrics.max_staleness = 60.0
    node.tick()
    node.probe.fail, node.probe.delay = True, 0.3
    before = node.probe.count
    with caplog.at_level(logging.ERROR, logger="koordlet.exporter"):
        results = together(node.server.port, 20)
    assert {r.status for r in results} == {500}
    assert node.probe.count - before == 1
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1
    node.probe.fail, node.probe.delay = False, 0.0
    ok = scrape(node.server.port, "gzip")
    assert ok.status == 200 and node.probe.count - before == 2
    marker(ok.text)
