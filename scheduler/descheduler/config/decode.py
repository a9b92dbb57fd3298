"""DeschedulerConfiguration (descheduler/v1alpha2) decoded strictly, defaulted and validated.

Upstream: apis/config/v1alpha2/types.go (fields), default_plugins.go (defaults and their merge), defaults.go
(profile name, leader election, client connection, bind addresses), types.go decodeNestedObjects (args of kind
`<name>Args`), validation/validation.go. A ConfigMap holding the file under `koord-descheduler-config` (upstream's
config/manager/descheduler-config.yaml) is read as the file it holds.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping

import yaml

from scheduler.descheduler.config.common import (
    INT32,
    UINT,
    ConfigError,
    Problems,
    boolean,
    check_keys,
    duration,
    integer,
    mapping,
    selector,
    string,
)
from scheduler.descheduler.config.defaultevictor_args import KIND as DEFAULT_EVICTOR_KIND
from scheduler.descheduler.config.defaultevictor_args import decode_defaultevictor_args
from scheduler.descheduler.config.lownodeload_args import KIND as LOW_NODE_LOAD_KIND
from scheduler.descheduler.config.lownodeload_args import decode_lownodeload_args
from scheduler.descheduler.config.migration_args import KIND as MIGRATION_KIND
from scheduler.descheduler.config.migration_args import decode_migration_args
from scheduler.descheduler.config.types import (
    DEFAULT_PROFILE,
    ClientConnection,
    DeschedulerConfig,
    LeaderElection,
    Profile,
)

API_VERSION = "descheduler/v1alpha2"
KIND = "DeschedulerConfiguration"
CONFIGMAP_KEY = "koord-descheduler-config"
MIGRATION_CONTROLLER = "MigrationController"
DEFAULT_PORT = 10251
POINTS = ("deschedule", "balance", "evict", "filter")
DEFAULT_PLUGINS: Mapping[str, tuple[str, ...]] = {"deschedule": (), "balance": (),
                                                  "evict": (MIGRATION_CONTROLLER,), "filter": (MIGRATION_CONTROLLER,)}

ArgsDecoder = Callable[[object, str], object]
ARGS_DECODERS: Mapping[str, ArgsDecoder] = {
    "LowNodeLoad": decode_lownodeload_args,
    "DefaultEvictor": decode_defaultevictor_args,
    MIGRATION_CONTROLLER: decode_migration_args,
}
"""Plugin name → decoder of its `<name>Args`; an enabled plugin without a pluginConfig entry gets the decoded `{}`
(its defaults). Other names' args stay the raw mapping, for their plugin to read."""
_ARGS_KINDS = {"LowNodeLoad": LOW_NODE_LOAD_KIND, "DefaultEvictor": DEFAULT_EVICTOR_KIND,
               MIGRATION_CONTROLLER: MIGRATION_KIND}

_TOP = ("apiVersion", "kind", "leaderElection", "clientConnection", "enableProfiling", "enableContentionProfiling",
        "healthzBindAddress", "metricsBindAddress", "deschedulingInterval", "dryRun", "profiles", "nodeSelector",
        "maxNoOfPodsToEvictPerNode", "maxNoOfPodsToEvictPerNamespace", "maxNoOfPodsToEvictTotal")
_LEADER = ("leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock", "resourceName",
           "resourceNamespace")
_CLIENT = ("kubeconfig", "acceptContentTypes", "contentType", "qps", "burst")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$")


