"""Writes this node's NodeMetric status to the API server as upstream koordlet does, and reads its spec."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from apis.client.kubeapi import DEFAULT_BACKOFF, Backoff, KubeClient, TokenBucket, Unreachable, retry_on_conflict
from apis.core.errors import ApiError, Conflict, KoordletError, NotFound
from apis.core.objects import JSON

log = logging.getLogger(__name__)


NODEMETRICS_PATH = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"

# states_nodemetric.go statusUpdateQPS / statusUpdateBurst
STATUS_UPDATE_QPS = 0.1
STATUS_UPDATE_BURST = 2

# Failure reasons counted in WriterStats.failures.
REASON_NOT_FOUND = "not_found"
REASON_RATE_LIMITED = "rate_limited"  # our own update budget (STATUS_UPDATE_QPS) is spent
REASON_TOO_MANY_REQUESTS = "too_many_requests"  # the API server answered 429
REASON_CONFLICT = "conflict"
REASON_SERVER_ERROR = "server_error"
REASON_CLIENT_ERROR = "client_error"
REASON_UNREACHABLE = "unreachable"
REASON_INVALID = "invalid"
# Failures a later attempt may get past (the others need the object, the permissions or the status fixed).
RETRIABLE = frozenset({REASON_RATE_LIMITED, REASON_TOO_MANY_REQUESTS, REASON_CONFLICT, REASON_SERVER_ERROR,
                       REASON_UNREACHABLE})


@dataclass
class WriterStats:
    """Counters for the caller to export; `last_success` is a Unix timestamp."""

    successes: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    last_success: float | None = None
    last_error: str | None = None

    def fail(self, reason: str, error: str) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_error = error


_TOO_MANY_REQUESTS = 429


class _RateLimited(KoordletError):
    pass


class NodeMetricApiWriter:
    """Updates `nodemetrics/<node>/status` only: slo-controller creates the object, the agent never does."""

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        *,
        qps: float = STATUS_UPDATE_QPS,
        burst: int = STATUS_UPDATE_BURST,
        backoff: Backoff = DEFAULT_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self.node_name = node_name
        self.path = f"{NODEMETRICS_PATH}/{node_name}"
        self._limiter = TokenBucket(qps, burst, clock=clock)
        self._backoff = backoff
        self._wall_clock = wall_clock
        self._sleep = sleep
        self._missing: bool | None = None  # None until the first answer
        self.stats = WriterStats()
        self.last_reason: str | None = None  # of the last write_status, None when it succeeded
        self.retry_after: float | None = None  # the last failure's Retry-After

    def _note_presence(self, missing: bool) -> None:
        if missing == self._missing:
            return
        if missing:
            log.info("NodeMetric %s not found (slo-controller creates it); skipping reports", self.node_name)
        elif self._missing is not None:
            log.info("NodeMetric %s exists now, reporting resumes", self.node_name)
        self._missing = missing

    def read_spec(self) -> object:
        """The NodeMetric's spec (report interval, aggregate durations) as the server holds it ({} when it has none:
        its shape is checked by the caller, koordlet.cluster), None if the object does not exist.

        Other API failures raise ApiError so the caller can keep the spec it already has.
        """
        try:
            obj = self._client.get(self.path)
        except NotFound:
            self._note_presence(True)
            return None
        self._note_presence(False)
        spec = obj.get("spec")
        return {} if spec is None else spec

    def write_status(self, status: JSON) -> bool:
        """Replace the NodeMetric's status; True on success. Never raises: failures are logged and counted."""
        # Upstream takes a limiter token per update attempt (states_nodemetric.go statusUpdater); checking
        # here as well spares the API server a GET for an update that would be dropped anyway.
        self.last_reason, self.retry_after = None, None
        if self._limiter.available() < 1.0:
            return self._dropped()

        def attempt() -> None:
            obj = self._client.get(self.path)  # re-read on every attempt for a fresh resourceVersion
            if not self._limiter.try_acquire():
                raise _RateLimited()
            updated = dict(obj)
            updated["status"] = status
            self._client.put(f"{self.path}/status", updated)

        try:
            retry_on_conflict(attempt, backoff=self._backoff, sleep=self._sleep)
        except NotFound:
            self._note_presence(True)
            self.stats.fail(REASON_NOT_FOUND, f"NodeMetric {self.node_name} not found")
            self.last_reason = REASON_NOT_FOUND
            return False
        except _RateLimited:
            return self._dropped()
        except Conflict as e:
            return self._failed(REASON_CONFLICT, e)
        except Unreachable as e:
            return self._failed(REASON_UNREACHABLE, e)
        except ApiError as e:
            self.retry_after = e.retry_after
            if e.status == _TOO_MANY_REQUESTS:
                return self._failed(REASON_TOO_MANY_REQUESTS, e)
            return self._failed(REASON_SERVER_ERROR if e.status >= 500 else REASON_CLIENT_ERROR, e)
        except KoordletError as e:
            return self._failed(REASON_INVALID, e)
        self._note_presence(False)
        self.stats.successes += 1
        self.stats.last_success = self._wall_clock()
        log.debug("NodeMetric %s status updated", self.node_name)
        return True

    def retry_in(self) -> float | None:
        """After a failed write_status: the soonest a retry may go (the server's Retry-After, a token of our update
        budget), or None when retrying cannot help (no NodeMetric, forbidden, an invalid status)."""
        if self.last_reason not in RETRIABLE:
            return None
        soonest = self.retry_after or 0.0
        missing = 1.0 - self._limiter.available()
        if missing > 0 and self._limiter.qps > 0:
            soonest = max(soonest, missing / self._limiter.qps + 0.01)  # a whole token, not 0.999 of one
        return soonest

    def _dropped(self) -> bool:
        message = f"updating status is limited qps={self._limiter.qps} burst={self._limiter.burst}"
        log.warning("NodeMetric %s: %s, update dropped", self.node_name, message)
        self.stats.fail(REASON_RATE_LIMITED, message)
        self.last_reason = REASON_RATE_LIMITED
        return False

    def _failed(self, reason: str, error: Exception) -> bool:
        log.warning("update NodeMetric %s status failed (%s): %s", self.node_name, reason, error)
        self.stats.fail(reason, str(error))
        self.last_reason = reason
        return False
