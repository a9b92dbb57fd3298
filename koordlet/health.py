"""The agent's own health: log-once for bad input and missing kernel features, read/skip counters, loop times."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger("koordlet")

_MAX_ONCE_KEYS = 10000  # bound the memory of "already logged" keys; past it, old keys may log again


@dataclass
class Health:
    """Counters the exporter turns into metrics; every boundary that skips an item reports here."""

    cgroup_reads: int = 0
    cgroup_read_errors: Counter[str] = field(default_factory=Counter)
    cgroup_writes: int = 0
    cgroup_write_errors: Counter[str] = field(default_factory=Counter)
    resource_writes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (file name, result)
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, reason)
    capabilities: dict[str, bool] = field(default_factory=dict)
    settings_without_effect: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, name) -> why
    loop_last_success: dict[str, float] = field(default_factory=dict)
    report_last_success: float = 0.0
    report_failures: Counter[str] = field(default_factory=Counter)
    _once: dict[str, None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def once(self, key: str, level: int, msg: str, *args: object) -> bool:
        """Log `msg` the first time `key` is seen; later calls are silent. True if it logged."""
        with self._lock:
            if key in self._once:
                return False
            if len(self._once) >= _MAX_ONCE_KEYS:
                self._once.pop(next(iter(self._once)))
            self._once[key] = None
        log.log(level, msg, *args)
        return True

    def forget(self, key: str) -> None:
        """Allow `key` to log again (e.g. a pod's cgroup came back, then vanished again)."""
        with self._lock:
            self._once.pop(key, None)

    def skip(self, kind: str, reason: str, obj: str, detail: str) -> bool:
        """Count a skipped item and log it once per (kind, reason, object); True when it logged (the first time)."""
        self.skipped[(kind, reason)] += 1
        return self.once(self._skip_key(kind, reason, obj), logging.WARNING, "skipping %s %s (%s): %s", kind, obj,
                         reason, detail)

    def expect(self, kind: str, reason: str, obj: str, why: str) -> None:
        """A skip that is expected for this object (e.g. an example pod without cgroups): it is still counted,
        but logged only at debug level, once, now."""
        self.once(self._skip_key(kind, reason, obj), logging.DEBUG, "%s %s (%s) expected: %s", kind, obj, reason, why)

    def recovered(self, kind: str, reason: str, obj: str) -> None:
        """The item works again: a later failure of the same kind is logged again."""
        self.forget(self._skip_key(kind, reason, obj))

    @staticmethod
    def _skip_key(kind: str, reason: str, obj: str) -> str:
        return f"skip/{kind}/{reason}/{obj}"

    def without_effect(self, kind: str, name: str, text: str) -> None:
        """A flag or feature gate the user set whose feature this agent lacks: logged once, kept for the metric."""
        self.settings_without_effect[(kind, name)] = text
        self.once(f"absent/{kind}/{name}", logging.WARNING if kind == "feature-gate" else logging.INFO, "%s", text)

    def capability(self, name: str, supported: bool, detail: str = "", *, fallback: bool = False) -> None:
        """Record a kernel capability; a missing one is logged once, never per loop: as a warning, or as an info
        line when the agent has a fallback for it (mainline kernels lack Anolis' group identity and v1 PSI)."""
        self.capabilities[name] = supported
        if not supported:
            level = logging.INFO if fallback else logging.WARNING
            self.once(f"cap/{name}", level, "kernel capability %s unavailable%s", name, f": {detail}" if detail else "")

    def loop_ok(self, loop: str) -> None:
        self.loop_last_success[loop] = time.time()
