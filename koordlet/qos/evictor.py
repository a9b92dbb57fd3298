"""Carrying out an EvictionPlan: Eviction API, killing the victims' containers, or (standalone) only reporting.

Spec dropin.md §d.3a; upstream pkg/koordlet/qosmanager/plugins/util/evict.go (KillAndEvictPods), evictor.go
(EvictPodIfNotEvicted), qosmanager/helpers/operation.go (KillContainers), metrics/common.go.

- `only_evict_by_api`: POST a policy/v1 Eviction with `deleteOptions.preconditions.uid`; a success caches the UID
  for 2 minutes (a cached pod is passed over without credit, as v1.7), posts Warning Event `evictPodSuccess`
  (component `koordlet-qosManager`) and counts `koordlet_pod_eviction{,_detail}`; a failure posts `evictPodFail`
  and earns no credit, so the next candidate is taken.
- otherwise (upstream's default, the chart's): each running container of `spec.containers`, in order, is stopped
  (stopping at the first container without a status or not running, as upstream); the Pod stays for kubelet to
  restart. We have no CRI client: every task of the container's cgroup gets SIGKILL (docs/decisions.md). It always
  counts as a success and is counted in the metrics.
- standalone: the victims are reported (a log line, an Event-like record in `<state-dir>/evictions.jsonl`, the
  metrics with reason `reported`), never touched.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from apis.core.errors import ApiError, HostReadError, KoordletError
from apis.core.objects import JSON
from koordlet.events import EventRecorder
from koordlet.health import Health
from koordlet.host.files import read_bytes
from koordlet.host.paths import HostPaths
from koordlet.host.resources import resource_path
from koordlet.qos.eviction import Eviction, EvictionPlan
from koordlet.states.model import PodMeta

log = logging.getLogger(__name__)

EVICTED_CACHE_SECONDS = 120.0  # expireCache.NewCacheDefault: 2 min TTL
DETAIL_EXPIRE_SECONDS = 300.0  # metrics.DefaultExpireTime: pod_eviction_detail series are dropped after 5 min
EVENT_COMPONENT = "koordlet-qosManager"
EVENT_SUCCESS, EVENT_FAIL = "evictPodSuccess", "evictPodFail"
REASON_REPORTED = "reported"  # ours: standalone, nothing evicted
_KILL_PASSES = 5  # a task forked while we read cgroup.procs shows up in the next pass
_RECORD_MAX_BYTES = 1 << 20


@dataclass
class EvictionStats:
    """`koordlet_pod_eviction{node,reason}` and `…_detail{node,pod_namespace,pod_name,reason}` (read by the exporter;
    written from the eviction rounds' threads)."""

    total: dict[str, float] = field(default_factory=dict)  # reason -> count
    detail: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)  # -> (count, last update)
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, namespace: str, name: str, reason: str) -> None:
        with self._lock:
            self.total[reason] = self.total.get(reason, 0.0) + 1
            count = self.detail.get((namespace, name, reason), (0.0, 0.0))[0]
            self.detail[(namespace, name, reason)] = (count + 1, self.clock())

    def snapshot(self) -> tuple[dict[str, float], dict[tuple[str, str, str], float]]:
        """The counters now; detail series not updated for 5 minutes are dropped first (upstream's GCCounterVec)."""
        with self._lock:
            cutoff = self.clock() - DETAIL_EXPIRE_SECONDS
            self.detail = {k: v for k, v in self.detail.items() if v[1] >= cutoff}
            return dict(self.total), {k: v[0] for k, v in self.detail.items()}


@dataclass(frozen=True)
class RoundResult:
    evicted: tuple[Eviction, ...] = ()
    credited: float = 0.0


Post = Callable[[str, JSON], object]


