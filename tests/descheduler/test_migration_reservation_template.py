"""The Reservation a ReservationFirst job asks for (upstream controllers/migration/reservation/util_test.go
TestCreateOrUpdateReservationOptions restated, and controller.go's createReservation / setReservationOrder): the
pod's node excluded on every required term or by a new one, PVC and ephemeral volumes kept unless the feature gate
DisablePVCReservation is on, a job's own template completed and not overridden, the built template kept on the job,
and the reservation-order label put on a Reservation the job names that lacks it — also through `run`'s
MigrationController with `--feature-gates`."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from typing import Any

import kmock
import pytest
import test_migration_kube
from test_migration_kube import JOBS, RESERVATIONS, add_job, emulate_status, reconciler, stored

from apis.core.metatime import rfc3339
from apis.scheduling.migration import decode_job
from scheduler.descheduler.config.decode import parse_config
from scheduler.descheduler.config.features import parse_feature_gates
from scheduler.descheduler.migration.plugin import MigrationController
from scheduler.descheduler.migration.reservation import reservation_for, template_for
from scheduler.descheduler.server import InCluster

from deschedbuild import config, node
from deschedkube import RESOURCES, client
from kubedouble import emulate_eviction, emulate_put
from migbuild import T0, owned, pmj

JSON = dict[str, Any]
Validate = Callable[[str, dict[str, Any]], None]
ORDER = "scheduling.koordinator.sh/reservation-order"
CREATED_BY = {"app.kubernetes.io/created-by": "koord-descheduler"}
OWNER = {"controller": True, "name": "test"}
ZONE_TERM = {"matchExpressions": [{"key": "test", "operator": "In", "values": ["xxxx"]}]}
SKIP = {"key": "metadata.name", "operator": "NotIn", "values": ["test-node"]}
PVC = {"name": "", "persistentVolumeClaim": {}}
km = test_migration_kube.km  # the API double with jobs, reservations and the Eviction API


def upstream_pod(*, affinity: bool = False, volumes: list[JSON] | None = None) -> JSON:
    """util_test.go's pod: controlled by `test`, in default, on test-node."""
    spec: JSON = {"nodeName": "test-node"}
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [copy.deepcopy(ZONE_TERM)]}}}
    if volumes is not None:
        spec["volumes"] = volumes
    return {"metadata": {"namespace": "default", "ownerReferences": [OWNER]}, "spec": spec}


def want_template(term: JSON, volumes: list[JSON] | None) -> JSON:
    spec: JSON = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}}
    if volumes is not None:
        spec["volumes"] = volumes
    return {"metadata": {"name": "uid-job", "labels": CREATED_BY},
            "spec": {"template": {"metadata": {"namespace": "default", "ownerReferences": [OWNER]}, "spec": spec},
                     "owners": [{"controller": {**OWNER, "namespace": "default"}}], "allocateOnce": True}}


@pytest.mark.parametrize("pod, drop_pvc, want", [
    pytest.param(upstream_pod(), False, want_template({"matchFields": [SKIP]}, None), id="skip current node"),
    pytest.param(upstream_pod(affinity=True), False, want_template({**ZONE_TERM, "matchFields": [SKIP]}, None),
                 id="skip current node with existing node affinity"),
    pytest.param(upstream_pod(affinity=True, volumes=[PVC]), False,
                 want_template({**ZONE_TERM, "matchFields": [SKIP]}, [PVC]),
                 id="with existing node affinity, enable pvc reservation"),
    pytest.param(upstream_pod(affinity=True, volumes=[PVC]), True,
                 want_template({**ZONE_TERM, "matchFields": [SKIP]}, None),
                 id="with existing node affinity, disable pvc reservation"),
])
def test_create_or_update_reservation_options(pod: JSON, drop_pvc: bool, want: JSON) -> None:
    job = decode_job(pmj("job", {**pod, "metadata": {**pod["metadata"], "name": "p", "uid": "uid-p"}}))
    got = template_for(job, pod, T0, drop_pvc=drop_pvc)
    assert got["metadata"]["labels"].pop(ORDER) == str(int(T0 * 1000))  # unix milliseconds
    assert got == want
    assert pod["spec"]["nodeName"] == "test-node" and "matchFields" not in str(pod)  # the pod is left alone


def test_the_gate_drops_pvc_and_ephemeral_volumes_only(validate_crd: Validate) -> None:
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
               {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
               {"name": "config", "configMap": {"name": "cfg"}}, {"name": "tmp", "emptyDir": {}}]
    pod = owned("p", "n1", volumes=volumes)
    job = decode_job(pmj("job", pod))
    kept = reservation_for(job, pod, T0)
    dropped = reservation_for(job, pod, T0, drop_pvc=True)
    for r in (kept, dropped):
        validate_crd("scheduling.koordinator.sh_reservations.yaml", r)
    assert kept["spec"]["template"]["spec"]["volumes"] == volumes
    assert [v["name"] for v in dropped["spec"]["template"]["spec"]["volumes"]] == ["config", "tmp"]


