"""Writes the node's NodeResourceTopology to the API server: create when missing, update only when it changed.

Upstream: states_noderesourcetopology.go reportNodeTopology (createNodeTopoIfNotExist, then Update with
RetryOnConflictOrTooManyRequests when isChanged). Where upstream creates a bare object and updates it on the same
round, we create it with its content at once (one write instead of two).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from apis.client.kubeapi import KubeClient
from apis.core.objects import JSON
from koordlet.reporters.apiwrite import ObjectWriter
from koordlet.reporters.nrt import API_VERSION, PLURAL, TopologyStatus, changed, new_object, updated

log = logging.getLogger(__name__)

NRT_PATH = f"/apis/{API_VERSION}/{PLURAL}"


class NRTApiWriter(ObjectWriter):
    def __init__(self, client: KubeClient, node_name: str, *, sleep: Any = time.sleep) -> None:
        super().__init__(client, NRT_PATH, node_name, "NodeResourceTopology", sleep=sleep)
        self.node_name = node_name
        self.last_reason = ""

    def report(self, status: TopologyStatus, node_uid: str | None) -> bool:
        """True when the API holds our view afterwards (written now or already equal). Never raises."""
        def want(existing: JSON | None) -> JSON | None:
            reason = changed(existing, status)
            if not reason:
                return None
            self.last_reason = reason
            log.debug("NodeResourceTopology %s to write: %s", self.node_name, reason)
            return updated(new_object(self.node_name, node_uid) if existing is None else existing, status)

        return self.write(want)
