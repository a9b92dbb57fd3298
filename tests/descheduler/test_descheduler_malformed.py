"""A malformed object in `simulate`'s cluster (as a watch could deliver in `run`, which shares the round's code) is
left out or read as what it can say, never the end of the round: the example cluster with one field of one object
broken still gives an answer (found by mutating the example's fields one at a time)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.descheduler import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "descheduler" / "migration"
JSON = dict[str, Any]


def first(objects: list[JSON], kind: str) -> JSON:
    return next(o for o in objects if o["kind"] == kind)


def hot_pod_conditions(objects: list[JSON]) -> None:
    first(objects, "Pod")["status"]["conditions"] = True


def node_conditions(objects: list[JSON]) -> None:
    first(objects, "Node")["status"]["conditions"] = -1


def pod_metadata(objects: list[JSON]) -> None:
    first(objects, "Pod")["metadata"] = "1e999"


def huge_usage(objects: list[JSON]) -> None:
    first(objects, "NodeMetric")["status"]["podsMetric"][0]["podUsage"]["resources"]["cpu"] = "9" * 23


@pytest.mark.parametrize("broken", [hot_pod_conditions, node_conditions, pod_metadata, huge_usage])
def test_one_broken_field_still_gives_an_answer(broken: Callable[[list[JSON]], None], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    objects = list(yaml.safe_load_all((EXAMPLE / "cluster.yaml").read_text()))
    base = _simulate(tmp_path / "whole.yaml", objects, capsys)
    assert base["evictions"]  # the example evicts: the broken runs have something to lose
    changed = copy.deepcopy(objects)
    broken(changed)
    result = _simulate(tmp_path / "broken.yaml", changed, capsys)
    assert set(result) >= {"evictions", "nodes", "podMigrationJobs"} and "errors" not in result


def _simulate(path: Path, objects: list[JSON], capsys: pytest.CaptureFixture[str]) -> JSON:
    path.write_text(yaml.safe_dump_all(objects))
    capsys.readouterr()
    rc = cli.main(["simulate", "--cluster", str(path), "--config", str(EXAMPLE / "koord-descheduler-config.yaml"),
                   "--now", "2024-05-01T00:00:30Z"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err, err
    result: JSON = json.loads(out)
    return result
