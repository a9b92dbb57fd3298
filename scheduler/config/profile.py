"""KubeSchedulerConfiguration (v1) → the plugins of one profile per extension point, their score weights and args.

Merge semantics are kube-scheduler's (`pkg/scheduler/apis/config/v1/default_plugins.go` mergePlugins and the
framework's MultiPoint expansion). A file's profile is merged onto kube-scheduler's default plugins (a MultiPoint set,
KUBE_DEFAULT_PLUGINS), as koord-scheduler's v1 defaulting merges it: Koordinator's plugins run only where the file
names them. Without a file, the profile is our default one (koord-scheduler's shipped config, also a MultiPoint set).
A point's `disabled` removes defaults there only ("*": every default at that point, and MultiPoint expansion is
skipped for it); an `enabled` entry naming a default plugin re-configures it in place (its weight); other enabled
plugins are appended after the defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from apis.core import godur
from apis.core.errors import InvalidInput
from apis.core.objects import JSON, JSONMapping
from apis.core.podmeta import DEFAULT_SCHEDULER_NAME
from scheduler.config import args as args_mod
from scheduler.config.fields import ConfigError, check_keys, mapping, object_list, string, suggest
from scheduler.config.plugins import (
    BIND,
    DEFAULT_WEIGHTS,
    KUBE_DEFAULT_PLUGINS,
    KUBE_DEFAULTS,
    KUBE_TYPES,
    LATER,
    MULTI_POINT,
    NOOP,
    NOT_IMPLEMENTED,
    PLUGINS,
    POINTS,
    PRE_BIND,
    QUEUE_SORT,
    RESERVE,
    SCORE,
    supported,
)

log = logging.getLogger("koord-sched.config")

API_VERSION = "kubescheduler.config.k8s.io/v1"
OLD_API_VERSIONS = ("kubescheduler.config.k8s.io/v1beta3", "kubescheduler.config.k8s.io/v1beta2")
KIND = "KubeSchedulerConfiguration"
TOP_FIELDS = ("apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "healthzBindAddress",
              "metricsBindAddress", "enableProfiling", "enableContentionProfiling", "percentageOfNodesToScore",
              "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles", "extenders", "delayCacheUntilActive")
PROFILE_FIELDS = ("schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig")
OURS, KUBE = "koord-sched's default profile", "kube-scheduler's default plugins"  # what a profile is merged onto
# a MultiPoint default set: the enabled plugins with their weights, and per point the plugins disabled there
Base = tuple[list[tuple[str, int]], dict[str, list[str]]]
Custom = dict[str, tuple[list[tuple[str, int]], list[str]]]  # a file's plugins: per point, (enabled, disabled)


@dataclass
class SchedulerConfig:
    """One resolved profile: enabled plugin names per extension point (in order), score weights, typed args."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    points: dict[str, list[str]] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)
    args: JSON = field(default_factory=dict)  # plugin → typed args given by pluginConfig
    explicit: set[str] = field(default_factory=set)  # plugins the file enabled by name somewhere
    named: bool = False  # the profile set schedulerName itself
    base: str = OURS  # what the profile was merged onto (OURS without a file, KUBE with one)
    left_out: list[str] = field(default_factory=list)  # kube-scheduler defaults kept by the file, not built here
    # the file's leaderElection (kube-scheduler's v1 defaults: leaderElect true, Lease kube-system/kube-scheduler)
    leader_elect: bool = False
    lease_namespace: str = "kube-system"
    lease_name: str = "kube-scheduler"
    lease_timing: tuple[float, float, float] = (15.0, 10.0, 2.0)  # leaseDuration, renewDeadline, retryPeriod

    def __post_init__(self) -> None:
        if not self.points:
            self.points, self.weights = _expand({}, _ours())

    def enabled_at(self, name: str, point: str) -> bool:
        return name in self.points.get(point, ())

    def enabled(self, name: str) -> bool:
        return any(name in names for names in self.points.values())

    def weight(self, name: str) -> int:
        return self.weights.get(name, 1)

    def plugin_args(self, name: str) -> Any:
        """The plugin's typed args: the file's pluginConfig, else upstream's defaults."""
        if name not in self.args:
            self.args[name] = args_mod.defaults(name)
        return self.args[name]


def _kind(point: str) -> str:
    return KUBE_TYPES.get(point, "MultiPointPlugin")


