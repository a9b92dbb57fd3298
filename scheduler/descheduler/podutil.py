"""Pod facts the descheduler's plugins share: which pods a node holds, the PodDisruptionBudgets covering a pod
(upstream pkg/descheduler/pod/pods.go; descheduler pkg/utils/pod.go IsPodCoveredByPDB)."""

from __future__ import annotations

from collections.abc import Iterable

from apis.core import podmeta
from apis.core.labelselector import SelectorError, parse_label_selector
from apis.core.objects import JSON
from apis.extension.qos import pod_labels


def namespace(pod: JSON) -> str:
    return str((pod.get("metadata") or {}).get("namespace") or "")


def name(pod: JSON) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def never_moved(pod: JSON) -> list[str]:
    """Why neither evictor moves the pod: a mirror pod, a static pod, a terminating pod (upstream's words)."""
    out = []
    if podmeta.is_mirror_pod(pod):
        out.append("pod is a mirror pod")
    if podmeta.is_static_pod(pod):
        out.append("pod is a static pod")
    if podmeta.is_terminating(pod):
        out.append("pod is terminating")
    return out


def covering_pdbs(pod: JSON, pdbs: Iterable[JSON]) -> list[JSON]:
    """The PodDisruptionBudgets of the pod's namespace whose selector matches its labels (a nil selector matches
    nothing, a selector that does not convert is passed over)."""
    labels = {str(k): str(v) for k, v in pod_labels(pod).items()}
    out = []
    for pdb in pdbs:
        if namespace(pdb) != namespace(pod):
            continue
        raw = (pdb.get("spec") or {}).get("selector")
        if raw is None:
            continue
        try:
            if parse_label_selector(raw).matches(labels):
                out.append(pdb)
        except SelectorError:
            continue
    return out
