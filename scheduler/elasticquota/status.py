"""What `koord-sched run` writes back to an ElasticQuota: status.used and the runtime/request annotations."""

from __future__ import annotations

import json

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.scheduling.quota import (
    ANNOTATION_QUOTA_ALLOCATED,
    ANNOTATION_QUOTA_CHILD_REQUEST,
    ANNOTATION_QUOTA_GUARANTEED,
    ANNOTATION_QUOTA_NON_PREEMPTIBLE_REQUEST,
    ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED,
    ANNOTATION_QUOTA_REQUEST,
    ANNOTATION_QUOTA_RUNTIME,
)
from scheduler.elasticquota.model import Resources, equal, parse_resources

# controller.go updateElasticQuotaStatusIfChanged: summary field → annotation
ANNOTATIONS = ((ANNOTATION_QUOTA_RUNTIME, "runtime"), (ANNOTATION_QUOTA_REQUEST, "request"),
               (ANNOTATION_QUOTA_CHILD_REQUEST, "childRequest"), (ANNOTATION_QUOTA_GUARANTEED, "guaranteed"),
               (ANNOTATION_QUOTA_ALLOCATED, "allocated"),
               (ANNOTATION_QUOTA_NON_PREEMPTIBLE_REQUEST, "nonPreemptibleRequest"),
               (ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED, "nonPreemptibleUsed"))


def _values(doc: object) -> Resources:
    try:
        return parse_resources(doc, "")
    except InvalidInput:  # a value we cannot read is one we rewrite
        return {"": -1}


def status_patch(obj: JSON, summary: JSON) -> JSON | None:
    """A merge patch bringing the object to the summary, or None when nothing changed (zeros ignored, as
    quotav1.Equals(RemoveZeros(...)) upstream)."""
    meta = obj.get("metadata") or {}
    current = meta.get("annotations") or {}
    annotations: dict[str, str] = {}
    for ann, field in ANNOTATIONS:
        want: dict[str, str] = summary.get(field) or {}
        try:
            have = _values(json.loads(current[ann])) if current.get(ann) else {}
        except ValueError:
            have = {"": -1}
        if not equal(have, _values(want)):
            annotations[ann] = json.dumps(want, separators=(",", ":"))
    patch: JSON = {}
    if annotations:
        patch["metadata"] = {"annotations": annotations}
    used: dict[str, str] = summary.get("used") or {}
    if not equal(_values((obj.get("status") or {}).get("used")), _values(used)):
        patch["status"] = {"used": used}
    return patch or None
