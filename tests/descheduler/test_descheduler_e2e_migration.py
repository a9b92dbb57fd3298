"""End to end, against one Kubernetes API double (kmock): `koord-descheduler run` with the MigrationController in
ReservationFirst mode and `koord-sched run` (the real SecondaryScheduler loop) side by side, the rest of the cluster
played by the test (the kubelet ends evicted pods and starts bound ones, the ReplicaSet controller replaces pods,
koordlet's NodeMetrics follow the pods, the disruption controller keeps the PodDisruptionBudget's status).

What it proves:
- a hot node (n1, 80% cpu; high threshold 50%) is drained to 50% through PodMigrationJobs: each job is arbitrated
  (passed-arbitration), its Reservation is placed by koord-sched on another node (Scheduled=True/Scheduled,
  Ready=True/Available), only then is the old pod evicted, and the job succeeds once the replacement pod is bound
  into the reservation and Ready;
- the PodDisruptionBudget (minAvailable 7 of 8) holds at every step: fewer than 7 ready web pods is never seen;
  while one pod is still starting it refuses the first eviction (429), which is retried, not forced;
- a restart of koord-descheduler mid-migration (a job waiting for its Reservation, before koord-sched runs)
  resumes that job: the new instance creates no second job or Reservation for its pod, and carries it out;
- nothing is evicted when no target fits: when koord-sched cannot place the Reservation the job reports
  ReservationScheduled=False/Unschedulable, times out, deletes its Reservation, and the pod stays.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kmock
import pytest
from test_migration_kube import emulate_status

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.core.metatime import rfc3339
from scheduler.cli import profile
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.migration import reconcile
from scheduler.descheduler.server import InCluster
from scheduler.framework import Scheduler
from scheduler.runner import SecondaryScheduler

from deschedbuild import config, node, node_metrics
from deschedkube import LEASES, NM, RESOURCES, client
from kubedouble import PDBS, driver_client, emulate_binding, emulate_eviction, emulate_put

JSON = dict[str, Any]
JOBS = "scheduling.koordinator.sh/v1alpha1/podmigrationjobs"
RESERVATIONS = "scheduling.koordinator.sh/v1alpha1/reservations"
SCHEDULER = "koord-scheduler"  # the MigrationController's default schedulerNames
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "uid-rs-web", "controller": True}
REPLICAS, MIN_AVAILABLE = 8, 7


def web_pod(name: str, node_name: str = "") -> JSON:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": "web"},
                         "ownerReferences": [dict(RS)], "creationTimestamp": "2024-04-30T00:00:00Z"},
            "spec": {"nodeName": node_name, "schedulerName": SCHEDULER,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "400m", "memory": "1Gi"}}}]},
            "status": running() if node_name else {"phase": "Pending"}}


def running() -> JSON:
    return {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                               {"type": "Ready", "status": "True"}]}


class Cluster:
    """The cluster's other actors. Each step reads the double's objects on the test's loop and writes what they
    would through the API (a client of its own User-Agent), so that the watches of koord-sched and koord-descheduler
    see it."""

    def __init__(self, km: kmock.KubernetesEmulator) -> None:
        self.km = km
        self.api = driver_client(km)
        self.made = 0
        self.lowest_ready = REPLICAS
        self.starting = "web-7"  # Running, not Ready until the budget has refused an eviction
        self.reported: list[str] = []
        self.nodes = [node(n, 4000, 16 << 30, 110) for n in ("n1", "n2", "n3")]
        self.archive: list[Any] = []

    def requests(self) -> list[Any]:
        """Every request the double served."""
        return [*self.archive, *self.km]

    def trim(self) -> None:
        """kmock matches each request against every request it served before (once per reaction): the served ones
        but the last (some may still be in a handler) are set aside, and put back for the RBAC record at the end."""
        served = self.km._requests
        if len(served) > 200:
            self.archive += served[:-50]
            del served[:-50]

    def pods(self) -> list[JSON]:
        return stored(self.km, "v1/pods")

    def plan(self) -> list[tuple[str, str, JSON | None]]:
        """(method, path, body) of what the other actors do now."""
        out: list[tuple[str, str, JSON | None]] = []
        pods = "/api/v1/namespaces/default/pods"
        gone = set()
        for p in self.pods():  # the kubelet: an evicted pod ends, a bound one runs
            name = p["metadata"]["name"]
            if p["metadata"].get("deletionTimestamp"):
                out.append(("DELETE", f"{pods}/{name}", None))
                gone.add(name)
            elif (p["spec"].get("nodeName") and p["status"].get("phase") != "Running") or \
                    (name == self.starting and self.refused()):
                out.append(("PATCH", f"{pods}/{name}", {"status": running()}))
                self.starting = "" if name == self.starting else self.starting
        web = [p for p in self.pods() if p["metadata"]["labels"].get("app") == "web"]
        for _ in range(REPLICAS - sum(1 for p in web if not p["metadata"].get("deletionTimestamp"))):
            self.made += 1  # the ReplicaSet controller
            out.append(("POST", pods, web_pod(f"web-new-{self.made}")))
        ready = sum(1 for p in web if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
                    and condition(p, "Ready")[0] == "True")
        self.lowest_ready = min(self.lowest_ready, ready)
        allowed = max(0, ready - MIN_AVAILABLE)  # the disruption controller
        if self.km.objects[PDBS, "default", "web"].raw["status"]["disruptionsAllowed"] != allowed:
            out.append(("PATCH", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
                        {"status": {"disruptionsAllowed": allowed}}))
        bound = [p for p in self.pods() if p["spec"].get("nodeName") and p["metadata"]["name"] not in gone]
        names = sorted(p["metadata"]["name"] for p in bound)
        if names != self.reported:  # koordlet: the NodeMetrics when the pods change
            self.reported = names
            for nm in node_metrics(self.nodes, bound, update_time=rfc3339(time.time())):
                out.append(("PATCH", f"/apis/{NM}/{nm['metadata']['name']}", {"status": nm["status"]}))
        return out

    def apply(self, actions: list[tuple[str, str, JSON | None]]) -> None:
        for method, path, body in actions:
            self.api.request(method, path, body=body)

    def refused(self) -> list[str]:
        """The jobs' Warning Events for an eviction the API refused."""
        return [r.data["note"] for r in self.posted("/events")
                if r.data.get("type") == "Warning" and r.data.get("reason") == "Evicting"]

    async def until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{self.describe()}"
            self.trim()
            actions = self.plan()
            if actions:
                await asyncio.to_thread(self.apply, actions)
            await asyncio.sleep(0.05)

    def describe(self) -> str:
        """The jobs, Reservations and pods as they stand (a timeout's message)."""
        lines = [f"job {j['spec']['podRef']['name']}: {j.get('status', {}).get('phase')} "
                 f"{j.get('status', {}).get('reason')} {j.get('status', {}).get('message')}"
                 for j in stored(self.km, JOBS)]
        lines += [f"reservation {r['metadata']['name']}: {r.get('status', {}).get('phase')} "
                  f"{r.get('status', {}).get('nodeName')}" for r in stored(self.km, RESERVATIONS)]
        lines += [f"pod {p['metadata']['name']}: {p['spec'].get('nodeName')} {p['status'].get('phase')}"
                  for p in self.pods()]
        return "\n".join(lines)

    def posted(self, suffix: str) -> list[Any]:
        return [r for r in self.requests() if r.method.value == "POST" and r.url.path.endswith(suffix)]

    def on(self, node_name: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.pods() if p["spec"].get("nodeName") == node_name)


