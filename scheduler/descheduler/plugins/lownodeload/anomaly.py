"""The node anomaly detector and its expiring cache (upstream pkg/descheduler/utils/anomaly/basic_detector.go,
counter.go; the go-cache of low_node_load.go). Time is passed in (the round's clock), never read."""

from __future__ import annotations

from dataclasses import dataclass

OK = "OK"
ANOMALY = "Anomaly"
DEFAULT_TIMEOUT = 60.0


@dataclass
class Counter:
    total_detects: int = 0
    total_normalities: int = 0
    total_abnormalities: int = 0
    consecutive_normalities: int = 0
    consecutive_abnormalities: int = 0


class BasicDetector:
    """OK → Anomaly once more than `abnormalities` consecutive abnormal marks; Anomaly → OK once more than
    `normalities` consecutive normal marks, or `timeout` seconds after entering it. Counters clear on every state
    change."""

    def __init__(self, name: str, timeout: float | None, abnormalities: int, normalities: int, now: float) -> None:
        self.name = name
        self.timeout = timeout if timeout is not None and timeout > 0 else DEFAULT_TIMEOUT
        self.abnormalities = abnormalities
        self.normalities = normalities
        self.state = OK
        self.counter = Counter()
        self.expiration: float | None = None

    def current(self, now: float) -> str:
        if self.state == ANOMALY and (
                (self.expiration is not None and self.expiration < now) or self._normal()):
            self._set(OK, now)
        return self.state

    def mark(self, normal: bool, now: float) -> str:
        state = self.current(now)
        c = self.counter
        c.total_detects += 1
        if normal:
            c.total_normalities += 1
            c.consecutive_normalities += 1
            c.consecutive_abnormalities = 0
            if state == ANOMALY and self._normal():
                self._set(OK, now)
        else:
            c.total_abnormalities += 1
            c.consecutive_abnormalities += 1
            c.consecutive_normalities = 0
            if state == OK and c.consecutive_abnormalities > self.abnormalities:
                self._set(ANOMALY, now)
        return self.current(now)

    def reset(self, now: float) -> None:
        self._set(OK, now)

    def _normal(self) -> bool:
        return self.counter.consecutive_normalities > self.normalities

    def _set(self, state: str, now: float) -> None:
        if state == self.state:
            return
        self.state = state
        self.counter = Counter()
        self.expiration = now + self.timeout if state == ANOMALY else None


class DetectorCache:
    """Detectors by node name; an entry expires `ttl` seconds after it was last set (0: never). Reads do not
    extend it."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._items: dict[str, tuple[BasicDetector, float | None]] = {}

    def get(self, name: str, now: float) -> BasicDetector | None:
        item = self._items.get(name)
        if item is None:
            return None
        detector, expires = item
        if expires is not None and now > expires:
            del self._items[name]
            return None
        return detector

    def set(self, name: str, detector: BasicDetector, now: float) -> None:
        self._items[name] = (detector, now + self.ttl if self.ttl > 0 else None)
