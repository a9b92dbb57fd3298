"""The peak predict server: per pod, per node, per priority class and for the system, decaying histograms of
usage trained every interval from the metric cache, checkpointed to files so a restart resumes them.

Upstream: pkg/koordlet/prediction/predict_server.go (training, gcModels, doCheckpoint, restoreModels),
checkpoint.go (one JSON file per model, written through a .tmp rename), prediction.go (UIDs, p90 over the
training interval as each sample), config.go (defaults below).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from apis.core.errors import InvalidInput
from apis.core.objects import JSONMapping
from apis.extension.priority import PRIORITY_CLASSES, PRIORITY_NONE, priority_class_with_default
from koordlet.metriccache import MetricCache
from koordlet.prediction.histogram import DecayingHistogram, ExponentialBuckets, _go_time, parse_go_time

log = logging.getLogger(__name__)

NODE_UID = "__node__"
SYSTEM_ITEM = "sys"
TMP_SUFFIX = ".tmp"
KNOWN_PRIORITY_CLASSES = (*PRIORITY_CLASSES, PRIORITY_NONE)  # extension.KnownPriorityClasses
MIN_SAMPLE_WEIGHT = 0.1
EPSILON = 0.001 * MIN_SAMPLE_WEIGHT
GROWTH = 0.05
CPU_BUCKETS = ExponentialBuckets(1024, 0.025, 1 + GROWTH, EPSILON)  # 0.025 to 1024 cores, 5 % apart
MEMORY_BUCKETS = ExponentialBuckets(float(1 << 41), float(5 << 20), 1 + GROWTH, EPSILON)  # 5 MiB to 2 TiB
QUANTILES = {"p60": 0.6, "p90": 0.9, "p95": 0.95, "p98": 0.98, "max": 1.0}
GC_INTERVAL = 60.0
CHECKPOINT_TICK = 60.0


def node_item_uid(item: str) -> str:
    return f"__node-{item}__"


@dataclass(frozen=True)
class PredictionConfig:
    """The --prediction-* flags (pkg/koordlet/prediction/config.go); durations in seconds. An empty checkpoint
    path means <state-dir>/prediction-checkpoints (upstream: /prediction-checkpoints)."""

    checkpoint_filepath: str = ""
    cold_start_duration: float = 24 * 3600.0
    safety_margin_percent: int = 10
    memory_histogram_decay_halflife: float = 24 * 3600.0
    cpu_histogram_decay_halflife: float = 12 * 3600.0
    training_interval: float = 60.0
    model_expiration_duration: float = 30 * 60.0
    model_checkpoint_interval: float = 10 * 60.0
    model_checkpoint_max_per_step: int = 12

    def __post_init__(self) -> None:
        for flag, value in (("cpu-histogram-decay-halflife", self.cpu_histogram_decay_halflife),
                            ("memory-histogram-decay-halflife", self.memory_histogram_decay_halflife),
                            ("training-interval", self.training_interval)):
            if not value > 0:
                raise InvalidInput(f"--prediction-{flag} {value:g}s: must be positive")
        if self.safety_margin_percent < 0:
            raise InvalidInput(f"--prediction-safety-margin-percent {self.safety_margin_percent}: must be >= 0")


@dataclass
class Model:
    cpu: DecayingHistogram
    memory: DecayingHistogram
    last_updated: float = 0.0
    last_checkpointed: float = 0.0


@dataclass(frozen=True)
class TrainingPod:
    """What training needs of a pod: its UID and priority class."""

    uid: str
    priority: str


@dataclass
class Prediction:
    cpu: dict[str, float] = field(default_factory=dict)  # quantile → cores
    memory: dict[str, float] = field(default_factory=dict)  # quantile → bytes


class PeakPredictServer:
    def __init__(self, config: PredictionConfig, cache: MetricCache, checkpoint_dir: str) -> None:
        self.config = config
        self.cache = cache
        self.checkpoint_dir = checkpoint_dir
        self.models: dict[str, Model] = {}
        self.synced = False  # a training round completed (upstream HasSynced)
        self.restored = False

    def _new_model(self) -> Model:
        return Model(DecayingHistogram(CPU_BUCKETS, self.config.cpu_histogram_decay_halflife),
                     DecayingHistogram(MEMORY_BUCKETS, self.config.memory_histogram_decay_halflife))

    def _update(self, uid: str, cpu: float, memory: float, now: float) -> None:
        model = self.models.get(uid)
        if model is None:
            model = self.models[uid] = self._new_model()
        model.last_updated = now
        model.cpu.add(cpu, 1.0, now)
        model.memory.add(memory, 1.0, now)

    def _p90(self, kind: str, now: float, **labels: str) -> float | None:
        """The metric server's sample: p90 of the series over the last training interval."""
        end = int(now * 1000)
        agg = self.cache.aggregate(self.cache.key(kind, **labels), end - int(self.config.training_interval * 1000),
                                   end)
        return None if agg is None else agg.p90

    def train(self, pods: Iterable[TrainingPod], now: float) -> None:
        """One training round (predict_server.go training): every pod with samples, the node, each priority class
        (0 when it has no pod) and the system (node − all pods, ≥ 0)."""
        by_priority: dict[str, list[float]] = {}
        all_pods = [0.0, 0.0]
        any_pod = False
        for pod in pods:
            cpu = self._p90("pod_cpu_usage", now, pod_uid=pod.uid)
            memory = self._p90("pod_memory_usage", now, pod_uid=pod.uid)
            if cpu is None or memory is None:
                continue
            self._update(pod.uid, cpu, memory, now)
            sums = by_priority.setdefault(pod.priority, [0.0, 0.0])
            sums[0] += cpu
            sums[1] += memory
            all_pods[0] += cpu
            all_pods[1] += memory
            any_pod = True
        node_cpu = self._p90("node_cpu_usage", now)
        node_memory = self._p90("node_memory_usage", now)
        if node_cpu is not None and node_memory is not None:
            self._update(NODE_UID, node_cpu, node_memory, now)
        for priority in KNOWN_PRIORITY_CLASSES:
            cpu, memory = by_priority.get(priority, (0.0, 0.0))
            self._update(node_item_uid(priority), cpu, memory, now)
        # upstream: the node's values are 0 when its query failed; the system model is fed either way
        sys_cpu, sys_memory = node_cpu or 0.0, node_memory or 0.0
        if any_pod:
            sys_cpu, sys_memory = max(sys_cpu - all_pods[0], 0.0), max(sys_memory - all_pods[1], 0.0)
        self._update(node_item_uid(SYSTEM_ITEM), sys_cpu, sys_memory, now)
        self.synced = True

    def prediction(self, uid: str) -> Prediction | None:
        model = self.models.get(uid)
        if model is None:
            return None
        return Prediction({q: model.cpu.percentile(p) for q, p in QUANTILES.items()},
                          {q: model.memory.percentile(p) for q, p in QUANTILES.items()})

    def percentiles(self, uid: str, cpu_q: str, memory_q: str) -> tuple[float, float] | None:
        """One CPU and one memory quantile of a model (what the predictors read), or None if there is none."""
        model = self.models.get(uid)
        if model is None:
            return None
        return model.cpu.percentile(QUANTILES[cpu_q]), model.memory.percentile(QUANTILES[memory_q])

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def gc(self, now: float) -> list[str]:
        """Drop models not updated within model_expiration_duration, and their checkpoints."""
        if not self.synced:
            return []
        gone = [uid for uid, m in self.models.items() if now - m.last_updated > self.config.model_expiration_duration]
        for uid in gone:
            del self.models[uid]
            self._remove(uid)
        return gone

    def checkpoint(self, now: float) -> int:
        """Save up to model_checkpoint_max_per_step models whose last checkpoint is oldest and older than
        model_checkpoint_interval (doCheckpoint); returns how many were written."""
        if not self.synced:
            return 0
        written = 0
        for uid, model in sorted(self.models.items(), key=lambda kv: kv[1].last_checkpointed):
            if written >= self.config.model_checkpoint_max_per_step:
                break
            if now - model.last_checkpointed < self.config.model_checkpoint_interval:
                break
            doc = {"UID": uid, "CPU": model.cpu.checkpoint(), "Memory": model.memory.checkpoint(),
                   "LastUpdated": _go_time(int(now))}
            try:
                self._save(uid, doc)
            except OSError as e:
                log.warning("prediction checkpoint %s not saved: %s", uid, e)
            model.last_checkpointed = now
            written += 1
        return written

    def _save(self, uid: str, doc: JSONMapping) -> None:
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        path = os.path.join(self.checkpoint_dir, uid)
        with open(path + TMP_SUFFIX, "w", encoding="utf-8") as f:
            json.dump(doc, f)
            f.write("\n")
        os.replace(path + TMP_SUFFIX, path)

    def _remove(self, uid: str) -> None:
        try:
            os.remove(os.path.join(self.checkpoint_dir, uid))
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("prediction checkpoint %s not removed: %s", uid, e)

    def restore(self, pod_uids: Iterable[str]) -> int:
        """Load the checkpoints of known models (the node, its items, the pods listed now), removing the others and
        leftover .tmp files (restoreModels + Run); returns how many models were restored."""
        self.restored = True
        try:
            names = sorted(os.listdir(self.checkpoint_dir))
        except FileNotFoundError:
            return 0
        except OSError as e:
            log.warning("prediction checkpoints in %s not read: %s", self.checkpoint_dir, e)
            return 0
        known = {NODE_UID, node_item_uid(SYSTEM_ITEM), *(node_item_uid(p) for p in KNOWN_PRIORITY_CLASSES),
                 *pod_uids}
        restored = 0
        for name in names:
            path = os.path.join(self.checkpoint_dir, name)
            if not os.path.isfile(path):
                continue
            if name.endswith(TMP_SUFFIX):
                self._remove(name)
                continue
            if name not in known:
                log.info("prediction checkpoint %s of no known pod removed", name)
                self._remove(name)
                continue
            model = self._new_model()
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
                model.last_updated = parse_go_time(doc.get("LastUpdated", "0001-01-01T00:00:00Z"))
                model.cpu.load(doc.get("CPU") or {})
                model.memory.load(doc.get("Memory") or {})
            except (OSError, ValueError, TypeError, AttributeError) as e:
                log.warning("prediction checkpoint %s unreadable, removed: %s", name, e)
                self._remove(name)
                continue
            self.models[name] = model
            restored += 1
        if restored:
            log.info("prediction: %d models restored from %s", restored, self.checkpoint_dir)
        return restored


def training_pods(raw_pods: Iterable[JSONMapping]) -> list[TrainingPod]:
    out = []
    for pod in raw_pods:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if uid:
            out.append(TrainingPod(uid, priority_class_with_default(pod)))
    return out
