"""Reading a --config file as users paste it: the koord-scheduler ConfigMap around the configuration, and the
release texts' mistakes whose intent is unambiguous (each repair is logged; anything else is refused by profile.py).

Repairs (docs/scheduler.md "Configuration"): a profile's `pluginConfigs` (v1.6 notes) is read as `pluginConfig`;
an extension point written as a list of `{enabled: …}` / `{disabled: …}` items is read as one object; a file whose
indentation was lost (every line flush left, as in the network-topology manual) is re-nested by the schema, each key
going to the innermost open object that accepts it — accepted only when every line finds a place.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from apis.core.objects import JSON, JSONMapping
from scheduler.config.args import ARGS
from scheduler.config.fields import TYPE_FIELDS, ConfigError
from scheduler.config.plugins import MULTI_POINT, POINTS
from scheduler.config.profile import KIND, PROFILE_FIELDS, TOP_FIELDS

log = logging.getLogger("koord-sched.config")

# -- schema for re-nesting flush-left text: dict = object (key → schema), list = [item schema], SCALAR, ANY, BLOCK
SCALAR, ANY, BLOCK, ARGS_OBJ = "scalar", "any", "block", "args"
_PLUGIN: JSON = {"name": SCALAR, "weight": SCALAR}
_SET: JSON = {"enabled": [_PLUGIN], "disabled": [_PLUGIN]}
_PC: JSON = {"name": SCALAR, "args": ARGS_OBJ}
_PROFILE: JSON = {**dict.fromkeys(PROFILE_FIELDS, SCALAR), "plugins": dict.fromkeys((*POINTS, MULTI_POINT),
                                                                                              _SET),
                            "pluginConfig": [_PC], "pluginConfigs": [_PC]}
_KSC: JSON = {**dict.fromkeys(TOP_FIELDS, SCALAR), "profiles": [_PROFILE], "leaderElection": ANY,
                        "clientConnection": ANY}
_CONFIGMAP: JSON = {"apiVersion": SCALAR, "kind": SCALAR, "data": {"*": BLOCK},
                              "metadata": {"name": SCALAR, "namespace": SCALAR, "labels": ANY, "annotations": ANY}}


def _args_fields(plugin: str) -> set[str]:
    entry = ARGS.get(plugin)
    return {*TYPE_FIELDS, *(entry.fields if entry else ())}


@dataclass
class _Frame:
    schema: Any
    container: Any  # dict or list


class _Unplaced(Exception):
    pass


def _accepts(frame: _Frame, key: str) -> bool:
    s = frame.schema
    if not isinstance(frame.container, dict):
        return False
    if s == ANY:
        return True
    if s == ARGS_OBJ:
        return key in frame.accepted  # type: ignore[attr-defined]
    return isinstance(s, dict) and (key in s or "*" in s)


def _child(frame: _Frame, key: str) -> Any:
    s = frame.schema
    if s == ANY:
        return ANY
    if s == ARGS_OBJ:
        return SCALAR
    return s.get(key, s.get("*"))


def _split(text: str) -> tuple[str | None, str]:
    if ": " in text:
        k, v = text.split(": ", 1)
        return k.strip().strip("'\""), v.strip()
    if text.endswith(":"):
        return text[:-1].strip().strip("'\""), ""
    return None, text


def renest(lines: list[str], schema: JSON) -> JSON:
    """Rebuild the nesting of flush-left YAML lines from the schema; raises _Unplaced naming the first line that
    fits nowhere."""
    root: JSON = {}
    stack = [_Frame(schema, root)]
    for n, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        item = line == "-" or line.startswith("- ")
        key, value = _split(line[1:].strip() if item else line)
        if item:
            j = next((i for i in range(len(stack) - 1, -1, -1) if isinstance(stack[i].container, list)
                      and (key is None) == (stack[i].schema == SCALAR)
                      and (key is None or (isinstance(stack[i].schema, dict) and key in stack[i].schema))), None)
            if j is None:
                raise _Unplaced(line)
            del stack[j + 1:]
            lst = stack[j]
            if key is None:
                lst.container.append(yaml.safe_load(value))
                continue
            obj: JSON = {}
            lst.container.append(obj)
            stack.append(_Frame(lst.schema, obj))
        else:
            if key is None:
                raise _Unplaced(line)
            j = next((i for i in range(len(stack) - 1, -1, -1) if _accepts(stack[i], key)), None)
            if j is None:
                raise _Unplaced(line)
            del stack[j + 1:]
        assert key is not None
        frame = stack[-1]
        child = _child(frame, key)
        if child == BLOCK and value.startswith("|"):
            frame.container[key] = "\n".join(x.strip() for x in lines[n + 1:]) + "\n"
            return root
        if value:
            frame.container[key] = yaml.safe_load(value)
        elif isinstance(child, list):
            frame.container[key] = []
            stack.append(_Frame(child[0], frame.container[key]))
        elif isinstance(child, dict) or child in (ANY, ARGS_OBJ):
            frame.container[key] = {}
            sub = _Frame(child, frame.container[key])
            if child == ARGS_OBJ:
                sub.accepted = _args_fields(str(frame.container.get("name", "")))  # type: ignore[attr-defined]
            stack.append(sub)
        else:
            frame.container[key] = None
    return root


def _flush_left(text: str) -> bool:
    lines = [x for x in text.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    return bool(lines) and all(not x[0].isspace() for x in lines) and any(x.rstrip().endswith(":") for x in lines)


def _renest_text(text: str, source: str) -> Any:
    """The flush-left document re-nested, or the plain YAML when it is not flush-left."""
    plain = yaml.safe_load(text)
    if not _flush_left(text):
        return plain
    kinds = [x.split(":", 1)[1].strip() for x in text.splitlines() if x.startswith("kind:")]
    schema = _CONFIGMAP if kinds and kinds[0] == "ConfigMap" else _KSC
    try:
        nested = renest(text.splitlines(), schema)
    except _Unplaced as e:
        raise ConfigError(f"{source}: the indentation is lost and cannot be restored unambiguously at line "
                          f"{str(e)!r}; indent the file as YAML") from None
    if nested != plain:
        log.warning("%s: every line is flush left (indentation lost); read with the nesting restored from the "
                    "KubeSchedulerConfiguration schema", source)
    return nested


def load_text(text: str, source: str) -> Any:
    """The KubeSchedulerConfiguration in a file's text (a ConfigMap around it is unwrapped), repaired."""
    try:
        doc = _renest_text(text, source)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}:{where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap":
        doc = _unwrap(doc, source)
    return repair(doc)


def _unwrap(cm: JSONMapping, source: str) -> Any:
    data = cm.get("data") or {}
    found = []
    for k, v in (data.items() if isinstance(data, Mapping) else []):
        if isinstance(v, str) and KIND in v:
            found.append((k, v))
    if len(found) != 1:
        raise ConfigError(f"{source}: ConfigMap data must hold exactly one KubeSchedulerConfiguration, found "
                          f"{len(found)} ({', '.join(k for k, _ in found) or 'none'})")
    key, text = found[0]
    name = (cm.get("metadata") or {}).get("name")
    log.info("%s: reading the KubeSchedulerConfiguration of ConfigMap %s key %s", source, name, key)
    return _renest_text(text, f"{source} data.{key}")


def repair(doc: object) -> Any:
    """Unambiguous mistakes of the release texts, each logged."""
    if not isinstance(doc, Mapping):
        return doc
    doc = dict(doc)
    profiles = doc.get("profiles")
    if not isinstance(profiles, list):
        return doc
    fixed = []
    for i, p in enumerate(profiles):
        if isinstance(p, Mapping):
            p = dict(p)
            if "pluginConfigs" in p and "pluginConfig" not in p:
                log.warning("profiles[%d].pluginConfigs: read as pluginConfig (the field's name)", i)
                p["pluginConfig"] = p.pop("pluginConfigs")
            plugins = p.get("plugins")
            if isinstance(plugins, Mapping):
                p["plugins"] = {point: _merge_items(section, f"profiles[{i}].plugins.{point}")
                                for point, section in plugins.items()}
        fixed.append(p)
    doc["profiles"] = fixed
    return doc


def _merge_items(section: object, where: str) -> Any:
    """`[{disabled: [...]}, {enabled: [...]}]` → `{disabled: [...], enabled: [...]}` when no key repeats."""
    if not isinstance(section, list) or not section or not all(isinstance(x, Mapping) for x in section):
        return section
    keys = [k for x in section for k in x]
    if len(keys) != len(set(keys)) or not set(keys) <= {"enabled", "disabled"}:
        return section
    log.warning("%s: a list of {enabled}/{disabled} items read as one object", where)
    merged: JSON = {}
    for x in section:
        merged.update(x)
    return merged
