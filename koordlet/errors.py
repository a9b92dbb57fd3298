"""The agent's small exception hierarchy: every boundary (pod, file, device, API call) catches these and moves on."""


class KoordletError(Exception):
    """Base of every error the agent raises on purpose."""


class HostReadError(KoordletError):
    """A host file (cgroup, /proc, /sys) could not be read or parsed."""


class UnsupportedKernel(KoordletError):
    """The kernel lacks an interface a feature needs (a missing cgroup file, no PSI, ...)."""


class InvalidInput(KoordletError):
    """A pod manifest, annotation, NodeSLO or CR field is malformed."""


class ApiError(KoordletError):
    """The Kubernetes API (or kubelet) answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class NotFound(ApiError):
    """HTTP 404 from the API server."""

    def __init__(self, message: str) -> None:
        super().__init__(404, message)


class Conflict(ApiError):
    """HTTP 409 from the API server (stale resourceVersion)."""

    def __init__(self, message: str) -> None:
        super().__init__(409, message)
