"""Create-or-update of one cluster-scoped object the agent owns, as upstream's reporters do it: GET, compare,
Create when missing or Update when changed, retried on conflict and on 429 (RetryOnConflictOrTooManyRequests)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from apis.client.kubeapi import KubeClient, retry_on_conflict
from apis.core.errors import ApiError, NotFound
from apis.core.objects import JSON

log = logging.getLogger(__name__)

_TOO_MANY_REQUESTS = 429


class ObjectWriter:
    """`write(desired)`: `desired(existing or None)` gives the object to store, or None when what the API holds is
    already right. Counts `writes`; keeps the last error. Never raises."""

    def __init__(self, client: KubeClient, collection: str, name: str, kind: str, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.collection = collection
        self.path = f"{collection}/{name}"
        self.label = f"{kind} {name}"
        self._sleep = sleep
        self.writes = 0
        self.last_error = ""

    def write(self, desired: Callable[[JSON | None], JSON | None]) -> bool:
        """True when the API holds our view afterwards (written now or already equal)."""
        def attempt() -> bool:
            try:
                existing: JSON | None = self.client.get(self.path)
            except NotFound:
                existing = None
            new = desired(existing)
            if new is None:
                return True
            if existing is None:
                self.client.post(self.collection, new)  # a 409 (created meanwhile) retries as an update
            else:
                self.client.put(self.path, new)
            self.writes += 1
            return True

        for _ in range(3):  # 429: back off and retry a few times, as upstream
            try:
                return retry_on_conflict(attempt, sleep=self._sleep)
            except ApiError as e:
                self.last_error = str(e)
                if e.status == _TOO_MANY_REQUESTS:
                    self._sleep(1.0)
                    continue
                log.warning("%s not written: %s", self.label, e)
                return False
        log.warning("%s not written: API keeps answering 429", self.label)
        return False