@pytest.fixture
def cluster(kmock: kmock.KubernetesEmulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    for res in (*RESOURCES, JOBS, RESERVATIONS, "events.k8s.io/v1/events"):
        kmock.resources[res] = {}
    emulate_eviction(kmock)
    emulate_binding(kmock)
    emulate_put(kmock, LEASES)
    emulate_status(kmock, JOBS)  # before the PUT of the object: the first matching reaction answers
    emulate_put(kmock, JOBS, status_subresource=True)  # the CRD's subresources.status: a PUT keeps the status

    def pod_status(request: kmock.Request) -> Any:  # koord-sched's PodScheduled=False: accept and echo
        return kmock.objects["v1/pods", request.namespace, str(request.name)].raw

    kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")] << pod_status
    monkeypatch.setattr(reconcile, "REQUEUE", 0.2)  # upstream waits 3 s between a job's steps
    monkeypatch.setattr(reconcile, "BACKOFF", 0.3)
    c = Cluster(kmock)
    for n in c.nodes:
        kmock.objects["v1/nodes", None, n["metadata"]["name"]] = n
    for i in range(REPLICAS):
        pod = web_pod(f"web-{i}", "n1")
        if pod["metadata"]["name"] == c.starting:
            pod["status"]["conditions"][1]["status"] = "False"
        kmock.objects["v1/pods", "default", f"web-{i}"] = pod
    kmock.objects["apps/v1/replicasets", "default", "web"] = {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "default",
                                                                   "uid": RS["uid"]},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": "web"}}}}
    kmock.objects[PDBS, "default", "web"] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                             "metadata": {"name": "web", "namespace": "default"},
                                             "spec": {"minAvailable": MIN_AVAILABLE,
                                                      "selector": {"matchLabels": {"app": "web"}}},
                                             "status": {"disruptionsAllowed": 0}}
    for nm in node_metrics(c.nodes, c.pods(), update_time=rfc3339(time.time())):
        kmock.objects[NM, None, nm["metadata"]["name"]] = nm
    yield c
    kmock._requests[:0] = c.archive


