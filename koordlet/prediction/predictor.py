"""The Prod reclaimable predictor: how much of the Prod pods' requests their predicted peak leaves unused.

Upstream: pkg/koordlet/prediction/peak_predictor.go. Two predictors, the smaller result wins and the larger peak
is reported: per pod, request − p95(cpu)/p98(memory) × (1 + safety margin) summed over Prod (and priority-less)
pods past their cold start, capped by allocatable − peak; per priority, the Prod and none classes' requests less
the system's and those classes' predicted peaks, capped alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput, QuantityError
from apis.core.objects import JSONMapping
from apis.core.quantity import format_bytes, format_milli
from apis.core.resources import pod_requests, resource_value
from apis.extension.node import ANNOTATION_NODE_RAW_ALLOCATABLE, decode_node_raw_allocatable
from apis.extension.priority import PRIORITY_NONE, PRIORITY_PROD, priority_class_with_default
from koordlet.prediction.histogram import parse_go_time
from koordlet.prediction.server import SYSTEM_ITEM, PeakPredictServer, PredictionConfig, node_item_uid

RL = dict[str, int]  # {"cpu": millicores, "memory": bytes}
POD_PREDICTOR = "podReclaimablePredictor"
PRIORITY_PREDICTOR = "priorityReclaimablePredictor"
MIN_PREDICTOR = "minPredictor"
_RECLAIMABLE_FOR_PROD = (PRIORITY_PROD, PRIORITY_NONE)
_TERMINATED = ("Succeeded", "Failed")


class PredictionError(Exception):
    """The prediction failed: prodReclaimableMetric is reported empty (and the peak left out), as upstream."""


class NotTrainedYet(PredictionError):
    """The node's system or priority models have had no training round yet (the first minutes after start)."""


def cpu_memory(obj: object) -> RL:
    out: RL = {}
    if isinstance(obj, Mapping):
        for name in ("cpu", "memory"):
            if name in obj:
                try:
                    out[name] = resource_value(name, obj[name])
                except InvalidInput:
                    continue
    return out


def pod_request(pod: JSONMapping) -> RL:
    """util.GetPodRequest for cpu and memory: resource.PodRequests (apis.core.resources: sidecars, init maxima,
    overhead, pod-level resources); QuantityError when the pod's requests cannot be read."""
    requests = pod_requests(pod)
    return {"cpu": requests.get("cpu", 0), "memory": requests.get("memory", 0)}


def node_allocatable(node: JSONMapping | None) -> RL:
    """The raw allocatable annotation (before resource amplification), else status.allocatable."""
    if node is None:
        raise PredictionError("node is nil")
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_NODE_RAW_ALLOCATABLE)
    if raw and isinstance(raw, str):
        with contextlib.suppress(InvalidInput):  # upstream: a malformed annotation falls back to allocatable
            parsed = decode_node_raw_allocatable(raw)
            if parsed is not None:
                return cpu_memory(parsed)
    alloc = (node.get("status") or {}).get("allocatable")
    if not isinstance(alloc, dict):
        raise PredictionError("invalid node, for node.status.allocation is nil")
    return cpu_memory(alloc)


def _add(a: RL, b: RL) -> RL:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _min(a: RL, b: RL) -> RL:
    """util.MinResourceList: the keys of both."""
    return {k: min(v, b[k]) for k, v in a.items() if k in b}


def _max(a: RL, b: RL) -> RL:
    return {k: max(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k, 0)) for k in a.keys() | b.keys()}


def _sub_floor(a: RL, b: RL) -> RL:
    """quotav1.SubtractWithNonNegativeResult: the keys of `a`."""
    return {k: max(v - b.get(k, 0), 0) for k, v in a.items()}


def _terminating(pod: JSONMapping) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) or (pod.get("status") or {}).get(
        "phase") in _TERMINATED


@dataclass
class Outcome:
    """What the predictors said: the minPredictor's result and peak, and each predictor's figures for the
    koordlet_node_predicted_resource_* series (predictor → (reclaimable, peak))."""

    reclaimable: RL | None = None
    peak: RL | None = None
    error: str = ""
    warming_up: bool = False  # the error only says the models have not had a training round yet
    by_predictor: dict[str, tuple[RL | None, RL | None]] = field(default_factory=dict)


