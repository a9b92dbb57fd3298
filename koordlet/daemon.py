"""asyncio orchestration: periodic collection, pod sync, NodeSLO/NodeMetric updates, reporting, shutdown.

One event loop; blocking API/kubelet calls go to the default thread pool. Each loop catches and counts its own
failures so one bad round never stops the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import math
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from koordlet.agent import Agent
from koordlet.cluster import ClusterLink
from koordlet.exporter import HttpServer
from koordlet.host.files import descriptor_cap, raise_nofile_limit
from koordlet.nodestate import Change
from koordlet.qos.evictstrategy import EvictStrategy

if TYPE_CHECKING:
    from koordlet.nri.connection import NriConnection
    from koordlet.podresources.server import ProxyServer

log = logging.getLogger(__name__)

_NODESLO_FILE_POLL = 5.0
_GC_INTERVAL = 60.0  # tighter than upstream's 300 s so memory stays near retention × series


FULL_SETTLE_SECONDS = 300.0
# Loops' offsets on the shared grid (see Daemon._every): within one wake-up the collection runs first, so the QoS
# pass and the eviction strategies plan from the newest sample; a few ms apart is still one wake-up.
_PHASE_COLLECT, _PHASE_PSI, _PHASE_QOS, _PHASE_EVICT, _PHASE_REST = 0.0, 0.001, 0.002, 0.003, 0.005


def next_tick(phase: float, interval: float, after: float) -> float:
    """The first time on the grid `phase + n * interval` (n a whole number) later than `after`."""
    if interval <= 0:
        return after
    return phase + (math.floor((after - phase) / interval) + 1) * interval


# The cyclic GC's thresholds while the daemon runs (Python's default: 700, 10, 10; restored when run() ends, for
# callers in-process). Its heap is settled and frozen (settle_heap); its rounds allocate thousands of short-lived,
# acyclic objects (freed by reference counting): at 700 a young collection ran every few hundred ms and, with the
# older generations after it, cost ~0.6 ms of CPU a second at 250 pods for nothing found.
GC_THRESHOLDS = (20_000, 20, 20)


def settle_heap(full: bool) -> None:
    """Collect once, then move every surviving object out of the cyclic GC's sight (gc.freeze): pods, collection
    targets and series live until the next pod change, and full collections walking them cost ~2.5 ms of each
    collection tick at 250 pods. Frozen objects are still freed by reference counting when they are dropped, but a
    frozen object that later becomes part of a garbage cycle is not: `full` unfreezes first, so such cycles left by
    pod churn are collected (the daemon asks for it at most every FULL_SETTLE_SECONDS)."""
    if full:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


class Daemon:
    def __init__(self, agent: Agent, cluster: ClusterLink | None = None) -> None:
        self.agent = agent
        self.cluster = cluster
        self.stop_event = asyncio.Event()
        self.http: HttpServer | None = None
        self._nodeslo_mtime: float | None = None
        self._failing: dict[str, str] = {}  # loop → log-once key of its current failure
        self.nri: NriConnection | None = None
        self.podresources: ProxyServer | None = None
        self._pods_kick = asyncio.Event()
        self._pods_waiting: list[asyncio.Future[None]] = []  # sync_pods_now callers, for the next round to start
        self._settle = True  # settle_heap after the next collection (start-up, then after each pod change)
        self._settled_fully: float | None = None  # when settle_heap last unfroze and collected everything
        self._anchor = 0.0  # the loops' grid: the event loop's time when run() started them

    # -- probes --------------------------------------------------------------------------------------------
    def healthy(self) -> tuple[bool, str]:
        last = self.agent.health.loop_last_success.get("collect")
        limit = max(10 * self.agent.config.collect_res_used_interval, 30.0)
        if last is not None and time.time() - last > limit:
            return False, f"collect loop stalled for {time.time() - last:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if not self.agent.state.pods_synced():
            return False, "pods not synced yet"
        if not self.agent.collected_once:
            return False, "no collection yet"
        return True, "ok"

    # -- loops ---------------------------------------------------------------------------------------------
    async def _every(self, name: str, interval: float, fn: Callable[[], Awaitable[None]],
                     first_delay: float = 0.0, kick: asyncio.Event | None = None,
                     phase: float = _PHASE_REST) -> None:
        """Run `fn` every `interval`; `kick` runs it early (e.g. QoS right after a pod or NodeSLO change).

        Every loop's rounds fall on one grid (the daemon's start plus whole intervals, then the loop's phase), so
        the 1-second loops and the multi-second ones that fall due together share one wake-up of the process: on a
        VM a wake-up from a timer costs ~0.1-0.2 ms of CPU before any work, as much as a QoS pass. A round that
        overruns its interval skips the grid points it missed (as Go's time.Ticker drops ticks). Stopping cancels
        the loop (run() does), so a wait is one timer, or the kick set by that timer: no tasks per round."""
        loop = asyncio.get_running_loop()
        phase += self._anchor
        next_at = phase + first_delay
        while not self.stop_event.is_set():
            delay = next_at - loop.time()
            if delay <= 0:  # behind: still let the others, and a SIGTERM, run first
                await asyncio.sleep(0)
            elif kick is None:
                await asyncio.sleep(delay)
            elif not kick.is_set():
                timer = loop.call_at(next_at, kick.set)
                try:
                    await kick.wait()
                finally:
                    timer.cancel()
            if self.stop_event.is_set():
                return
            if kick is not None:
                kick.clear()
            await self._run_once(name, fn)
            next_at = next_tick(phase, interval, max(next_at, loop.time()))

    async def _run_once(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        """One round of a loop: time it; on failure log once per kind of error (a loop failing every second
        must not flood the log), count it, and carry on; a success re-arms the log line."""
        started, cpu_started = time.perf_counter(), time.thread_time()
        try:
            await fn()
            self.agent.health.loop_ok(name)
            if name in self._failing:
                self.agent.health.forget(self._failing.pop(name))
                log.info("%s loop recovered", name)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.agent.health.skipped[("loop", name)] += 1
            key = self._failing[name] = f"loop/{name}/{type(e).__name__}"
            if self.agent.health.once(key, logging.ERROR, "%s loop failed (%s: %s); retrying, further failures "
                                      "are counted in koordlet_agent_skipped_items_total{kind=\"loop\"}",
                                      name, type(e).__name__, e):
                log.debug("%s loop failure", name, exc_info=True)
        self.agent.metrics.loop_duration.labels(name).observe(time.perf_counter() - started)
        self.agent.metrics.loop_cpu.labels(name).inc(time.thread_time() - cpu_started)

    async def _collect(self) -> None:
        self.agent.collect()
        if self._settle:  # the first tick after a pod change built the new targets and series: keep them frozen
            self._settle = False
            now = time.monotonic()
            full = self._settled_fully is None or now - self._settled_fully >= FULL_SETTLE_SECONDS
            if full:
                self._settled_fully = now
            settle_heap(full)

    async def _psi(self) -> None:
        self.agent.collect_psi()

    async def _gc(self) -> None:
        self.agent.gc()

    async def _node_info(self) -> None:
        self.agent.refresh_node_info()

    async def _prediction(self) -> None:
        self.agent.train_prediction()

    async def _prediction_checkpoint(self) -> None:
        # on the loop, like training (the models are not shared with a thread); at most 12 small files a minute
        self.agent.checkpoint_prediction()

    async def _sync_pods(self) -> None:
        before = self.agent.state.pods()
        waiting, self._pods_waiting = self._pods_waiting, []
        try:
            if self.cluster is not None:
                await asyncio.to_thread(self.cluster.sync_pods, self.agent)
            else:
                await asyncio.to_thread(self.agent.sync_pods)
        finally:
            for f in waiting:
                if not f.done():
                    f.set_result(None)
        if self.agent.state.pods() is not before:
            self._settle = True

    async def sync_pods_now(self) -> None:
        """One pod sync that starts after this call (the pods loop runs early): the PodResources proxy asks for it
        when kubelet names a pod admitted since the last sync."""
        done = asyncio.get_running_loop().create_future()
        self._pods_waiting.append(done)
        self._pods_kick.set()
        await done

    async def _nodeslo_file(self) -> None:
        path = self.agent.config.nodeslo_file
        if not path:
            return
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = None
        if mtime != self._nodeslo_mtime:
            self._nodeslo_mtime = mtime
            if mtime is None:
                self.agent.health.skip("nodeslo", "missing", path, "NodeSLO file not found; using defaults")
                self.agent.set_nodeslo(None)
            else:
                self.agent.load_nodeslo_file()

    async def _devices(self) -> None:
        composed = await asyncio.to_thread(self.agent.refresh_devices)
        if composed is None:
            return
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.report_devices, composed)
        else:  # on the loop: an unchanged object (nearly every round) is not rewritten, a thread hop costs more
            self.agent.write_devices(composed)
        if self.agent.devices is not None:
            self.agent.devices.start_xid_watch()  # once, after the first inventory named the GPUs

    async def _nrt(self) -> None:
        """NodeResourceTopology once pods (and in a cluster the Node) are known: always computed (the runtime
        hook's cpuset rule follows it), written only with gate NodeTopologyReport."""
        if not self.agent.state.pods_synced() or (self.cluster is not None and self.agent.state.node() is None):
            return
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.refresh_kubelet_config, self.agent)
        status = self.agent.nrt_status()
        if not self.agent.config.gate("NodeTopologyReport"):
            return
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.report_nrt, status)
        else:  # on the loop, as the Device object above
            self.agent.write_nrt(status)

    async def _qos(self) -> None:
        if self.agent.state.pods_synced():
            # the plan's refusals (resctrl groups) feed the QoS metrics
            self.agent.qos_manager().reconcile(self.agent.qos_state(), report=self.agent.qos_metrics.planned)

    async def _evict(self, strategy: EvictStrategy) -> None:
        """One round of an eviction strategy once pods are synced: planned on the loop (it reads the metric cache),
        carried out in a thread (Eviction API calls block; killing waits for the kernel)."""
        if not self.agent.state.pods_synced():
            return
        plan = strategy.plan(self.agent.qos_state())
        if plan is None:
            return
        post = self.cluster.client.post if self.cluster is not None else None
        result = await asyncio.to_thread(self.agent.evictor(post).carry_out, plan)
        strategy.finish(result)

    async def _report(self) -> None:
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.report, self.agent)
        else:
            obj = self.agent.build_nodemetric()
            await asyncio.to_thread(self.agent.write_state, obj)

    async def _report_loop(self) -> None:
        # Standalone: a first report soon after start so `make run` shows something; then the spec's period.
        first = 2 * self.agent.config.collect_res_used_interval + 0.5 if self.cluster is None else None
        loop = asyncio.get_running_loop()
        next_at = loop.time() + (first if first is not None else self.agent.state.nodemetric().policy.report_period)
        while not self.stop_event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_event.wait(), max(next_at - loop.time(), 0))
            if self.stop_event.is_set():
                return
            await self._run_once("report", self._report)
            next_at = loop.time() + self.agent.state.nodemetric().policy.report_period  # re-read each round (upstream)

    # -- run -----------------------------------------------------------------------------------------------
    def bind(self) -> HttpServer:
        """Listen on --addr (OSError when it is taken); serving starts with run()."""
        host, port = self.agent.config.listen
        self.http = HttpServer(host, port, self.agent.metrics, self.healthy, self.ready)
        return self.http

    async def run(self) -> None:
        cfg = self.agent.config
        loop = asyncio.get_running_loop()
        soft, _ = raise_nofile_limit()
        log.debug("open-files limit %d; up to %d cgroup file descriptors kept between ticks", soft, descriptor_cap())
        self.agent.advisor.cgroups.files.cap = descriptor_cap()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop_event.set)
        http = self.http or self.bind()
        host, _ = cfg.listen
        http.start()
        log.info("koordlet serving metrics on %s:%d for node %s (%s mode)", host, http.port, cfg.node_name,
                 "standalone" if self.cluster is None else "cluster")

        self._anchor = loop.time()
        tasks = [
            self._every("pods", cfg.kubelet_sync_interval, self._sync_pods, kick=self._pods_kick),
            self._every("collect", cfg.collect_res_used_interval, self._collect, first_delay=0.05,
                        phase=_PHASE_COLLECT),
            self._every("gc", _GC_INTERVAL, self._gc, first_delay=_GC_INTERVAL),
            self._every("nodeinfo", cfg.collect_node_cpu_info_interval, self._node_info,
                        first_delay=cfg.collect_node_cpu_info_interval),
            self._report_loop(),
            # prediction models: trained once a training interval has samples, checkpointed every minute
            self._every("prediction", cfg.prediction.training_interval, self._prediction,
                        first_delay=cfg.prediction.training_interval),
            self._every("prediction-checkpoint", 60.0, self._prediction_checkpoint, first_delay=60.0),
        ]
        if cfg.gate("PSICollector"):
            tasks.append(self._every("psi", cfg.psi_collector_interval, self._psi, first_delay=0.1, phase=_PHASE_PSI))
        if cfg.nodeslo_file:
            tasks.append(self._every("nodeslo", _NODESLO_FILE_POLL, self._nodeslo_file))
        if self.agent.devices is not None:
            tasks.append(self._every("devices", cfg.node_topology_sync_interval, self._devices))
        if cfg.node_topology_sync_interval > 0:  # upstream: a non-positive interval turns the NRT loop off
            tasks.append(self._every("nrt", cfg.node_topology_sync_interval, self._nrt, first_delay=0.5))
        if self.cluster is not None:
            self.agent.qos_manager(post_event=self.cluster.client.post)
        if cfg.nri.enabled:
            from koordlet.nri.wiring import nri_connection

            self.nri = nri_connection(self.agent, self.cluster.client.post if self.cluster is not None else None)
            tasks.append(self.nri.run(self.stop_event))
        if cfg.gate("PodResourcesProxy"):
            from koordlet.podresources.wiring import pod_resources_proxy

            self.podresources = pod_resources_proxy(self.agent, self.cluster.client.post if self.cluster else None,
                                                    self.sync_pods_now)
            tasks.append(self.podresources.run(self.stop_event))
        qos_kick = asyncio.Event()

        def changed(_: Change) -> None:  # called from the pod-sync thread or the loop
            loop.call_soon_threadsafe(qos_kick.set)

        self.agent.state.subscribe((Change.PODS, Change.NODESLO), changed)
        tasks.append(self._every("qos", cfg.reconcile_interval_seconds, self._qos, first_delay=0.2, kick=qos_kick,
                                 phase=_PHASE_QOS))
        for strategy in self.agent.evict_strategies:  # BEMemoryEvict / BECPUEvict, each at its own interval
            tasks.append(self._every(strategy.name, strategy.interval, functools.partial(self._evict, strategy),
                                     first_delay=strategy.interval, phase=_PHASE_EVICT))
        if self.cluster is not None:
            self.cluster.start_watches(self.agent)
        running = [asyncio.ensure_future(t) for t in tasks]
        thresholds = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLDS)
        try:
            await self.stop_event.wait()
        finally:
            gc.set_threshold(*thresholds)
            log.info("stopping")
            self.agent.state.unsubscribe(changed)
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            if self.cluster is not None:
                self.cluster.close()
            if self.agent.devices is not None:
                self.agent.devices.close()
            self.agent.close()
            http.stop()
