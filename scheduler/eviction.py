"""Carrying out a job-level preemption against the API server: DisruptionTarget, Eviction, nominatedNodeName."""

from __future__ import annotations

import logging
import time

from apis.client.kubeapi import KubeClient
from apis.core.errors import ApiError, KoordletError, NotFound
from apis.core.objects import JSON
from scheduler.cluster import key

log = logging.getLogger(__name__)
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def pod_path(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    return f"/api/v1/namespaces/{meta.get('namespace') or 'default'}/pods/{meta.get('name')}"


class Evictor:
    """preemptPod / setAllNominatedNode of coscheduling/core/preemption.go, with the Eviction API instead of a
    plain delete so that the API server enforces PodDisruptionBudgets (**[decision]**: upstream deletes; a
    preemption that a PDB refuses leaves the job unplaced). DELETE is used only where the server has no eviction
    subresource (404 for an existing pod, or 405), which is what upstream always does."""

    def __init__(self, client: KubeClient, scheduler_name: str) -> None:
        self.client = client
        self.scheduler_name = scheduler_name

    def evict(self, victim: JSON, preemptor: str, trigger: str) -> str | None:
        """None when the victim is evicted (or already gone), else why not."""
        condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                     "message": f"{self.scheduler_name}: preempting to accommodate higher priority pods, "
                                f"preemptor: {preemptor}, triggerPod: {trigger}",
                     "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        path = pod_path(victim)
        try:
            self.client.patch(f"{path}/status", {"status": {"conditions": [condition]}}, patch_type=STRATEGIC_MERGE)
        except NotFound:
            return None
        except KoordletError as e:
            return f"adding DisruptionTarget to {key(victim)}: {e}"
        why = self._evict(victim)
        if why is None:
            log.info("evicted %s (preemptor %s, trigger %s)", key(victim), preemptor, trigger)
        return why

    def revoke(self, victim: JSON, quota: str) -> str | None:
        """Over-use revoke (quota_overuse_revoke.go EvictPod): the Eviction alone, no DisruptionTarget; None when
        the pod is evicted (or already gone), else why not."""
        why = self._evict(victim)
        if why is None:
            log.info("evicted %s: quota %s uses more than its runtime", key(victim), quota)
        return why

    def _evict(self, victim: JSON) -> str | None:
        path = pod_path(victim)
        meta = victim.get("metadata") or {}
        body: JSON = {"apiVersion": "policy/v1", "kind": "Eviction",
                      "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace") or "default"}}
        if meta.get("uid"):
            body["deleteOptions"] = {"preconditions": {"uid": meta["uid"]}}
        try:
            self.client.post(f"{path}/eviction", body)
        except NotFound:
            if not self._exists(path):
                return None
            return self._delete(path, victim)
        except ApiError as e:
            if e.status == 405:
                return self._delete(path, victim)
            if e.status == 429:
                return f"evicting {key(victim)}: refused by its PodDisruptionBudget: {e}"
            return f"evicting {key(victim)}: {e}"
        except KoordletError as e:
            return f"evicting {key(victim)}: {e}"
        return None

    def _exists(self, path: str) -> bool:
        try:
            self.client.get(path)
        except NotFound:
            return False
        except KoordletError:
            return True
        return True

    def _delete(self, path: str, victim: JSON) -> str | None:
        try:
            self.client.request("DELETE", path)
        except NotFound:
            return None
        except KoordletError as e:
            return f"deleting {key(victim)}: {e}"
        log.info("deleted %s (no eviction subresource)", key(victim))
        return None

    def nominate(self, pod: JSON, node: str) -> str | None:
        try:
            self.client.patch(f"{pod_path(pod)}/status", {"status": {"nominatedNodeName": node or None}},
                              patch_type=STRATEGIC_MERGE)
        except KoordletError as e:
            return f"setting nominatedNodeName of {key(pod)}: {e}"
        return None
