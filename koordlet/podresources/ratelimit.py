"""A token bucket: the limiter kubelet puts in front of its PodResources server, which the proxy applies too."""

from __future__ import annotations

import time
from collections.abc import Callable

# kubernetes/kubernetes:pkg/kubelet/apis/podresources/constants.go (DefaultQPS, DefaultBurstTokens)
KUBELET_QPS = 100.0
KUBELET_BURST = 10


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up (golang.org/x/time/rate semantics for Allow); qps <= 0 lets
    everything through."""

    def __init__(self, qps: float = KUBELET_QPS, burst: int = KUBELET_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self.clock = clock
        self._tokens = float(self.burst)
        self._at = clock()

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0

    def allow(self) -> bool:
        if self.qps <= 0:
            return True
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
