"""KubeSchedulerConfiguration-style YAML: which Koordinator plugins run, with which args and score weights."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from koordlet.errors import InvalidInput
from scheduler.elasticquota.plugin import ElasticQuota, ElasticQuotaArgs
from scheduler.framework import FilterPlugin, ScorePlugin
from scheduler.gang.model import DEFAULT_TIMEOUT_SECONDS, parse_go_duration
from scheduler.plugins.fitplus import FitPlusArgs, NodeResourcesFitPlus
from scheduler.plugins.loadaware import LoadAware, LoadAwareArgs
from scheduler.plugins.scarce import ScarceArgs, ScarceResourceAvoidance

log = logging.getLogger(__name__)

LOADAWARE, FITPLUS, SCARCE, DEVICESHARE = ("LoadAwareScheduling", "NodeResourcesFitPlus", "ScarceResourceAvoidance",
                                           "DeviceShare")
ELASTICQUOTA, COSCHEDULING = "ElasticQuota", "Coscheduling"
KNOWN = (LOADAWARE, FITPLUS, SCARCE, DEVICESHARE, ELASTICQUOTA, COSCHEDULING)
BUILTIN = ("NodeResourcesFit",)  # always on in scheduler.framework; accepted and ignored here
# upstream's config/manager/scheduler-config.yaml enables ElasticQuota; Coscheduling is the gang planner (always on)
DEFAULT_ENABLED = (LOADAWARE, DEVICESHARE, ELASTICQUOTA, COSCHEDULING)
_EXTENSION_POINTS = ("preFilter", "filter", "postFilter", "preScore", "score", "reserve", "permit", "preBind",
                     "bind", "postBind", "multiPoint", "queueSort")


@dataclass
class CoschedulingArgs:
    """CoschedulingArgs: enablePreemption (default false, as upstream; `simulate` always plans preemption) and
    defaultTimeout (Go duration or seconds, default 600s)."""

    enable_preemption: bool = False
    default_timeout: float = DEFAULT_TIMEOUT_SECONDS

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> CoschedulingArgs:
        out = cls()
        if args.get("enablePreemption") is not None:
            if not isinstance(args["enablePreemption"], bool):
                raise InvalidInput("CoschedulingArgs.enablePreemption must be true or false")
            out.enable_preemption = args["enablePreemption"]
        raw = args.get("defaultTimeout")
        if raw is not None:
            timeout = float(raw) if isinstance(raw, int | float) else parse_go_duration(str(raw))
            if timeout is None or timeout <= 0:
                raise InvalidInput(f"CoschedulingArgs.defaultTimeout {raw!r} is not a positive duration")
            out.default_timeout = timeout
        return out


@dataclass
class SchedulerConfig:
    """The first profile of the file, resolved: enabled plugin names (in order), score weights, parsed args."""

    enabled: list[str] = field(default_factory=lambda: list(DEFAULT_ENABLED))
    weights: dict[str, int] = field(default_factory=dict)
    loadaware: LoadAwareArgs = field(default_factory=LoadAwareArgs)
    fitplus: FitPlusArgs = field(default_factory=FitPlusArgs)
    scarce: ScarceArgs = field(default_factory=ScarceArgs)
    deviceshare: dict[str, Any] = field(default_factory=dict)  # raw DeviceShareArgs, parsed by that plugin
    elasticquota: ElasticQuotaArgs = field(default_factory=ElasticQuotaArgs)
    coscheduling: CoschedulingArgs = field(default_factory=lambda: CoschedulingArgs())

    def weight(self, name: str) -> int:
        return self.weights.get(name, 1)


def load_config(path: str | None) -> SchedulerConfig:
    """Parse a config file; None means all defaults."""
    if path is None:
        return SchedulerConfig()
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    return parse_config(doc)


def _check_name(name: Any, where: str) -> str:
    n = str(name)
    if n != "*" and n not in KNOWN and n not in BUILTIN:
        raise InvalidInput(f"unknown scheduler plugin {n!r} in {where} (known: {', '.join(KNOWN + BUILTIN)})")
    return n


def parse_config(doc: Any) -> SchedulerConfig:
    """A KubeSchedulerConfiguration dict (or None/empty ⇒ defaults)."""
    cfg = SchedulerConfig()
    if doc is None:
        return cfg
    if not isinstance(doc, Mapping):
        raise InvalidInput("scheduler config must be a mapping")
    profiles = doc.get("profiles") or []
    if not isinstance(profiles, list):
        raise InvalidInput("scheduler config: profiles must be a list")
    if not profiles:
        return cfg
    if len(profiles) > 1:
        log.warning("scheduler config has %d profiles; only the first is used", len(profiles))
    profile = profiles[0] or {}
    enabled = list(DEFAULT_ENABLED)
    plugins = profile.get("plugins") or {}
    for point in plugins:
        if point not in _EXTENSION_POINTS:
            raise InvalidInput(f"scheduler config: unknown extension point plugins.{point}")
    for point, section in plugins.items():
        section = section or {}
        for item in section.get("disabled") or []:
            n = _check_name(item.get("name"), f"plugins.{point}.disabled")
            enabled = [] if n == "*" else [e for e in enabled if e != n]
        for item in section.get("enabled") or []:
            n = _check_name(item.get("name"), f"plugins.{point}.enabled")
            if n == "*":
                raise InvalidInput(f"scheduler config: '*' is only valid in plugins.{point}.disabled")
            if n in KNOWN and n not in enabled:
                enabled.append(n)
            if point in ("score", "multiPoint") and item.get("weight") is not None:
                w = item["weight"]
                if isinstance(w, bool) or not isinstance(w, int) or w < 0:
                    raise InvalidInput(f"scheduler config: weight of {n} must be a non-negative integer")
                cfg.weights[n] = w
    cfg.enabled = enabled
    for pc in profile.get("pluginConfig") or []:
        n = _check_name(pc.get("name"), "pluginConfig")
        args = pc.get("args") or {}
        if not isinstance(args, Mapping):
            raise InvalidInput(f"scheduler config: args of {n} must be a mapping")
        if n == LOADAWARE:
            cfg.loadaware = LoadAwareArgs.from_dict(args)
        elif n == FITPLUS:
            cfg.fitplus = FitPlusArgs.from_dict(args)
        elif n == SCARCE:
            cfg.scarce = ScarceArgs.from_dict(args)
        elif n == DEVICESHARE:
            cfg.deviceshare = dict(args)
        elif n == ELASTICQUOTA:
            cfg.elasticquota = ElasticQuotaArgs.from_dict(args)
        elif n == COSCHEDULING:
            cfg.coscheduling = CoschedulingArgs.from_dict(args)
    return cfg


def _deviceshare(cfg: SchedulerConfig) -> Any | None:
    """scheduler.deviceshare.plugin.DeviceShare if that module is present (it is developed separately)."""
    try:
        mod = importlib.import_module("scheduler.deviceshare.plugin")
    except ImportError:
        return None
    cls = getattr(mod, "DeviceShare", None)
    if cls is None:
        return None
    if hasattr(cls, "from_config"):
        plugin = cls.from_config(cfg.deviceshare, cfg.weight(DEVICESHARE))
    else:
        try:
            plugin = cls(cfg.deviceshare) if cfg.deviceshare else cls()
        except TypeError:
            plugin = cls()
    if not hasattr(plugin, "weight") or DEVICESHARE in cfg.weights:
        plugin.weight = cfg.weight(DEVICESHARE)
    return plugin


def default_profile(cfg: SchedulerConfig | None = None) -> tuple[list[FilterPlugin], list[ScorePlugin]]:
    """Plugin instances for the enabled plugins: (filters, scorers); one instance may be in both lists."""
    cfg = cfg or SchedulerConfig()
    filters: list[FilterPlugin] = []
    scorers: list[ScorePlugin] = []
    for name in cfg.enabled:
        plugin: Any
        if name == LOADAWARE:
            plugin = LoadAware(cfg.loadaware, weight=cfg.weight(LOADAWARE))
        elif name == FITPLUS:
            plugin = NodeResourcesFitPlus(cfg.fitplus, weight=cfg.weight(FITPLUS))
        elif name == SCARCE:
            plugin = ScarceResourceAvoidance(cfg.scarce, weight=cfg.weight(SCARCE))
        elif name == DEVICESHARE:
            plugin = _deviceshare(cfg)
            if plugin is None:
                continue
        elif name == ELASTICQUOTA:
            plugin = ElasticQuota(cfg.elasticquota)
        else:
            continue
        if isinstance(plugin, FilterPlugin):
            filters.append(plugin)
        if isinstance(plugin, ScorePlugin):
            scorers.append(plugin)
    return filters, scorers