class Evictor:
    """One per agent, shared by the eviction strategies (the evicted-UID cache is common to both)."""

    def __init__(self, *, node_name: str, paths: HostPaths, cgroup_version: int, health: Health, stats: EvictionStats,
                 events: EventRecorder, post: Post | None, only_evict_by_api: bool, standalone: bool,
                 state_dir: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.node_name = node_name
        self.paths = paths
        self.cgroup_version = cgroup_version
        self.health = health
        self.stats = stats
        self.events = events
        self._post = post
        self.only_evict_by_api = only_evict_by_api
        self.standalone = standalone or post is None
        self.state_dir = state_dir
        self.clock = clock
        self._evicted: dict[str, float] = {}  # pod uid -> when the Eviction was accepted
        self._lock = threading.Lock()
        self._round = threading.Lock()

    @property
    def mode(self) -> str:
        if self.standalone:
            return "report"
        return "api" if self.only_evict_by_api else "kill"

    def carry_out(self, plan: EvictionPlan) -> RoundResult:
        """Take the plan's candidates in order until what was credited reaches its need (KillAndEvictPods). One
        round at a time: the memory and CPU rounds run in threads, and one must see the other's UID cache."""
        with self._round:
            return self._carry_out(plan)

    def _carry_out(self, plan: EvictionPlan) -> RoundResult:
        credited, evicted = 0.0, []
        for victim in plan.candidates:
            if credited >= plan.need:
                break
            if self.mode == "api" and self.is_evicted(victim.pod.uid):
                log.debug("pod %s was evicted less than %.0fs ago; passed over", victim.key, EVICTED_CACHE_SECONDS)
                continue
            try:
                done = self._evict(victim)
            except Exception as e:  # one pod must not stop the round: the next candidate is taken
                self.health.skip("eviction", "failed", victim.key, f"{type(e).__name__}: {e}")
                continue
            if done:
                evicted.append(victim)
                credited += victim.credit
        log.info("%s: %s %d pod(s), released %.0f of %.0f", plan.gate,
                 {"api": "evicted", "kill": "killed the containers of", "report": "would evict"}[self.mode],
                 len(evicted), credited, plan.need)
        return RoundResult(tuple(evicted), credited)

    # -- the evicted-UID cache ----------------------------------------------------------------------------------
    def is_evicted(self, uid: str) -> bool:
        with self._lock:
            now = self.clock()
            self._evicted = {u: t for u, t in self._evicted.items() if now - t < EVICTED_CACHE_SECONDS}
            return uid in self._evicted

    def _remember(self, uid: str) -> None:
        with self._lock:
            self._evicted[uid] = self.clock()

    # -- the three ways ---------------------------------------------------------------------------------------
    def _evict(self, victim: Eviction) -> bool:
        if self.mode == "report":
            self._report(victim)
            return True
        if self.mode == "api":
            return self._evict_by_api(victim)
        self.kill_containers(victim.pod, victim.message)
        self.stats.record(victim.pod.namespace, victim.pod.name, victim.reason)
        return True

    def _evict_by_api(self, victim: Eviction) -> bool:
        pod = victim.pod
        assert self._post is not None
        text = f"evict Pod:{pod.namespace}/{pod.name}, reason: {victim.reason}, message: {victim.message}"
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod.name, "namespace": pod.namespace},
                "deleteOptions": {"preconditions": {"uid": pod.uid}}}
        try:
            self._post(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction", body)
        except (ApiError, KoordletError) as e:
            log.error("evict pod %s failed, reason: %s, error: %s", victim.key, victim.reason, e)
            self.events.emit("Pod", pod.namespace, pod.name, pod.uid, EVENT_FAIL, f"{text}, error {e}",
                             component=EVENT_COMPONENT)
            return False
        self._remember(pod.uid)
        self.events.emit("Pod", pod.namespace, pod.name, pod.uid, EVENT_SUCCESS, text, component=EVENT_COMPONENT)
        self.stats.record(pod.namespace, pod.name, victim.reason)
        log.info("evict pod %s success, reason: %s", victim.key, victim.reason)
        return True

    def _report(self, victim: Eviction) -> None:
        pod = victim.pod
        log.warning("standalone: would evict pod %s (reason: %s, message: %s); nothing is done without a cluster",
                    victim.key, victim.reason, victim.message)
        self.stats.record(pod.namespace, pod.name, REASON_REPORTED)
        if self.state_dir is None:
            return
        record = {"kind": "Event", "type": "Warning", "reason": EVENT_SUCCESS,
                  "involvedObject": {"kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
                  "message": f"evict Pod:{pod.namespace}/{pod.name}, reason: {victim.reason}, message: "
                             f"{victim.message}",
                  "source": {"component": EVENT_COMPONENT, "host": self.node_name},
                  "standalone": "reported only, not evicted",
                  "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        path = os.path.join(self.state_dir, "evictions.jsonl")
        try:
            os.makedirs(self.state_dir, exist_ok=True)
            if os.path.exists(path) and os.path.getsize(path) > _RECORD_MAX_BYTES:
                os.replace(path, path + ".1")  # bounded: the newest ~1 MiB and the one before
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
        except OSError as e:
            self.health.skip("eviction", "record-failed", path, str(e))

    # -- stopping containers ----------------------------------------------------------------------------------
    def kill_containers(self, pod: PodMeta, message: str) -> int:
        """helpers.KillContainers: each container of spec.containers in order; a container without a status stops
        the walk, one not running stops it too (upstream returns); returns how many tasks got SIGKILL."""
        by_name = {c.name: c for c in pod.containers}
        spec = pod.raw.get("spec")
        names = [str(c.get("name", "")) for c in (spec.get("containers") or []) if isinstance(c, dict)] \
            if isinstance(spec, dict) else []
        killed = 0
        for name in names:
            status = by_name.get(name)
            if status is None:
                log.error("%s: no status for container %s of pod %s/%s", message, name, pod.namespace, pod.name)
                return killed
            if not status.running:
                return killed
            if status.cgroup_dir is None:
                log.warning("%s: no container id for %s of pod %s/%s", message, name, pod.namespace, pod.name)
                continue
            try:
                killed += kill_cgroup(self.paths, self.cgroup_version, status.cgroup_dir)
            except OSError as e:
                log.error("%s: stop container %s error: %s", message, status.container_id, e)
        return killed


def kill_cgroup(paths: HostPaths, version: int, rel_dir: str) -> int:
    """SIGKILL every task of a cgroup (and its children): `cgroup.kill` on cgroup v2 where the kernel has it (5.14+),
    else each pid of cgroup.procs, re-read until empty (a few passes). A pid is signalled only when
    /proc/<pid>/cgroup places it in this cgroup (or below), so a stale or simulated procs file never hits an
    unrelated process (and only with this host's /proc). Returns the number of pids signalled (0 for cgroup.kill,
    which signals in the kernel)."""
    if version == 2:
        kill_file = os.path.join(paths.cgroup_root, rel_dir, "cgroup.kill")
        if os.path.exists(kill_file):
            with open(kill_file, "w", encoding="ascii") as f:
                f.write("1")
            return 0
    if os.path.realpath(paths.proc_root) != "/proc":
        # pids are this machine's: a proc root elsewhere (a simulated node) cannot vouch for them
        raise OSError(f"proc root {paths.proc_root} is not this host's /proc; no process is signalled")
    procs = resource_path(version, paths, "cgroup.procs", rel_dir)
    want = "/" + rel_dir.strip("/")
    signalled = 0
    for _ in range(_KILL_PASSES):
        try:
            pids = [int(p) for p in read_bytes(procs).split()]
        except HostReadError:
            return signalled  # the cgroup is gone: its tasks with it
        targets = [p for p in pids if _in_cgroup(paths, p, want)]
        if not targets:
            break
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
                signalled += 1
            except ProcessLookupError:
                pass
        time.sleep(0.01)  # let the kernel reap them before the next read
    return signalled


def _in_cgroup(paths: HostPaths, pid: int, want: str) -> bool:
    try:
        lines = read_bytes(paths.proc(str(pid), "cgroup")).decode(errors="replace").splitlines()
    except HostReadError:
        return False
    # "<id>:<controllers>:<path>"; the path may carry a prefix (the cgroup namespace's or a test's parent dir)
    return any((want + "/") in (line.split(":", 2)[-1] + "/") for line in lines)