class ProdReclaimablePredictor:
    def __init__(self, server: PeakPredictServer, config: PredictionConfig, node: JSONMapping | None,
                 now: float) -> None:
        self.server, self.config, self.node, self.now = server, config, node, now
        self.ratio = (100 + config.safety_margin_percent) / 100
        self.uids: set[str] = set()
        self.pod_reclaimable: RL = {"cpu": 0, "memory": 0}
        self.pod_unreclaimable: RL = {"cpu": 0, "memory": 0}
        self.unpredicted: RL = {"cpu": 0, "memory": 0}
        self.priority_request: RL = {"cpu": 0, "memory": 0}

    def add_pod(self, pod: JSONMapping) -> None:
        """minPredictor.AddPod: the pod predictor, then the priority predictor unless the first failed (a repeated
        UID, or no prediction: its request then counts into the peak), as upstream."""
        if priority_class_with_default(pod) not in _RECLAIMABLE_FOR_PROD:
            return
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if uid in self.uids:
            return
        try:
            request = pod_request(pod)
        except QuantityError:  # a pod the API server would have refused: left out of the prediction
            return
        self.uids.add(uid)
        created = meta.get("creationTimestamp")
        try:
            started = parse_go_time(created) if created else 0.0
        except ValueError:
            started = 0.0
        if self.now - started <= self.config.cold_start_duration:
            self.unpredicted = _add(self.unpredicted, request)
        elif not _terminating(pod):
            got = self.server.percentiles(uid, "p95", "p98")
            if got is None:
                self.unpredicted = _add(self.unpredicted, request)
                return
            peak_cpu = int(int(got[0] * 1000) * self.ratio)
            peak_memory = int(int(got[1]) * self.ratio)
            self.pod_unreclaimable = _add(self.pod_unreclaimable, {"cpu": peak_cpu, "memory": peak_memory})
            self.pod_reclaimable["cpu"] += max(request["cpu"] - peak_cpu, 0)
            self.pod_reclaimable["memory"] += max(request["memory"] - peak_memory, 0)
        if not _terminating(pod):
            self.priority_request = _add(self.priority_request, request)

    def _priority_unreclaimable(self) -> RL:
        total = {"cpu": 0, "memory": 0}
        for item in (SYSTEM_ITEM, *_RECLAIMABLE_FOR_PROD):
            got = self.server.percentiles(node_item_uid(item), "p95", "p98")
            if got is None:
                what = "sys" if item == SYSTEM_ITEM else f"priority {item}"
                raise NotTrainedYet(f"failed to get prediction of {what}: not trained yet")
            total = _add(total, {"cpu": int(got[0] * 1000), "memory": int(got[1])})
        return {"cpu": int(total["cpu"] * self.ratio), "memory": int(total["memory"] * self.ratio)}

    def outcome(self) -> Outcome:
        """GetResult and GetPeak of the minPredictor: the result needs the node and the trained system and priority
        models, the peak only the latter."""
        out = Outcome()
        pod_peak = _add(self.pod_unreclaimable, self.unpredicted)
        try:
            unreclaimable: RL | None = self._priority_unreclaimable()
        except PredictionError as e:
            unreclaimable, out.error = None, f"failed to get predictor {PRIORITY_PREDICTOR} result, error: {e}"
            out.warming_up = isinstance(e, NotTrainedYet)
        try:
            alloc: RL | None = node_allocatable(self.node)
        except PredictionError as e:
            alloc, out.error = None, f"failed to get predictor {POD_PREDICTOR} result, error: {e}"
            out.warming_up = False
        pod_result = _min(_sub_floor(alloc, self.pod_unreclaimable), self.pod_reclaimable) if alloc else None
        out.by_predictor[POD_PREDICTOR] = (pod_result, pod_peak)
        if unreclaimable is None:
            return out
        priority_result = None
        if alloc is not None:
            reclaimable = _sub_floor(self.priority_request, unreclaimable)
            priority_result = _min(_sub_floor(alloc, unreclaimable), reclaimable)
        out.by_predictor[PRIORITY_PREDICTOR] = (priority_result, unreclaimable)
        out.peak = _max(pod_peak, unreclaimable)
        if pod_result is not None and priority_result is not None:
            out.reclaimable = _min(pod_result, priority_result)
        out.by_predictor[MIN_PREDICTOR] = (out.reclaimable, out.peak)
        return out


def predict(server: PeakPredictServer, config: PredictionConfig, node: JSONMapping | None,
            pods: Iterable[JSONMapping], now: float) -> Outcome:
    p = ProdReclaimablePredictor(server, config, node, now)
    for pod in pods:
        p.add_pod(pod)
    return p.outcome()


def resource_list(rl: RL) -> dict[str, str]:
    """A ResourceList as NodeMetric carries it: cpu as a milli quantity, memory in BinarySI."""
    out = {}
    if "cpu" in rl:
        out["cpu"] = format_milli(rl["cpu"])
    if "memory" in rl:
        out["memory"] = format_bytes(rl["memory"])
    return out
