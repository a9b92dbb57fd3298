"""Writes the node's `Device` CR to the API server: create when missing, update only when it changed.

Upstream: states_device_linux.go (updateDevice: GET, compare, Update with retry on conflict and 429; Create on
NotFound). The object itself comes from koordlet.devices.report.
"""

from __future__ import annotations

import time
from typing import Any

from apis.client.kubeapi import KubeClient
from apis.core.objects import JSON
from koordlet.devices.model import DeviceSet
from koordlet.devices.report import PLURAL, changed, desired
from koordlet.reporters.apiwrite import ObjectWriter

DEVICES_PATH = "/apis/scheduling.koordinator.sh/v1alpha1/" + PLURAL


class DeviceApiWriter(ObjectWriter):
    def __init__(self, client: KubeClient, node_name: str, *, sleep: Any = time.sleep) -> None:
        super().__init__(client, DEVICES_PATH, node_name, "Device", sleep=sleep)
        self.node_name = node_name

    def report(self, composed: DeviceSet, node_uid: str | None) -> bool:
        """True when the API holds our view afterwards (written now or already equal). Never raises."""
        def want(existing: JSON | None) -> JSON | None:
            new = desired(self.node_name, node_uid, composed, existing)
            return new if changed(existing, new) else None

        return self.write(want)