def descheduler(km: kmock.KubernetesEmulator, lownodeload: JSON | None = None, *, watch: bool = True,
                **args: Any) -> InCluster:
    """LowNodeLoad (low 30%, high 50% cpu; a node abnormal at its first hot round) every 500ms with the
    MigrationController as evictor and filter, one pod migrating per node at a time (a node stays hot until its
    pod is gone, and each round picks another meanwhile: with consecutiveAbnormalities 1 there is no detector, and
    with more a node the round leaves above its high thresholds stays in Anomaly and is acted on again — only one
    brought below them in the round is counted afresh); its workload object limiter short enough for a test
    (upstream's default allows 2 per 5 minutes)."""
    cfg = config({"cpu": 30}, {"cpu": 50}, top={"deschedulingInterval": "500ms"}, **(lownodeload or {}))
    prof = cfg["profiles"][0]
    prof["plugins"]["evict"]["enabled"] = prof["plugins"]["filter"]["enabled"] = [{"name": "MigrationController"}]
    prof["pluginConfig"].append({"name": "MigrationController", "args": {
        "arbitrationArgs": {"interval": "100ms"},
        "objectLimiters": {"workload": {"duration": "1s", "maxMigrating": 4}}, "maxMigratingPerNode": 1,
        **args}})
    return InCluster(client(km), parse_config(cfg), watch=watch)


def koord_sched(km: kmock.KubernetesEmulator) -> SecondaryScheduler:
    """koord-sched's run loop with its default profile; its own User-Agent keeps its calls out of the descheduler's
    least-privilege proof (tests/test_rbac.py)."""
    api = KubeClient(KubeConfig(server=str(km.url), user_agent="koord-sched-e2e"))
    return SecondaryScheduler(api, SCHEDULER, lambda c: Scheduler(c, profile(None)), write_topology_status=False,
                              watch=True)


def rounds_of(r: InCluster) -> Callable[[threading.Event], None]:
    """`run`'s rounds until stopped, the watches closed after (as lead_and_run does)."""
    def run(stop: threading.Event) -> None:
        try:
            r.run(stop)
        finally:
            r.close()
    return run


class Running:
    """A loop in a thread until stopped."""

    def __init__(self, target: Callable[[threading.Event], None]) -> None:
        self.stop = threading.Event()
        self.task = asyncio.create_task(asyncio.to_thread(target, self.stop))

    async def close(self) -> None:
        self.stop.set()
        await self.task


def stored(km: kmock.KubernetesEmulator, resource: str) -> list[JSON]:
    return [o.raw for (res, _, _), o in list(km.objects.items()) if res == resource and not o.deleted]


def condition(obj: JSON, type_: str) -> tuple[str, str]:
    c = next((c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == type_), {})
    return c.get("status", ""), c.get("reason", "")


