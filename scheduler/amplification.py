"""Node resource amplification: a node's ratios, its allocatable as koord-manager's node webhook amplifies it, and
the cpuset CPUs the scheduler counts amplified on such a node.

Upstream: apis/extension/node_resource_amplification.go (the ratios, Amplify, AmplifyResourceList),
pkg/webhook/node/plugins/resourceamplification (allocatable = raw allocatable × ratio, cpu and memory only),
pkg/scheduler/plugins/nodenumaresource (filterAmplifiedCPUs, scoreWithAmplifiedCPUs, amplifyNUMANodeResources,
node_allocation.go getAvailableNUMANodeResources).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.resources import CPU, MEMORY, resource_value
from apis.extension.errors import AnnotationError
from apis.extension.node import (
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    decode_amplification_ratios,
    decode_node_raw_allocatable,
)
from scheduler import malformed

WEBHOOK_RESOURCES = (CPU, MEMORY)  # the only resources the node webhook amplifies (supportedResources)
ERR_INVALID_CPU_AMPLIFICATION_RATIO = "node(s) invalid CPU amplification ratio"
ERR_INSUFFICIENT_AMPLIFIED_CPU = "Insufficient amplified cpu"

Ratios = Mapping[str, float]


@lru_cache(maxsize=1024)
def _decoded(text: str) -> tuple[tuple[tuple[str, float], ...], str | None]:
    try:
        return tuple(decode_amplification_ratios(text).items()), None
    except AnnotationError as e:
        return (), str(e)


def _annotations(obj: JSON) -> Mapping[str, object]:
    ann = (obj.get("metadata") or {}).get("annotations")
    return ann if isinstance(ann, dict) else {}


def ratio_text(obj: JSON) -> str | None:
    """The node's amplification annotation as written, None without one (the cheap test every caller makes first)."""
    text = _annotations(obj).get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO)
    return text if isinstance(text, str) else None


def node_ratios(obj: JSON) -> dict[str, float]:
    """GetNodeResourceAmplificationRatios: {} without the annotation; AnnotationError when it does not decode."""
    text = ratio_text(obj)
    if text is None:
        return {}
    ratios, error = _decoded(text)
    if error is not None:
        raise AnnotationError(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, error)
    return dict(ratios)


def cpu_ratio(obj: JSON) -> float | None:
    """The node's CPU ratio when it amplifies (> 1), 1.0 when it does not, None when the annotation is invalid."""
    text = ratio_text(obj)
    if text is None:
        return 1.0
    ratios, error = _decoded(text)
    if error is not None:
        return None
    ratio = dict(ratios).get(CPU, 1.0)
    return ratio if ratio > 1 else 1.0


def amplify(origin: int, ratio: float) -> int:
    """extension.Amplify: ceil(origin × ratio); a ratio ≤ 1 leaves it as it is."""
    if ratio <= 1:
        return origin
    return math.ceil(origin * ratio)


def amplify_resources(resources: Mapping[str, int], ratios: Ratios) -> dict[str, int]:
    """AmplifyResourceList over every resource listed (cpu in millicores, the rest in whole units)."""
    return {r: amplify(v, ratios.get(r, 1.0)) if v else v for r, v in resources.items()}


def amplified_cpuset_milli(requested_milli: int, cpuset_milli: int, ratio: float) -> int:
    """A node's requested CPU with its cpuset-bound CPUs counted amplified (filterAmplifiedCPUs: only when the
    requests cover them, as upstream)."""
    if ratio <= 1 or cpuset_milli <= 0 or requested_milli < cpuset_milli:
        return requested_milli
    return requested_milli - cpuset_milli + amplify(cpuset_milli, ratio)


def _multiply_milli(resource: str, value: int, ratio: float) -> int:
    """util.MultiplyMilliQuant read back as the scheduler reads a quantity: the milli value × ratio truncated,
    then cpu in millicores and everything else rounded up to whole units."""
    milli = value if resource == CPU else value * 1000
    scaled = int(float(milli) * ratio)
    return scaled if resource == CPU else -(-scaled // 1000)


def status_allocatable(obj: JSON) -> dict[str, int]:
    """The cpu and memory of status.allocatable as written (before koord-sched amplifies them); an entry that does
    not parse is left out (node_allocatable reports it)."""
    status = obj.get("status")
    alloc = status.get("allocatable") if isinstance(status, dict) else None
    out: dict[str, int] = {}
    for r in WEBHOOK_RESOURCES:
        if isinstance(alloc, dict) and r in alloc:
            try:
                out[r] = resource_value(r, alloc[r])
            except InvalidInput:
                continue
    return out


def amplified_allocatable(obj: JSON, allocatable: dict[str, int]) -> dict[str, int]:
    """The node's allocatable as the node webhook leaves it: cpu and memory with a ratio > 1 become the raw
    allocatable (the `raw-allocatable` annotation, else status.allocatable itself) × the ratio; everything else as
    it is. Applying it to a node the webhook already amplified gives the same numbers. **[decision]** koord-sched
    applies the rule itself so a cluster without koord-manager's webhook (and `simulate`'s files) sees what
    koord-scheduler would; a ratio or raw-allocatable annotation that does not decode is reported and leaves the
    node unamplified."""
    if ratio_text(obj) is None:
        return allocatable
    try:
        ratios = node_ratios(obj)
        raw_text = _annotations(obj).get(ANNOTATION_NODE_RAW_ALLOCATABLE)
        raw = dict(allocatable)
        if isinstance(raw_text, str):
            decoded = decode_node_raw_allocatable(raw_text) or {}
            raw = {r: resource_value(r, q) for r, q in decoded.items()}
    except (AnnotationError, InvalidInput) as e:
        malformed.report("Node", obj, str(e), "resource amplification left out")
        return allocatable
    out = dict(allocatable)
    for r in WEBHOOK_RESOURCES:
        ratio = ratios.get(r, 0.0)
        if ratio > 1 and r in raw:
            out[r] = _multiply_milli(r, raw[r], ratio)
    return out