def _plugin_list(section: JSONMapping, key: str, where: str, point: str) -> list[tuple[str, int]]:
    """One `enabled`/`disabled` list; refusals carry kube-scheduler's own words (NewFramework, updatePluginList)."""
    out: list[tuple[str, int]] = []
    for i, item in enumerate(object_list(section, key, where)):
        w = f"{where}.{key}[{i}]"
        check_keys(item, ("name", "weight"), w)
        name = string(item, "name", w, "")
        weight = item.get("weight", 0)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            raise ConfigError(f"{w}.weight: must be a non-negative integer, got {weight!r}")
        if name == "*":
            if key == "enabled":
                raise ConfigError(f"{w}.name: '*' is only valid under disabled")
            out.append((name, 0))
            continue
        info = PLUGINS.get(name)
        if info is None:
            raise ConfigError(f'{w}.name: {_kind(point)} "{name}" does not exist (unknown plugin'
                              f"{suggest(name, PLUGINS)}); supported: {', '.join(supported())}")
        if key == "enabled":
            if info.status == NOT_IMPLEMENTED:
                raise ConfigError(f"{w}.name: {name} is not implemented by koord-sched; supported: "
                                  f"{', '.join(supported())}")
            if point != MULTI_POINT and point not in info.points:
                raise ConfigError(f'{w}.name: plugin "{name}" does not extend {_kind(point)} plugin (it extends: '
                                  f"{', '.join(info.points)})")
            if any(n == name for n, _ in out):
                raise ConfigError(f'{w}.name: plugin "{name}" already registered as "{_kind(point)}"')
        out.append((name, weight))
    return out


def _merge_set(default_enabled: list[tuple[str, int]], default_disabled: list[str],
               enabled: list[tuple[str, int]], disabled: list[str]) -> tuple[list[tuple[str, int]], set[str]]:
    """kube-scheduler's mergePluginSet: defaults minus disabled (all with "*"), re-configured in place, then the
    other enabled plugins appended."""
    off = set(disabled) | set(default_disabled)
    custom = {n: (i, w) for i, (n, w) in enumerate(enabled)}
    replaced: set[int] = set()
    out: list[tuple[str, int]] = []
    if "*" not in off:
        for n, w in default_enabled:
            if n in off:
                continue
            if n in custom:
                i, w = custom[n]
                replaced.add(i)
            out.append((n, w))
    out += [(n, w) for i, (n, w) in enumerate(enabled) if i not in replaced]
    return out, off


def _ours() -> Base:
    """Our default profile (no file): koord-scheduler's plugins at the points its shipped config names."""
    enabled = [(p.name, DEFAULT_WEIGHTS.get(p.name, 0)) for p in PLUGINS.values() if p.default]
    disabled: dict[str, list[str]] = {}
    for p in PLUGINS.values():
        if p.default:
            for point in p.points:
                if point not in p.default:
                    disabled.setdefault(point, []).append(p.name)
    return enabled, disabled


def _kube() -> Base:
    """kube-scheduler's default plugins, less those koord-sched does not build (ImageLocality: left out, said once
    by parse_profile); none is disabled at a point."""
    return [(n, w) for n, w in KUBE_DEFAULT_PLUGINS if PLUGINS[n].status != NOT_IMPLEMENTED], {}


