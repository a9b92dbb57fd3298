"""Writes the node's NodeResourceTopology to the API server: create when missing, update only when it changed.

Upstream: states_noderesourcetopology.go reportNodeTopology (createNodeTopoIfNotExist, then Update with
RetryOnConflictOrTooManyRequests when isChanged). Where upstream creates a bare object and updates it on the same
round, we create it with its content at once (one write instead of two).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from koordlet.errors import ApiError, NotFound
from koordlet.kubeapi import KubeClient, retry_on_conflict
from koordlet.reporters.nrt import API_VERSION, PLURAL, TopologyStatus, changed, new_object, updated

log = logging.getLogger(__name__)

NRT_PATH = f"/apis/{API_VERSION}/{PLURAL}"
_TOO_MANY_REQUESTS = 429


class NRTApiWriter:
    def __init__(self, client: KubeClient, node_name: str, *, sleep: Any = time.sleep) -> None:
        self.client = client
        self.node_name = node_name
        self.path = f"{NRT_PATH}/{node_name}"
        self._sleep = sleep
        self.writes = 0
        self.last_error = ""
        self.last_reason = ""

    def report(self, status: TopologyStatus, node_uid: str | None) -> bool:
        """True when the API holds our view afterwards (written now or already equal). Never raises."""
        def attempt() -> bool:
            try:
                existing: dict[str, Any] | None = self.client.get(self.path)
            except NotFound:
                existing = None
            reason = changed(existing, status)
            if not reason:
                return True
            self.last_reason = reason
            if existing is None:
                self.client.post(NRT_PATH, updated(new_object(self.node_name, node_uid), status))
            else:
                self.client.put(self.path, updated(existing, status))
            self.writes += 1
            log.debug("NodeResourceTopology %s written: %s", self.node_name, reason)
            return True

        for _ in range(3):
            try:
                return retry_on_conflict(attempt, sleep=self._sleep)
            except ApiError as e:
                self.last_error = str(e)
                if e.status == _TOO_MANY_REQUESTS:
                    self._sleep(1.0)
                    continue
                log.warning("NodeResourceTopology %s not written: %s", self.node_name, e)
                return False
        log.warning("NodeResourceTopology %s not written: API keeps answering 429", self.node_name)
        return False
