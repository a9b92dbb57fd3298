"""The one exception tree both programs raise, and the record of one skipped object that becomes an Event.

Every boundary (pod, file, device, API call) catches these exceptions and moves on; what it skipped because of bad
input is a PlanError, which the agent's planners return and koordlet.events reports (so neither imports the other).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class KoordletError(Exception):
    """Base of every error the agent and koord-sched raise on purpose."""


class HostReadError(KoordletError):
    """A host file (cgroup, /proc, /sys) could not be read or parsed."""


class UnsupportedKernel(KoordletError):
    """The kernel lacks an interface a feature needs (a missing cgroup file, no PSI, ...)."""


class InvalidInput(KoordletError):
    """A pod manifest, annotation, NodeSLO or CR field is malformed."""


class QuantityError(InvalidInput):
    """A Kubernetes quantity (or the resource list holding it) cannot be read: the one bad-quantity error. The
    parsers and pod_requests/pod_limits raise it; each caller decides whether to skip the object or refuse it."""


class ApiError(KoordletError):
    """The Kubernetes API (or kubelet) answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after: float | None = None  # the answer's Retry-After, in seconds, when it had one


class NotFound(ApiError):
    """HTTP 404 from the API server."""

    def __init__(self, message: str) -> None:
        super().__init__(404, message)


class Conflict(ApiError):
    """HTTP 409 from the API server (stale resourceVersion)."""

    def __init__(self, message: str) -> None:
        super().__init__(409, message)


@dataclass(frozen=True)
class PlanError:
    """Bad input for one object: the object is skipped and the error reported (Event in a cluster)."""

    kind: str  # Pod, NodeSLO, Node
    name: str  # namespace/name for pods
    field: str  # e.g. annotations[node.koordinator.sh/resctrl].llc.schemata.range
    message: str
    reason: str = "InvalidQoSConfig"
    uid: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"object": f"{self.kind}/{self.name}", "field": self.field, "message": self.message,
                "reason": self.reason}
