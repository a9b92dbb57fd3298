"""koord-descheduler's Prometheus metrics in upstream's names (pkg/descheduler/metrics, restated from
kubernetes-sigs/descheduler): the counter `descheduler_pods_evicted{result,strategy,namespace,node}`.

`result` is `success`, `error` (the API refused or failed the eviction, a PodDisruptionBudget's 429 among them) or
the per-round cap that refused it (`maximum number of pods per node reached`, ...); `strategy` the plugin that asked
(LowNodeLoad). component-base exposes a counter under its own name, without the `_total` that prometheus_client
would add, so the text is written here (the exposition format 0.0.4).
"""

from __future__ import annotations

import threading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PODS_EVICTED = "descheduler_pods_evicted"
SUCCESS, ERROR = "success", "error"
_LABELS = ("result", "strategy", "namespace", "node")
_HELP = ("Number of evicted pods, by the result, by the strategy, by the namespace, by the node name. 'error' result "
         "means a pod could not be evicted")


class DeschedulerMetrics:
    """One per process (or per test); thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.evicted: dict[tuple[str, str, str, str], int] = {}

    def pod_evicted(self, result: str, strategy: str, namespace: str, node: str) -> None:
        with self.lock:
            k = (result, strategy, namespace, node)
            self.evicted[k] = self.evicted.get(k, 0) + 1

    def count(self, result: str, strategy: str | None = None) -> int:
        """The sum over the series with this result (and strategy)."""
        with self.lock:
            return sum(v for k, v in self.evicted.items() if k[0] == result and strategy in (None, k[1]))

    def exposition(self) -> bytes:
        lines = [f"# HELP {PODS_EVICTED} [ALPHA] {_HELP}", f"# TYPE {PODS_EVICTED} counter"]
        with self.lock:
            series = sorted(self.evicted.items())
        for labels, value in series:
            text = ",".join(f'{name}="{_escape(v)}"' for name, v in sorted(zip(_LABELS, labels, strict=True)))
            lines.append(f"{PODS_EVICTED}{{{text}}} {value}")
        return ("\n".join(lines) + "\n").encode()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
