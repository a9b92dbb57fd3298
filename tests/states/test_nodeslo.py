"""Standalone mode's NodeSLO file: one object read from YAML or JSON, anything else refused with InvalidInput."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apis.core.errors import InvalidInput
from koordlet.states.nodeslo import load_nodeslo_file


def nodeslo(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node-1"},
            "spec": spec}


def test_load_yaml_and_json_files(tmp_path: Path) -> None:
    obj = nodeslo({"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}})
    (tmp_path / "slo.yaml").write_text(
        "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeSLO\nmetadata:\n  name: node-1\nspec:\n"
        "  resourceQOSStrategy:\n    beClass:\n      cpuQOS:\n        enable: true\n")
    (tmp_path / "slo.json").write_text(json.dumps(obj))
    assert load_nodeslo_file(str(tmp_path / "slo.yaml")) == obj
    assert load_nodeslo_file(str(tmp_path / "slo.json")) == obj


@pytest.mark.parametrize(("content", "message"), [
    ("spec: [unclosed", "is not valid YAML or JSON"),
    ("- a\n- b\n", "must hold a single object, found array"),
    ("", "must hold a single object, found null"),
    ("just text", "must hold a single object, found string"),
    ("a: 1\n---\nb: 2\n", "is not valid YAML or JSON"),
    ("x: !!python/object:os.system {}\n", "is not valid YAML or JSON"),
])
def test_load_rejects_garbage(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "slo.yaml"
    path.write_text(content)
    with pytest.raises(InvalidInput, match=message):
        load_nodeslo_file(str(path))


def test_load_missing_or_binary_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read NodeSLO file"):
        load_nodeslo_file(str(tmp_path / "absent.yaml"))
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidInput):
        load_nodeslo_file(str(tmp_path / "bin"))
