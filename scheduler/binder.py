"""The binder, shared by `run` and the extender: PreBind's writes (pod annotations and labels, a device plugin's node
lock), then the Binding of every member of a unit; on a failure, what was not bound is rolled back.

Upstream: kube-scheduler's bindingCycle (PreBind, then the DefaultBinder's Binding) and koord-scheduler's
reservation/deviceshare PreBind patches. A unit is one pod, or a GangGroup bound as a whole: every member's PATCH
comes first, so a failed PATCH binds nothing; a failed Binding leaves the members already bound (there is no unbind).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from apis.client.kubeapi import KubeClient
from apis.core.errors import KoordletError
from apis.core.objects import JSON
from scheduler.cluster import key
from scheduler.framework import Assumed, Scheduler

log = logging.getLogger(__name__)


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def path_of(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    return pod_path(str(meta.get("namespace") or "default"), str(meta.get("name")))


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


def binding(pod: JSON, node: str, uid: str) -> JSON:
    """The Binding object for the pod's binding subresource (`uid`: a precondition, "" for none)."""
    meta = pod.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace") or "default",
                         **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


@dataclass
class Member:
    """A pod to bind: where it is assumed (with the annotations its Reserve added) and the UID to bind it under."""

    assumed: Assumed
    uid: str = ""

    @property
    def key(self) -> str:
        return key(self.assumed.pod)


@dataclass
class BindResult:
    bound: list[Member] = field(default_factory=list)
    rolled_back: list[Member] = field(default_factory=list)
    error: str = ""  # "" when every member is bound
    cause: KoordletError | None = None


class Binder:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def bind(self, sched: Scheduler, members: Sequence[Member],
             release: Callable[[list[Assumed]], None]) -> BindResult:
        """PATCH every member (annotations and labels, then the node lock), then POST every Binding. On a failure
        the members not bound are handed to `release` (the scheduler's state: Scheduler.release, under whatever
        lock the caller needs) and their annotations and node locks are removed again, best effort."""
        result = BindResult()
        patched: set[str] = set()
        locked: dict[str, list[str]] = {}  # pod → node annotations written for it (device plugin locks)
        skipped = next((m for m in members if sched.binder(m.assumed.pod) != "DefaultBinder"), None)
        if skipped is not None:  # the profile's Bind list has no plugin that binds this pod: nothing is written
            result.error = f"binding rejected: no bind plugin binds {skipped.key} (every one returned Skip)"
        for m in members if not result.error else ():
            a = m.assumed
            labels, node_annotations = sched.prebind_patches(m.key)
            try:
                annotations = {**a.annotations, **dict.fromkeys(a.removed)}  # null: a merge patch deletes it
                meta = ({"annotations": annotations} if annotations else {}) | (
                    {"labels": labels} if labels else {})
                if meta:
                    self.client.patch(path_of(a.pod), {"metadata": meta})
                patched.add(m.key)
                if node_annotations:
                    self.client.patch(node_path(a.node), {"metadata": {"annotations": node_annotations}})
                    locked[m.key] = list(node_annotations)
            except KoordletError as e:
                result.error, result.cause = f"patching {m.key}: {e}", e
                break
        if not result.error:
            for m in members:
                try:
                    self.client.post(f"{path_of(m.assumed.pod)}/binding",
                                     binding(m.assumed.pod, m.assumed.node, m.uid))
                    result.bound.append(m)
                except KoordletError as e:
                    result.error, result.cause = f"binding {m.key} to {m.assumed.node}: {e}", e
                    break
        for m in result.bound:
            a = m.assumed
            log.info("bound %s to %s%s", m.key, a.node, f" ({', '.join(a.annotations)})" if a.annotations else "")
        if not result.error:
            return result
        done = {m.key for m in result.bound}
        result.rolled_back = [m for m in members if m.key not in done]
        # the annotations to remove are read before release drops them from the pod objects
        undo = [(m, dict(m.assumed.annotations)) for m in result.rolled_back]
        release([m.assumed for m in result.rolled_back])
        for m, added in undo:
            if m.key in patched and added:
                self._unannotate(m.assumed.pod, added)
            if m.key in locked:
                self._unlock(m.assumed.node, locked[m.key])
        return result

    def _unannotate(self, pod: JSON, annotations: dict[str, str]) -> None:
        """Best effort: no device-allocated may outlive its reservation on a pod that is not bound."""
        try:
            self.client.patch(path_of(pod), {"metadata": {"annotations": dict.fromkeys(annotations)}})
        except KoordletError as e:
            log.warning("removing %s from %s after a failed bind: %s", ", ".join(annotations), key(pod), e)

    def _unlock(self, node: str, annotations: list[str]) -> None:
        """Best effort: a device plugin lock taken for a pod that was not bound would hold the node for 5 minutes."""
        try:
            self.client.patch(node_path(node), {"metadata": {"annotations": dict.fromkeys(annotations)}})
        except KoordletError as e:
            log.warning("removing %s from node %s after a failed bind: %s", ", ".join(annotations), node, e)
