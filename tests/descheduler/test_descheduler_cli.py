"""`koord-descheduler simulate`'s command line: output formats, and each mistake one line on stderr with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scheduler.descheduler import cli
from scheduler.descheduler.registry import REGISTRY

from deschedbuild import NOW, config, node, node_metrics, pod, protected_pods


def write_cluster(tmp: Path) -> tuple[Path, Path]:
    nodes = [node("n1", 4000, 3000, 9), node("n2", 4000, 3000, 10)]
    pods = [*(pod(f"p{i}", 400, 0, "n1") for i in range(1, 6)), *protected_pods(400, 0, "n1"), pod("p9", 400, 0, "n2")]
    cluster = tmp / "cluster"
    cluster.mkdir()
    (cluster / "nodes.yaml").write_text(yaml.safe_dump_all(nodes))
    (cluster / "rest.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                                   "items": [*pods, *node_metrics(nodes, pods)]}))
    cfg = tmp / "config.yaml"
    cfg.write_text(yaml.safe_dump(config({"cpu": 30, "pods": 30}, {"cpu": 50, "pods": 50})))
    return cluster, cfg


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_output_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, cfg = write_cluster(tmp_path)
    base = ("simulate", "--cluster", str(cluster), "--config", str(cfg), "--now", NOW)
    rc, out, _ = run(capsys, *base, "-o", "json")
    as_json = json.loads(out)
    assert rc == 0 and len(as_json["evictions"]) == 4
    rc, out, _ = run(capsys, *base, "-o", "yaml")
    assert rc == 0 and yaml.safe_load(out) == as_json
    rc, out, _ = run(capsys, *base, "-o", "table")
    lines = out.splitlines()
    assert rc == 0 and lines[0].split() == ["POD", "NODE", "PLUGIN", "REASON"]
    assert sum(1 for line in lines if line.startswith("default/p")) == 4
    assert any(line.split()[:2] == ["n1", "high"] for line in lines)


@pytest.mark.parametrize(("argv", "words"), [
    (("simulate",), "--cluster is required"),
    (("simulate", "--cluster", "/nonexistent/dir"), "no such file or directory"),
    (("simulate", "--cluster", "{cluster}", "--rounds", "0"), "--rounds 0"),
    (("simulate", "--cluster", "{cluster}", "--rounds", "two"), "--rounds two"),
    (("simulate", "--cluster", "{cluster}", "--now", "yesterday"), "--now yesterday"),
    (("simulate", "--cluster", "{cluster}", "--config", "/nonexistent.yaml"), "invalid --config"),
    (("simulate", "--cluster", "{broken}"), "reading the objects"),
])
def test_mistakes_are_one_line_exit_2(argv: tuple[str, ...], words: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    cluster, _ = write_cluster(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\n  metadata: [\n")
    rc, out, err = run(capsys, *(a.format(cluster=cluster, broken=broken) for a in argv))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err and "Traceback" not in err


def test_default_configuration_needs_the_migration_controller(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Without --config the profile is upstream's default (MigrationController evict and filter): refused by name
    while that plugin is not in the registry, run as any other plugin once it is."""
    cluster, _ = write_cluster(tmp_path)
    rc, out, err = run(capsys, "simulate", "--cluster", str(cluster), "--now", NOW)
    if "MigrationController" in REGISTRY:
        assert rc == 0 and json.loads(out)["evictions"] == []  # no balance plugin enabled by default
    else:
        assert rc == 2 and "'MigrationController' is not built" in err