def test_a_jobs_own_template_is_completed_not_overridden(validate_crd: Validate) -> None:
    pod = owned("p", "n1")
    given_owner = {"labelSelector": {"matchLabels": {"app": "web"}}}
    obj = pmj("job", pod)
    obj["spec"].update({"ttl": "5m0s", "reservationOptions": {"template": {
        "metadata": {"name": "mine", "labels": {"team": "a"}},
        "spec": {"ttl": "1m0s", "owners": [given_owner]}}}})
    r = reservation_for(decode_job(obj), pod, T0)
    validate_crd("scheduling.koordinator.sh_reservations.yaml", r)
    assert r["metadata"]["name"] == "mine"
    assert r["metadata"]["labels"] == {"team": "a", **CREATED_BY, ORDER: str(int(T0 * 1000))}
    assert r["spec"]["owners"] == [given_owner] and r["spec"]["ttl"] == "1m0s"  # the template's, not the job's
    assert r["spec"]["template"]["metadata"]["name"] == "p" and r["spec"]["allocateOnce"] is True

    # a template with the pod template but no owners gets the pod's controller as owner; expires stops the ttl
    obj["spec"]["reservationOptions"]["template"] = {"spec": {"template": {"spec": {"containers": []}},
                                                              "expires": "2024-05-01T01:00:00Z"}}
    r = reservation_for(decode_job(obj), pod, T0)
    assert r["metadata"]["name"] == "uid-job" and "ttl" not in r["spec"]
    assert r["spec"]["owners"] == [{"controller": {**pod["metadata"]["ownerReferences"][0], "namespace": "default"}}]
    assert r["spec"]["template"]["spec"]["containers"] == []  # the job's pod template, the node still excluded
    assert r["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"] == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]


async def test_the_template_is_kept_on_the_job_and_a_named_reservation_gets_its_order(
        km: kmock.KubernetesEmulator) -> None:
    emulate_put(km, RESERVATIONS)
    pod = owned("p", "n1")
    km.objects["v1/pods", "default", "p"] = pod
    add_job(km, "job", pod, "ReservationFirst")
    clock = [T0]
    r, _ = reconciler(km, clock)
    await asyncio.to_thread(r.reconcile, stored(km, JOBS, "job"))  # Pending → Running
    await asyncio.to_thread(r.reconcile, stored(km, JOBS, "job"))  # the Reservation
    (posted,) = [q.data for q in km if q.method.value == "POST" and q.url.path.endswith("/reservations")]
    options = stored(km, JOBS, "job")["spec"]["reservationOptions"]
    assert options["template"] == {k: v for k, v in posted.items() if k not in ("apiVersion", "kind")}
    assert options["reservationRef"]["name"] == "uid-job" and posted["metadata"]["labels"][ORDER]

    # a job naming a Reservation made elsewhere, without the order label: the label is put on it, once
    km.objects[RESERVATIONS, None, "theirs"] = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": "theirs", "resourceVersion": "1", "labels": {"team": "a"}},
        "spec": {"template": {"spec": {}}, "owners": [{"object": {"name": "p"}}]}, "status": {"phase": "Pending"}}
    add_job(km, "named", pod, "ReservationFirst")
    named = stored(km, JOBS, "named")
    named["spec"]["reservationOptions"] = {"reservationRef": {"name": "theirs"}}
    named["status"] = {"phase": "Running"}
    for _ in range(2):
        clock[0] += 1
        await asyncio.to_thread(r.reconcile, stored(km, JOBS, "named"))
    puts = [q for q in km if q.method.value == "PUT" and q.url.path.endswith("/reservations/theirs")]
    assert len(puts) == 1
    assert stored(km, RESERVATIONS, "theirs")["metadata"]["labels"] == {"team": "a", ORDER: str(int((T0 + 1) * 1000))}
    assert stored(km, JOBS, "named")["status"]["phase"] == "Running"  # waiting for it to be scheduled


@pytest.mark.parametrize("gates, volumes", [("", ["data"]), ("DisablePVCReservation=true", [])])
async def test_the_feature_gate_through_run(kmock: kmock.KubernetesEmulator, gates: str, volumes: list[str]) -> None:
    for res in (*RESOURCES, JOBS, RESERVATIONS, "events.k8s.io/v1/events"):
        kmock.resources[res] = {}
    emulate_status(kmock, JOBS)
    emulate_put(kmock, JOBS)
    emulate_eviction(kmock)
    for n in ("n1", "n2"):
        kmock.objects["v1/nodes", None, n] = node(n, 4000, 16 << 30, 110)
    kmock.objects["apps/v1/replicasets", "default", "rs-1"] = {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs-1", "namespace": "default",
                                                                   "uid": "rs-1"}, "spec": {"replicas": 10}}
    pod = owned("p", "n1", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    kmock.objects["v1/pods", "default", "p"] = pod
    job = pmj("job", pod, "Pending", created=rfc3339(time.time()))
    job["spec"]["mode"] = "ReservationFirst"
    job["metadata"]["resourceVersion"] = "1"
    kmock.objects[JOBS, None, "job"] = job
    cfg = config({"cpu": 30}, {"cpu": 50})
    prof = cfg["profiles"][0]
    prof["plugins"]["evict"]["enabled"] = prof["plugins"]["filter"]["enabled"] = [{"name": "MigrationController"}]
    r = InCluster(client(kmock), parse_config(cfg), watch=False, gates=parse_feature_gates(gates))
    await asyncio.to_thread(r.cache.relist)
    (plugin,) = r.controllers()
    assert isinstance(plugin, MigrationController)
    loop = plugin.controller_loop()
    assert loop is not None
    for _ in range(3):  # arbitrated, Running, the Reservation
        await asyncio.to_thread(loop.tick)
        loop.kick.set()
    (posted,) = [q.data for q in kmock if q.method.value == "POST" and q.url.path.endswith("/reservations")]
    assert [v["name"] for v in posted["spec"]["template"]["spec"].get("volumes", [])] == volumes