def _expand(custom: Custom, base: Base) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Per extension point, the enabled plugins in order (MultiPoint expansion), and the score weights."""
    mp_default, mp_disabled = base
    mp_enabled, _ = _merge_set(mp_default, [], *custom.get(MULTI_POINT, ([], [])))
    points: dict[str, list[str]] = {}
    weights: dict[str, int] = {}
    for point in POINTS:
        enabled, off = _merge_set([], mp_disabled.get(point, []),
                                  *custom.get(point, ([], [])))
        names = [n for n, _ in enabled]
        order: list[str] = list(names)
        if "*" not in off:
            override = [n for n, _ in mp_enabled if point in PLUGINS[n].points and n not in off and n in names]
            added = [n for n, _ in mp_enabled if point in PLUGINS[n].points and n not in off and n not in names]
            order = override + added + [n for n in names if n not in override]
        points[point] = list(dict.fromkeys(order))
        if point == SCORE:
            given = dict(enabled)
            multi = dict(mp_enabled)
            for n in points[point]:
                # the point's own entry wins over the MultiPoint one (framework expandMultiPointPlugins)
                w = given[n] if n in given else multi.get(n, 0)
                weights[n] = w or 1  # kube-scheduler: a score weight of 0 means 1
    return points, weights


def parse_profile(profile: JSONMapping, where: str) -> SchedulerConfig:
    check_keys(profile, PROFILE_FIELDS, where)
    plugins = mapping(profile.get("plugins"), f"{where}.plugins")
    check_keys(plugins, (*POINTS, MULTI_POINT), f"{where}.plugins")
    custom: Custom = {}
    explicit: set[str] = set()
    for point, raw in plugins.items():
        w = f"{where}.plugins.{point}"
        section = mapping(raw, w)
        check_keys(section, ("enabled", "disabled"), w)
        enabled = _plugin_list(section, "enabled", w, point)
        disabled = [n for n, _ in _plugin_list(section, "disabled", w, point)]
        custom[point] = (enabled, disabled)
        explicit.update(n for n, _ in enabled)
    points, weights = _expand(custom, _kube())
    named = string(profile, "schedulerName", where, "")
    cfg = SchedulerConfig(named or DEFAULT_SCHEDULER_NAME, points, weights, explicit=explicit, named=bool(named),
                          base=KUBE, left_out=_left_out(custom))
    for name in cfg.left_out:
        log.info("%s: %s", name, PLUGINS[name].note)
    if profile.get("percentageOfNodesToScore") is not None:
        log.info("%s.percentageOfNodesToScore: koord-sched scores every feasible node; ignored", where)
    seen: set[str] = set()
    for i, pc in enumerate(object_list(profile, "pluginConfig", where)):
        w = f"{where}.pluginConfig[{i}]"
        check_keys(pc, ("name", "args"), w)
        name = string(pc, "name", w, "")
        if name not in PLUGINS:
            raise ConfigError(f"{w}.name: unknown plugin {name!r}{suggest(name, PLUGINS)}; supported: "
                              f"{', '.join(supported())}")
        if name in seen:
            raise ConfigError(f"{w}.name: repeated config for plugin {name}")
        seen.add(name)
        if not cfg.enabled(name) and not _kube_default_kept(name, custom):
            raise ConfigError(f"{w}.name: plugin {name} has a pluginConfig but is not enabled at any extension point "
                              "of the profile")
        entry = args_mod.ARGS.get(name)
        raw_args = mapping(pc.get("args"), f"{w}.args")
        if entry is None:
            if raw_args and PLUGINS[name].status == NOT_IMPLEMENTED:
                log.info("%s: %s is not implemented by koord-sched; its args are ignored", w, name)
                continue
            check_keys(raw_args, ("apiVersion", "kind"), f"{w}.args")
            continue
        _check_type(raw_args, entry.kind, f"{w}.args")
        cfg.args[name] = entry.parse(raw_args, f"{w}.args")
    _validate(cfg, where)
    return cfg


def _left_out(custom: Custom) -> list[str]:
    """kube-scheduler's defaults koord-sched does not build that the file leaves on at some point they implement."""
    mp_off = set(custom.get(MULTI_POINT, ([], []))[1])
    out = []
    for name, _ in KUBE_DEFAULT_PLUGINS:
        info = PLUGINS[name]
        if info.status != NOT_IMPLEMENTED or name in mp_off or "*" in mp_off:
            continue
        if any(not {name, "*"} & set(custom.get(point, ([], []))[1]) for point in info.points):
            out.append(name)
    return out


def _kube_default_kept(name: str, custom: Custom) -> bool:
    """A kube-scheduler default plugin koord-sched does not run is still in the profile (its pluginConfig legal)
    unless the file disables it by name or with "*" at multiPoint."""
    if name not in KUBE_DEFAULTS:
        return False
    off = custom.get(MULTI_POINT, ([], []))[1]
    return name not in off and "*" not in off


def _check_type(raw: JSONMapping, kind: str, where: str) -> None:
    api = raw.get("apiVersion")
    if api is not None and api != API_VERSION:
        if api in OLD_API_VERSIONS:
            log.info("%s.apiVersion: %s read as %s (the same fields)", where, api, API_VERSION)
        else:
            raise ConfigError(f"{where}.apiVersion: {api!r} is not supported; accepted: {API_VERSION}")
    got = raw.get("kind")
    if got is not None and got != kind:
        raise ConfigError(f"{where}.kind: {got!r} does not match the plugin; expected {kind}")


