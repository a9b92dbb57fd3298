"""examples/descheduler: the configuration and the small cluster docs/descheduler.md runs; its NodeMetrics are
valid against the upstream CRD, and the hot node is relieved through the DefaultEvictor."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.descheduler import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "descheduler"


def test_node_metrics_are_valid(validate_crd: Callable[[str, dict[str, Any]], None]) -> None:
    metrics = list(yaml.safe_load_all((EXAMPLE / "cluster" / "nodemetrics.yaml").read_text()))
    assert metrics
    for nm in metrics:
        validate_crd("slo.koordinator.sh_nodemetrics.yaml", nm)


def test_example_relieves_the_hot_node(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["simulate", "--cluster", str(EXAMPLE / "cluster"), "--config",
                   str(EXAMPLE / "koord-descheduler-config.yaml"), "--now", "2024-05-01T00:00:30Z"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert result["evictions"] and {e["node"] for e in result["evictions"]} == {"node-1"}
    assert all(e["name"].startswith("web-") for e in result["evictions"])  # the DaemonSet pod stays
    assert result["nodes"]["__default_node_pool__"]["node-1"]["class"] == "high"
