"""Writes the node's `Device` CR to the API server: create when missing, update only when it changed.

Upstream: states_device_linux.go (updateDevice: GET, compare, Update with retry on conflict and 429; Create on
NotFound). The object itself comes from koordlet.devices.report.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from koordlet.devices.model import DeviceSet
from koordlet.devices.report import PLURAL, changed, desired
from koordlet.errors import ApiError, NotFound
from koordlet.kubeapi import KubeClient, retry_on_conflict

log = logging.getLogger(__name__)

DEVICES_PATH = "/apis/scheduling.koordinator.sh/v1alpha1/" + PLURAL
_TOO_MANY_REQUESTS = 429


class DeviceApiWriter:
    def __init__(self, client: KubeClient, node_name: str, *, sleep: Any = time.sleep) -> None:
        self.client = client
        self.node_name = node_name
        self.path = f"{DEVICES_PATH}/{node_name}"
        self._sleep = sleep
        self.writes = 0
        self.last_error = ""

    def report(self, composed: DeviceSet, node_uid: str | None) -> bool:
        """True when the API holds our view afterwards (written now or already equal). Never raises."""
        def attempt() -> bool:
            try:
                existing: dict[str, Any] | None = self.client.get(self.path)
            except NotFound:
                existing = None
            new = desired(self.node_name, node_uid, composed, existing)
            if not changed(existing, new):
                return True
            if existing is None:
                self.client.post(DEVICES_PATH, new)  # a 409 (created meanwhile) retries as an update
            else:
                self.client.put(self.path, new)
            self.writes += 1
            return True

        for _ in range(3):  # 429: back off and retry a few times (upstream retries on TooManyRequests too)
            try:
                return retry_on_conflict(attempt, sleep=self._sleep)
            except ApiError as e:
                self.last_error = str(e)
                if e.status == _TOO_MANY_REQUESTS:
                    self._sleep(1.0)
                    continue
                log.warning("Device %s not written: %s", self.node_name, e)
                return False
        log.warning("Device %s not written: API keeps answering 429", self.node_name)
        return False