class _StrictLoader(yaml.SafeLoader):
    """YAML (and so JSON) with duplicate keys refused, as the strict decoder refuses them."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        k = loader.construct_object(key_node, deep=deep)
        if k in seen:
            raise ConfigError(f'line {key_node.start_mark.line + 1}: duplicate field "{k}"')
        seen.add(k)
    return dict(loader.construct_mapping(node, deep=deep))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def load_config(path: str | None) -> DeschedulerConfig:
    """The configuration of a --config file; None: the defaults (one profile, upstream's default plugins)."""
    if path is None:
        return parse_config({"apiVersion": API_VERSION, "kind": KIND})
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not YAML or JSON: not UTF-8 text") from None
    return parse_text(text, path)


def parse_text(text: str, source: str = "config") -> DeschedulerConfig:
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not YAML or JSON: {' '.join(str(e).split())}") from None
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        data = mapping(doc.get("data"), "ConfigMap.data")
        inner = data.get(CONFIGMAP_KEY)
        if not isinstance(inner, str):
            raise ConfigError(f"ConfigMap.data: no {CONFIGMAP_KEY} key holding a DeschedulerConfiguration")
        return parse_text(inner, f"{source} ({CONFIGMAP_KEY})")
    return parse_config(doc)


def parse_config(doc: object) -> DeschedulerConfig:
    m = mapping(doc, "config")
    check_keys(m, _TOP, "config")
    if m.get("apiVersion") != API_VERSION or m.get("kind") != KIND:
        raise ConfigError(f"config: apiVersion/kind must be {API_VERSION}/{KIND}, got "
                          f"{m.get('apiVersion')!r}/{m.get('kind')!r}")
    where = "config"
    cfg = DeschedulerConfig(
        dry_run=boolean(m, "dryRun", where),
        node_selector=selector(m, "nodeSelector", where),
        max_pods_per_node=integer(m, "maxNoOfPodsToEvictPerNode", where, UINT),
        max_pods_per_namespace=integer(m, "maxNoOfPodsToEvictPerNamespace", where, UINT),
        max_pods_total=integer(m, "maxNoOfPodsToEvictTotal", where, UINT),
        leader_election=_leader_election(m, where),
        client_connection=_client_connection(m, where),
    )
    interval = duration(m, "deschedulingInterval", where)
    cfg.descheduling_interval = interval or 0.0
    cfg.enable_profiling = boolean(m, "enableProfiling", where, True)
    contention = boolean(m, "enableContentionProfiling", where, None)
    cfg.enable_contention_profiling = cfg.enable_profiling if contention is None else contention
    cfg.healthz_bind_address = _bind_address(m, "healthzBindAddress", where)
    cfg.metrics_bind_address = _bind_address(m, "metricsBindAddress", where)
    cfg.profiles = _profiles(m, where)
    return cfg


def _leader_election(m: Mapping[str, object], where: str) -> LeaderElection:
    at = f"{where}.leaderElection"
    lm = mapping(m.get("leaderElection"), at)
    check_keys(lm, _LEADER, at)
    le = LeaderElection(leader_elect=boolean(lm, "leaderElect", at, True),
                        resource_lock=string(lm, "resourceLock", at) or "leases",
                        resource_namespace=string(lm, "resourceNamespace", at) or "koordinator-system",
                        resource_name=string(lm, "resourceName", at) or "koord-descheduler")
    for key, attr in (("leaseDuration", "lease_duration"), ("renewDeadline", "renew_deadline"),
                      ("retryPeriod", "retry_period")):
        v = duration(lm, key, at)
        if v is not None and v != 0:
            setattr(le, attr, v)
    # component-base ValidateLeaderElectionConfiguration
    p = Problems()
    if le.leader_elect:
        if le.lease_duration <= 0:
            p.invalid(f"{at}.leaseDuration", le.lease_duration, "must be greater than zero")
        if le.renew_deadline <= 0:
            p.invalid(f"{at}.renewDeadline", le.renew_deadline, "must be greater than zero")
        if le.retry_period <= 0:
            p.invalid(f"{at}.retryPeriod", le.retry_period, "must be greater than zero")
        if le.lease_duration <= le.renew_deadline:
            p.invalid(f"{at}.leaseDuration", le.renew_deadline, "LeaseDuration must be greater than RenewDeadline")
    p.raise_first()
    return le


def _client_connection(m: Mapping[str, object], where: str) -> ClientConnection:
    at = f"{where}.clientConnection"
    cm = mapping(m.get("clientConnection"), at)
    check_keys(cm, _CLIENT, at)
    cc = ClientConnection(kubeconfig=string(cm, "kubeconfig", at))
    content = string(cm, "contentType", at)
    if content:
        cc.content_type = content
        cc.accept_content_types = string(cm, "acceptContentTypes", at)
    else:
        cc.accept_content_types = "application/vnd.kubernetes.protobuf,application/json"
    qps = cm.get("qps")
    if qps is not None:
        if isinstance(qps, bool) or not isinstance(qps, int | float):
            raise ConfigError(f"{at}.qps: must be a number, got {qps!r}")
        cc.qps = float(qps) or 50.0
    burst = integer(cm, "burst", at, INT32)
    cc.burst = burst or 100
    if cc.burst < 0:  # component-base ValidateClientConnectionConfiguration
        raise ConfigError(f"{at}.burst: Invalid value: {cc.burst}: must be non-negative")
    return cc


def _bind_address(m: Mapping[str, object], name: str, where: str) -> str:
    """Defaulting (bare IP → :10251, empty host → 0.0.0.0) then validation (host:port, host an IP or a host name;
    a name is not resolved here)."""
    raw = m.get(name)
    if raw is None:
        return f"0.0.0.0:{DEFAULT_PORT}"
    if not isinstance(raw, str):
        raise ConfigError(f"{where}.{name}: must be a string, got {raw!r}")
    split = _split_host_port(raw)
    if split is not None:
        host, port = split
        addr = f"{_join(host or '0.0.0.0', port)}"
    elif _is_ip(raw):
        addr = _join(raw, str(DEFAULT_PORT))
    else:
        raise ConfigError(f"{where}.{name}: Invalid value: {raw!r}: must be a valid socket address (host:port)")
    host, port = _split_host_port(addr) or ("", "")
    if host and not _is_ip(host) and not _HOSTNAME.match(host):
        raise ConfigError(f"{where}.{name}: Invalid value: {raw!r}: invalid host {host!r} in socket address")
    if not port:
        raise ConfigError(f"{where}.{name}: Invalid value: {raw!r}: port must not be empty in socket address")
    return addr


def _split_host_port(addr: str) -> tuple[str, str] | None:
    """net.SplitHostPort: `host:port` or `[v6]:port`; None when it is not one."""
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0 or not addr[end + 1:].startswith(":"):
            return None
        return addr[1:end], addr[end + 2:]
    if addr.count(":") != 1:
        return None
    host, port = addr.split(":")
    return host, port


def _join(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _profiles(m: Mapping[str, object], where: str) -> list[Profile]:
    raw = m.get("profiles")
    if raw is None or raw == []:
        raw = [{}]
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.profiles: must be a list, got {raw!r}")
    profiles = []
    names: dict[str, int] = {}
    for i, item in enumerate(raw):
        at = f"{where}.profiles[{i}]"
        pm = mapping(item, at)
        check_keys(pm, ("name", "plugins", "pluginConfig", "nodeSelector"), at)
        name = string(pm, "name", at)
        if not name and len(raw) == 1:
            name = DEFAULT_PROFILE
        if not name:
            raise ConfigError(f"{at}.name: Required value")
        if name in names:
            raise ConfigError(f"{at}.name: Duplicate value: {where}.profiles[{names[name]}].name")
        names[name] = i
        profile = Profile(name=name, plugins=_merged_plugins(pm.get("plugins"), f"{at}.plugins"),
                          node_selector=selector(pm, "nodeSelector", at))
        profile.args = _plugin_args(pm, at, profile)
        profiles.append(profile)
    return profiles


def _merged_plugins(raw: object, where: str) -> dict[str, list[str]]:
    """mergePluginSet per point: `disabled: [*]` drops every default, else the defaults not disabled (a default
    re-listed in `enabled` keeps its place), then the other enabled plugins in order."""
    pm = mapping(raw, where)
    check_keys(pm, POINTS, where)
    out: dict[str, list[str]] = {}
    for point in POINTS:
        at = f"{where}.{point}"
        sm = mapping(pm.get(point), at)
        check_keys(sm, ("enabled", "disabled"), at)
        enabled = _names(sm, "enabled", at)
        disabled = set(_names(sm, "disabled", at))
        merged: list[str] = []
        replaced: set[int] = set()
        if "*" not in disabled:
            for name in DEFAULT_PLUGINS[point]:
                if name in disabled:
                    continue
                if name in enabled:
                    replaced.add(len(enabled) - 1 - enabled[::-1].index(name))  # Go's map keeps the last index
                merged.append(name)
        merged += [n for i, n in enumerate(enabled) if i not in replaced]
        out[point] = merged
    return out


def _names(m: Mapping[str, object], key: str, where: str) -> list[str]:
    raw = m.get(key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.{key}: must be a list of {{name: ...}}, got {raw!r}")
    names = []
    for i, item in enumerate(raw):
        at = f"{where}.{key}[{i}]"
        im = mapping(item, at)
        check_keys(im, ("name",), at)
        names.append(string(im, "name", at))
    return names


def _plugin_args(pm: Mapping[str, object], where: str, profile: Profile) -> dict[str, object]:
    """pluginConfig: each entry's args decoded when its kind is known here (duplicates refused); then every enabled
    plugin with a known kind and no entry gets its defaults."""
    raw = pm.get("pluginConfig")
    if raw is not None and not isinstance(raw, list):
        raise ConfigError(f"{where}.pluginConfig: must be a list, got {raw!r}")
    out: dict[str, object] = {}
    for i, item in enumerate(raw or []):
        at = f"{where}.pluginConfig[{i}]"
        im = mapping(item, at)
        check_keys(im, ("name", "args"), at)
        name = string(im, "name", at)
        if name in out:
            raise ConfigError(f"{at}: Duplicate value: {name!r}")
        args = im.get("args")
        decoder = ARGS_DECODERS.get(name)
        if decoder is None:
            out[name] = args
            continue
        _check_type_meta(args, name, f"{at}.args")
        out[name] = decoder(args if args is not None else {}, f"{at}.args")
    for point in POINTS:
        for name in profile.enabled(point):
            if name not in out and name in ARGS_DECODERS:
                out[name] = ARGS_DECODERS[name]({}, f"{where}.pluginConfig[{name}].args")
    return out


def _check_type_meta(args: object, name: str, where: str) -> None:
    if not isinstance(args, Mapping):
        return
    want = _ARGS_KINDS[name]
    kind, version = args.get("kind"), args.get("apiVersion")
    if kind is not None and kind != want:
        raise ConfigError(f"{where}.kind: args for plugin {name} were not of type {want}, got {kind}")
    if version is not None and version != API_VERSION:
        raise ConfigError(f"{where}.apiVersion: must be {API_VERSION}, got {version!r}")