async def test_hot_node_drained_through_reservations_placed_by_koord_sched_with_a_restart(
        kmock: kmock.KubernetesEmulator, cluster: Cluster) -> None:
    first = descheduler(kmock)
    a = Running(rounds_of(first))
    # without a scheduler the job waits for its Reservation
    await cluster.until(lambda: len(stored(kmock, RESERVATIONS)) == 1, 5, "a Reservation")
    await a.close()
    jobs = stored(kmock, JOBS)
    assert len(jobs) == 1 and all(j["metadata"]["annotations"]["descheduler.koordinator.sh/passed-arbitration"]
                                  == "true" for j in jobs)
    assert not cluster.posted("/eviction") and cluster.on("n1") == [f"web-{i}" for i in range(REPLICAS)]
    waiting = {j["spec"]["podRef"]["name"] for j in jobs}

    second = descheduler(kmock)  # the restart: a new instance
    b, sched = Running(rounds_of(second)), Running(lambda stop: koord_sched(kmock).run(stop, 0.3))
    try:
        def drained() -> bool:
            done = [j for j in stored(kmock, JOBS) if j.get("status", {}).get("phase") == "Succeeded"]
            return len(cluster.on("n1")) == 5 and len(done) == 3
        await cluster.until(drained, 15, "n1 drained to 5 pods by three jobs")
    finally:
        await b.close()
        await sched.close()

    jobs = stored(kmock, JOBS)
    pods = [j["spec"]["podRef"]["name"] for j in jobs]
    posted = [r.data["spec"]["podRef"]["name"] for r in cluster.posted("/podmigrationjobs")]
    phases = {j["spec"]["podRef"]["name"]: j.get("status", {}).get("phase") for j in jobs}
    # no pod ever got a second job (the restart resumed the first instance's); a fourth job for another pod may
    # follow a job that timed out on a loaded machine (seen once), never a duplicate
    assert len(posted) == len(set(posted)) and set(posted) == set(pods), (posted, phases)
    assert sum(p == "Succeeded" for p in phases.values()) == 3 and waiting <= set(pods), (posted, phases)
    creators = {j["metadata"]["annotations"]["koordinator.sh/job-created-by"] for j in jobs}
    assert len(creators) == 2, (posted, phases)  # the first instance's job, resumed; the others the second's
    reservations = stored(kmock, RESERVATIONS)
    # one Reservation per job: a job's Reservation is named after it, so a create repeated from a stale view (seen
    # once on a loaded machine) is refused by name (409) and never makes a second one
    assert len(reservations) == 3, (posted, phases)  # a timed-out job's Reservation is deleted with it
    assert {r.data["metadata"]["name"] for r in cluster.posted("/reservations")} == \
        {r["metadata"]["name"] for r in reservations}
    for r in reservations:  # placed by koord-sched off n1, then consumed by the replacement pod
        assert r["status"]["nodeName"] in ("n2", "n3") and r["status"]["phase"] == "Succeeded"
        assert condition(r, "Scheduled") == ("True", "Scheduled")
        assert condition(r, "Ready") == ("False", "Succeeded")
        (owner,) = r["status"]["currentOwners"]
        assert owner["name"].startswith("web-new-")
    for j in jobs:
        st = j["status"]
        assert st["podRef"]["name"].startswith("web-new-") and st["nodeName"] in ("n2", "n3")
        assert {c["type"]: c["status"] for c in st["conditions"]} == {
            "ReservationCreated": "True", "ReservationScheduled": "True", "Eviction": "True",
            "ReservationBound": "True", "BoundPodReady": "True", "PodBoundReservation": "True"}
    # the budget: never below 7 ready web pods; it refused while web-7 was starting, and that was retried
    assert cluster.lowest_ready >= MIN_AVAILABLE and cluster.refused() and not cluster.starting
    assert all("disruption budget" in note for note in cluster.refused())
    evictions = cluster.posted("/eviction")
    assert {r.url.path.split("/")[-2] for r in evictions} == set(pods)
    # 50% is not above the high threshold: a last round decides nothing
    # (without watches: kmock ends a closed watch's handler only at its next event, and none would come)
    last = await asyncio.to_thread(descheduler(kmock, watch=False).round)
    assert last.error is None and last.decided == [] and len(cluster.posted("/podmigrationjobs")) == len(posted)


async def test_nothing_is_evicted_when_koord_sched_cannot_place_the_reservation(
        kmock: kmock.KubernetesEmulator, cluster: Cluster) -> None:
    """n2 and n3 are tainted: the descheduler (nodeFit off) migrates, koord-sched finds no node for the
    Reservation (Scheduled=False/Unschedulable, reported on the job), the job times out (ttl 2s) and deletes it;
    the pod is never evicted."""
    for n in ("n2", "n3"):
        kmock.objects["v1/nodes", None, n].patch({"spec": {"taints": [{"key": "dedicated", "value": "x",
                                                                      "effect": "NoSchedule"}]}})
    r = descheduler(kmock, {"nodeFit": False}, nodeFit=False, defaultJobTTL="2s")
    d, sched = Running(rounds_of(r)), Running(lambda stop: koord_sched(kmock).run(stop, 0.3))
    try:
        await cluster.until(lambda: any(condition(j, "ReservationScheduled") == ("False", "Unschedulable")
                                        for j in stored(kmock, JOBS)), 5, "the Unschedulable condition")
        await cluster.until(lambda: any(j.get("status", {}).get("reason") == "Timeout"
                                        for j in stored(kmock, JOBS)), 5, "the job's timeout")
    finally:
        await d.close()
        await sched.close()
    timed_out = next(j for j in stored(kmock, JOBS) if j["status"].get("reason") == "Timeout")
    assert timed_out["status"]["phase"] == "Failed"
    name = timed_out["spec"]["reservationOptions"]["reservationRef"]["name"]
    assert name not in {x["metadata"]["name"] for x in stored(kmock, RESERVATIONS)}  # deleted with the job
    assert not cluster.posted("/eviction") and len(cluster.on("n1")) == REPLICAS
