"""Standalone mode's NodeSLO: one object read from a YAML or JSON file (decoded by apis.slo.decode)."""

from __future__ import annotations

import yaml

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.slo.decode import json_type_name


def load_nodeslo_file(path: str) -> JSON:
    """Read one NodeSLO object from a YAML or JSON file; raises InvalidInput when the file is not one object.

    The content is not validated here: pass the result to `apis.slo.decode.decode_nodeslo`.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read NodeSLO file {path}: {e}") from e
    try:
        obj = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidInput(f"NodeSLO file {path} is not valid YAML or JSON: {e}") from e
    if not isinstance(obj, dict):
        raise InvalidInput(f"NodeSLO file {path} must hold a single object, found {json_type_name(obj)}")
    return obj
