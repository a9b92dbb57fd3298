"""The MigrationController's Evict (upstream controllers/migration/evict_test.go and context_test.go restated): a dry
run answers yes and creates nothing; a pod the filter or the object limiter refuses, or a job the API server does
not create, is no eviction and no job; a created job carries the pod's reference, the reason, the trigger and this
instance's UUID; the caller's JobContext adds labels and annotations and overrides ttl and mode; per-eviction
DeleteOptions win over defaultDeleteOptions (the DefaultEvictor sends them in its Eviction too)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import kmock
import pytest

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.core.errors import ApiError
from scheduler.descheduler.interfaces import EvictOptions, JobContext
from scheduler.descheduler.kube import KubeAccess

from migbuild import T0, controller, owned, workload

JSON = dict[str, Any]
Validate = Callable[[str, dict[str, Any]], None]
OPTIONS = EvictOptions("test-plugin", "test-reason")


def cluster(*pods: JSON) -> list[JSON]:
    return [workload("ReplicaSet", "rs-1", 10), *pods]


def created(mc: Any) -> list[JSON]:
    return [job.obj for job, _ in mc.created]


def test_dry_run_evicts_without_a_job() -> None:
    pod = owned("p", "n1")
    mc, _ = controller(cluster(pod), {"dryRun": True})
    assert mc.evict(pod, OPTIONS) and created(mc) == []


@pytest.mark.parametrize("pod, args", [
    pytest.param(owned("bare", "n1", kind=""), {}, id="the filter refuses (a bare pod)"),
    pytest.param(owned("p", "n1"), {"objectLimiters": {"namespace": {"duration": "1m", "maxMigrating": 1}}},
                 id="the object limiter refuses"),
])
def test_a_refused_pod_gets_no_job(pod: JSON, args: JSON) -> None:
    mc, _ = controller(cluster(pod), args)
    if "objectLimiters" in args:  # one eviction in the namespace this minute already
        mc.checks.track(owned("earlier", "n1"), T0)
    assert not mc.evict(pod, OPTIONS) and created(mc) == []


def test_a_job_the_api_server_refuses_is_no_eviction() -> None:
    pod = owned("p", "n1")
    mc, handle = controller(cluster(pod))

    def refuse(path: str, obj: JSON) -> JSON:
        raise ApiError(500, "create error")

    handle.kube = SimpleNamespace(client=SimpleNamespace(post=refuse))
    assert not mc.evict(pod, OPTIONS) and created(mc) == []


def test_the_job_created(validate_crd: Validate) -> None:
    pod = owned("p", "n1")
    mc, _ = controller(cluster(pod), {"defaultDeleteOptions": {"gracePeriodSeconds": 30}})
    mc.new_name = lambda: "job-uid"
    assert mc.evict(pod, OPTIONS)
    (job,) = created(mc)
    validate_crd("scheduling.koordinator.sh_podmigrationjobs.yaml", job)
    assert job["metadata"]["name"] == "job-uid" and "labels" not in job["metadata"]
    assert job["metadata"]["annotations"] == {"koordinator.sh/evict-reason": "test-reason",
                                              "koordinator.sh/evict-trigger": "test-plugin",
                                              "koordinator.sh/job-created-by": mc.instance_id}
    assert job["spec"] == {"podRef": {"namespace": "default", "name": "p", "uid": "uid-p"},
                           "mode": "ReservationFirst", "ttl": "5m0s",
                           "deleteOptions": {"gracePeriodSeconds": 30}}
    assert job["status"] == {"phase": "Pending"}


def test_the_job_context_and_delete_options(validate_crd: Validate) -> None:
    """TestCreatePodMigrationJob: the context's labels and annotations added, its timeout and mode taken."""
    pod = owned("p", "n1")
    mc, _ = controller(cluster(pod), {"defaultDeleteOptions": {"gracePeriodSeconds": 30}})
    context = JobContext(labels={"ctx-label": "label-value"}, annotations={"ctx-annotation": "annotation-value"},
                         ttl=120, mode="EvictDirectly")
    assert mc.evict(pod, EvictOptions("test-plugin", "test-reason", job=context))
    (job,) = created(mc)
    validate_crd("scheduling.koordinator.sh_podmigrationjobs.yaml", job)
    assert job["metadata"]["labels"] == {"ctx-label": "label-value"}
    assert job["metadata"]["annotations"]["ctx-annotation"] == "annotation-value"
    assert job["metadata"]["annotations"]["koordinator.sh/evict-trigger"] == "test-plugin"
    assert (job["spec"]["mode"], job["spec"]["ttl"]) == ("EvictDirectly", "2m0s")
    assert job["spec"]["deleteOptions"] == {"gracePeriodSeconds": 30}  # the default: the eviction gave none

    # a timeout of 0 is no ttl; the eviction's own DeleteOptions win over the default
    other = owned("q", "n2")
    mc, _ = controller(cluster(other), {"defaultDeleteOptions": {"gracePeriodSeconds": 30}})
    assert mc.evict(other, EvictOptions("test-plugin", "r", delete_options={"gracePeriodSeconds": 0},
                                        job=JobContext(ttl=0)))
    (job,) = created(mc)
    assert "ttl" not in job["spec"] and job["spec"]["deleteOptions"] == {"gracePeriodSeconds": 0}
    assert job["spec"]["mode"] == "ReservationFirst"


async def test_the_default_evictor_sends_the_delete_options(kmock: kmock.KubernetesEmulator) -> None:
    kmock.resources["v1/pods"] = {}
    kmock["post", kmock.resource("v1/pods"), kmock.subresource("eviction")] << {"kind": "Status", "status": "Success"}
    kube = KubeAccess.of(KubeClient(KubeConfig(server=str(kmock.url))))
    assert await asyncio.to_thread(kube.evictor.evict, owned("p", "n1"), "LowNodeLoad", "hot",
                                   {"gracePeriodSeconds": 5})
    (sent,) = [r.data for r in kmock if r.method.value == "POST" and r.url.path.endswith("/eviction")]
    assert sent["deleteOptions"] == {"gracePeriodSeconds": 5} and sent["metadata"]["name"] == "p"