def _validate(cfg: SchedulerConfig, where: str) -> None:
    sorts = cfg.points.get(QUEUE_SORT, [])
    if not sorts:
        raise ConfigError(f"{where}.plugins.queueSort: no queue sort plugin is enabled (accepted: PrioritySort, "
                          "Coscheduling)")
    if len(sorts) > 1:
        raise ConfigError(f"{where}.plugins.queueSort: only one queue sort plugin can be enabled, got "
                          f"{', '.join(sorts)}")
    if sorts[0] == "Coscheduling":
        log.info("%s.plugins.queueSort: Coscheduling orders the pending pods (koord-scheduler v1.5/v1.6's Less: "
                 "priority, sub-priority, gang, age)", where)
    if not cfg.points.get(BIND):
        raise ConfigError(f"{where}.plugins.bind: at least one bind plugin is needed (accepted: DefaultBinder, "
                          "Reservation)")
    if cfg.enabled_at("DeviceShare", RESERVE) != cfg.enabled_at("DeviceShare", PRE_BIND):
        raise ConfigError(f"{where}.plugins: DeviceShare must be enabled at both reserve and preBind or at neither "
                          "(devices reserved in Reserve are written to the pod in PreBind)")
    for name in sorted(cfg.explicit):
        info = PLUGINS[name]
        if info.status == LATER:
            log.warning("%s: %s", name, info.note)
        elif info.status == NOOP:
            log.info("%s: accepted; %s", name, info.note)


def _leader_election(doc: JSONMapping) -> Callable[[SchedulerConfig], SchedulerConfig]:
    """The file's leaderElection onto a profile (kube-scheduler's v1 defaults for what it leaves out)."""
    le = mapping(doc.get("leaderElection"), "config.leaderElection")
    elect = le.get("leaderElect", True)
    if not isinstance(elect, bool):
        raise ConfigError(f"config.leaderElection.leaderElect: must be true or false, got {elect!r}")
    lock = le.get("resourceLock", "leases")
    if lock != "leases":
        raise ConfigError(f"config.leaderElection.resourceLock: {lock!r} is not supported; accepted: leases")
    namespace = string(le, "resourceNamespace", "config.leaderElection", "") or "kube-system"
    name = string(le, "resourceName", "config.leaderElection", "") or "kube-scheduler"
    timing = []
    for field_name, default in (("leaseDuration", 15.0), ("renewDeadline", 10.0), ("retryPeriod", 2.0)):
        raw = le.get(field_name)
        try:
            timing.append(default if raw is None else godur.parse(str(raw)))
        except InvalidInput:
            raise ConfigError(f"config.leaderElection.{field_name}: {raw!r} is not a duration") from None
    lease_duration, renew_deadline, retry_period = timing
    if elect and not lease_duration > renew_deadline > retry_period > 0:
        raise ConfigError("config.leaderElection: leaseDuration must be greater than renewDeadline, and "
                          "renewDeadline greater than retryPeriod (> 0)")

    def apply(cfg: SchedulerConfig) -> SchedulerConfig:
        cfg.leader_elect, cfg.lease_namespace, cfg.lease_name = elect, namespace, name
        cfg.lease_timing = (lease_duration, renew_deadline, retry_period)
        return cfg

    return apply


def parse_config(doc: object, scheduler_name: str | None = None) -> SchedulerConfig:
    """A KubeSchedulerConfiguration dict (None or empty: the defaults); the profile for `scheduler_name`, else the
    first one. Raises ConfigError."""
    if doc is None:
        return SchedulerConfig()
    doc = mapping(doc, "config")
    check_keys(doc, TOP_FIELDS, "config")
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if api is not None and api != API_VERSION:
        if api not in OLD_API_VERSIONS:
            raise ConfigError(f"apiVersion: {api!r} is not supported; accepted: {API_VERSION}")
        log.info("apiVersion: %s read as %s (the fields koord-sched reads are the same)", api, API_VERSION)
    if kind is not None and kind != KIND:
        raise ConfigError(f"kind: {kind!r} is not supported; accepted: {KIND}")
    election = _leader_election(doc)
    profiles = object_list(doc, "profiles", "config")
    if not profiles:  # kube-scheduler's one default profile: its default plugins
        return election(parse_profile({}, "profiles[0]"))
    parsed = [election(parse_profile(p, f"profiles[{i}]")) for i, p in enumerate(profiles)]
    names = [p.scheduler_name for p in parsed]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ConfigError(f"profiles: schedulerName {dup!r} is used by more than one profile")
    if scheduler_name is not None:
        for p in parsed:
            if p.scheduler_name == scheduler_name:
                return p
        log.warning("no profile has schedulerName %s; using the first one (%s)", scheduler_name, names[0])
    elif len(parsed) > 1:
        log.info("%d profiles; using the first (%s)", len(parsed), names[0])
    return parsed[0]
