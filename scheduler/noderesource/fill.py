"""`simulate`: give nodes the extended resources koord-manager would have written, where their allocatable lacks them.

A cluster directory taken from a live cluster already has them; one written by hand (or from a cluster without
koord-manager) gets them computed from its Device CRs, NodeMetrics and `slo-controller-config` ConfigMap, never
overriding a value the directory gives. Likewise the resource amplification ratio annotation of a node that has
none (from `resource-amplification-config` and the node's CPU normalization ratio), its allocatable then read again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.extension.node import ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO
from scheduler.cluster import Cluster, node_allocatable, quantity_value
from scheduler.noderesource.amplification import desired_annotation, parse_amplification_config
from scheduler.noderesource.apply import desired, format_value
from scheduler.noderesource.calculate import calculate, rfc3339_seconds
from scheduler.noderesource.strategy import (
    CONFIG_NAME,
    CONFIG_NAMESPACE,
    ColocationConfig,
    ConfigError,
    parse_config_map,
)

log = logging.getLogger(__name__)


def _config_map(objects: Iterable[JSON]) -> JSON | None:
    for o in objects:
        meta = o.get("metadata") or {}
        if o.get("kind") == "ConfigMap" and meta.get("name") == CONFIG_NAME and meta.get(
                "namespace", CONFIG_NAMESPACE) == CONFIG_NAMESPACE:
            return o
    return None


def config_of(objects: Iterable[JSON]) -> ColocationConfig:
    """The colocation config of the `koordinator-system/slo-controller-config` ConfigMap among the objects; a bad
    one is logged and the defaults are used."""
    cm = _config_map(objects)
    if cm is not None:
        try:
            return parse_config_map(cm)
        except ConfigError as e:
            log.warning("simulate: %s; using the default colocation config", e)
    return ColocationConfig()


def fill_amplification(cluster: Cluster, objects: Iterable[JSON]) -> list[str]:
    """Give each node without a `resource-amplification-ratio` annotation the one koord-manager would write (its
    allocatable is read again, amplified); returns the nodes given one. A bad config or ratio is logged."""
    try:
        config = parse_amplification_config(_config_map(objects))
    except ConfigError as e:
        log.warning("simulate: %s; no resource amplification computed", e)
        return []
    given: list[str] = []
    for name, info in cluster.nodes.items():
        if ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO in ((info.obj.get("metadata") or {}).get("annotations") or {}):
            continue
        try:
            value = desired_annotation(config, info.obj)
        except ValueError as e:
            log.warning("simulate: node %s: resource amplification not calculated: %s", name, e)
            continue
        if value is None:
            continue
        info.obj.setdefault("metadata", {}).setdefault("annotations", {})[
            ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO] = value
        info.allocatable = node_allocatable(info.obj)
        given.append(name)
    if given:
        log.info("simulate: resource amplification ratios computed as koord-manager would write them on %d node(s)",
                 len(given))
    return given


def fill_missing(cluster: Cluster, config: ColocationConfig, *, sync_gpu_shared: bool = False) -> dict[str, list[str]]:
    """Add each computed resource a node's allocatable lacks; returns node → resources added. A NodeMetric counts
    as current (the snapshot is evaluated at its own updateTime, so an old directory is not "degraded")."""
    added: dict[str, list[str]] = {}
    for name, info in cluster.nodes.items():
        status = info.obj.setdefault("status", {})
        status.setdefault("capacity", dict(status.get("allocatable") or {}))
        updated = rfc3339_seconds(((info.nodemetric or {}).get("status") or {}).get("updateTime"))
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
