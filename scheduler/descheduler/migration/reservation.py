"""The Reservation a ReservationFirst job asks koord-sched to place for the pod it migrates.

Upstream: controllers/migration/reservation/util.go (CreateOrUpdateReservationOptions, appendSkipNodeAffinity,
GenerateReserveResourceOwners). The job's own template (spec.reservationOptions.template) when it has one, the parts
it leaves out filled in: named by the job's UID; the pod's metadata and spec (nodeName cleared, its node excluded by
a `metadata.name NotIn` field term on every required node-selector term); owned by the pending pod itself when it is
unschedulable, else by the pod's controller; allocated once; labelled as the descheduler's with its order; the job's
ttl when the template sets neither ttl nor expires; with the gate DisablePVCReservation, no PVC or ephemeral volume.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from apis.core import godur, podmeta
from apis.core.objects import JSON, as_object, as_objects
from apis.scheduling import reservation as rsv
from apis.scheduling.migration import CREATOR, LABEL_CREATED_BY, PodMigrationJob


def owners(pod: Mapping[str, Any]) -> list[JSON]:
    """GenerateReserveResourceOwners."""
    meta, status = as_object(pod.get("metadata")), as_object(pod.get("status"))
    if status.get("phase") == "Pending" and any(
            isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"
            for c in as_objects(status.get("conditions"))):
        return [{"object": {"uid": meta.get("uid"), "kind": "Pod", "name": meta.get("name"),
                            "namespace": meta.get("namespace")}}]
    ref = podmeta.controller_ref(pod)
    if ref is not None:
        return [{"controller": {**ref, "namespace": meta.get("namespace")}}]
    return []


def template_for(job: PodMigrationJob, pod: Mapping[str, Any], now: float, *, drop_pvc: bool = False) -> JSON:
    """The job's reservation template (upstream's reservationOptions.template: metadata and spec) at time `now`
    (unix seconds); `drop_pvc`: the feature gate DisablePVCReservation."""
    options = as_object(as_object(job.obj.get("spec")).get("reservationOptions"))
    template: JSON = copy.deepcopy(dict(as_object(options.get("template"))))
    meta = template.setdefault("metadata", {})
    if not meta.get("name"):
        meta["name"] = job.ident
    spec = template.setdefault("spec", {})
    if spec.get("template") is None:
        spec["template"] = {"metadata": copy.deepcopy(dict(as_object(pod.get("metadata")))),
                            "spec": copy.deepcopy(dict(as_object(pod.get("spec"))))}
    if not spec.get("owners"):
        spec["owners"] = owners(pod)
    spec["allocateOnce"] = True
    pod_spec = spec["template"].setdefault("spec", {})
    pod_spec.pop("nodeName", None)
    labels = meta.setdefault("labels", {})
    labels[LABEL_CREATED_BY] = CREATOR
    labels[rsv.LABEL_RESERVATION_ORDER] = str(int(now * 1000))
    if spec.get("ttl") is None and spec.get("expires") is None and job.ttl > 0:
        spec["ttl"] = godur.format_seconds(job.ttl)
    node = as_object(pod.get("spec")).get("nodeName")
    if node:
        _exclude_node(pod_spec, str(node))
    if drop_pvc:
        kept = [v for v in pod_spec.get("volumes") or []
                if not (isinstance(v, Mapping) and ("persistentVolumeClaim" in v or "ephemeral" in v))]
        if kept:
            pod_spec["volumes"] = kept
        else:
            pod_spec.pop("volumes", None)
    return template


def reservation_of(template: Mapping[str, Any]) -> JSON:
    """The Reservation a template stands for (upstream interpreter.CreateReservation)."""
    return {"apiVersion": rsv.API_VERSION, "kind": rsv.KIND, **copy.deepcopy(dict(template))}


def reservation_for(job: PodMigrationJob, pod: Mapping[str, Any], now: float, *, drop_pvc: bool = False) -> JSON:
    """The Reservation object to create for the job's pod at time `now`."""
    return reservation_of(template_for(job, pod, now, drop_pvc=drop_pvc))


def _exclude_node(pod_spec: JSON, node: str) -> None:
    """appendSkipNodeAffinity: `metadata.name NotIn [node]` on every required term, or one new term."""
    required = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {}) \
        .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    skip = {"key": "metadata.name", "operator": "NotIn", "values": [node]}
    for term in terms:
        term.setdefault("matchFields", []).append(dict(skip))
    if not terms:
        terms.append({"matchFields": [skip]})
