"""`simulate`: give nodes the extended resources koord-manager would have written, where their allocatable lacks them.

A cluster directory taken from a live cluster already has them; one written by hand (or from a cluster without
koord-manager) gets them computed from its Device CRs, NodeMetrics and `slo-controller-config` ConfigMap, never
overriding a value the directory gives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from scheduler.cluster import Cluster, quantity_value
from scheduler.noderesource.apply import desired, format_value
from scheduler.noderesource.calculate import _rfc3339, calculate
from scheduler.noderesource.strategy import (
    CONFIG_NAME,
    CONFIG_NAMESPACE,
    ColocationConfig,
    ConfigError,
    parse_config_map,
)

log = logging.getLogger(__name__)


def config_of(objects: Iterable[JSON]) -> ColocationConfig:
    """The colocation config of the `koordinator-system/slo-controller-config` ConfigMap among the objects; a bad
    one is logged and the defaults are used."""
    for o in objects:
        meta = o.get("metadata") or {}
        if o.get("kind") == "ConfigMap" and meta.get("name") == CONFIG_NAME and meta.get(
                "namespace", CONFIG_NAMESPACE) == CONFIG_NAMESPACE:
            try:
                return parse_config_map(o)
            except ConfigError as e:
                log.warning("simulate: %s; using the default colocation config", e)
    return ColocationConfig()


def fill_missing(cluster: Cluster, config: ColocationConfig, *, sync_gpu_shared: bool = False) -> dict[str, list[str]]:
    """Add each computed resource a node's allocatable lacks; returns node → resources added. A NodeMetric counts
    as current (the snapshot is evaluated at its own updateTime, so an old directory is not "degraded")."""
    added: dict[str, list[str]] = {}
    for name, info in cluster.nodes.items():
        status = info.obj.setdefault("status", {})
        status.setdefault("capacity", dict(status.get("allocatable") or {}))
        updated = _rfc3339(((info.nodemetric or {}).get("status") or {}).get("updateTime"))
        now = updated if updated is not None else time.time()
        nr = calculate(config.for_node(info.obj), config.enabled_for(info.obj), info.obj, info.pods.values(),
                       info.nodemetric, info.device, now, sync_gpu_shared=sync_gpu_shared)
        missing = {k: v for k, v in desired(nr).items() if v is not None and k not in info.allocatable}
        if not missing:
            continue
        allocatable = dict(info.allocatable)
        for res, value in sorted(missing.items()):
            text = format_value(res, value)
            try:
                allocatable[res] = quantity_value(res, text)
            except InvalidInput:  # pragma: no cover - format_value always writes a quantity
                continue
            status.setdefault("allocatable", {})[res] = text
            status["capacity"].setdefault(res, text)
            added.setdefault(name, []).append(res)
        info.allocatable = allocatable
    if added:
        names = sorted({r for rs in added.values() for r in rs})
        log.info("simulate: node resources computed as koord-manager would write them on %d node(s): %s",
                 len(added), ", ".join(names))
    return added
