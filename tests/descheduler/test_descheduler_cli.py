"""`koord-descheduler simulate`'s command line: output formats, and each mistake one line on stderr with exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.descheduler import cli
from scheduler.descheduler.config.features import FeatureGates
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
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:  # argparse's own refusals
        rc = e.code if isinstance(e.code, int) else 1
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
    (("simulate", "--cluster", "{empty}"), "no Node objects"),
    (("simulate", "--cluster", "{cluster}", "--config", "{binary}"), "not UTF-8"),
    (("simulate", "--cluster", "{cluster}", "--config", "{empty}"), "Is a directory"),
    (("simulate", "--cluster", "{cluster}", "--feature-gates", "Foo=true"), "unrecognized feature gate: Foo"),
    (("simulate", "--cluster", "{cluster}", "--feature-gates", "DisablePVCReservation=yes"),
     "invalid value of DisablePVCReservation=yes"),
    (("simulate", "--cluster", "{cluster}", "-o", "xml"), "invalid choice: 'xml'"),
    (("simulate", "--cluster", "{cluster}", "--bogus"), "unrecognized arguments: --bogus"),
    (("simulate", "--cluster", "{cluster}", "extra"), "unrecognized arguments: extra"),
    (("bogus",), "unrecognized arguments: bogus"),
    (("run", "--v", "abc"), "argument -v/--v: invalid int value"),
    (("run", "--leader-elect=maybe"), "argument --leader-elect"),
    (("run", "--leader-elect-lease-duration=xx"), "argument --leader-elect-lease-duration"),
    (("run", "--feature-gates", "DisablePVCReservation"), "malformed pair"),
    (("run", "--config", "{binary}"), "not UTF-8"),
    (("run", "--config", "{empty}"), "Is a directory"),
    (("run", "--port", "99999"), "--port 99999"),
    (("--kubeconfig", "{empty}"), "kubeconfig"),
])
def test_mistakes_are_one_line_exit_2(argv: tuple[str, ...], words: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    cluster, _ = write_cluster(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\n  metadata: [\n")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out, err = run(capsys, *(a.format(cluster=cluster, broken=broken, binary=binary, empty=empty)
                                 for a in argv))
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


def test_simulate_takes_the_feature_gates(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """`--feature-gates` on simulate as on run: the gates reach the rounds (handle.feature_gates), a transformer gate
    turned on is said once."""
    cluster, cfg = write_cluster(tmp_path)
    seen: list[FeatureGates] = []
    real = cli.simulate

    def spy(*args: Any, gates: FeatureGates | None = None, **kw: Any) -> Any:
        assert gates is not None
        seen.append(gates)
        return real(*args, gates=gates, **kw)

    monkeypatch.setattr(cli, "simulate", spy)
    rc, out, _ = run(capsys, "simulate", "--cluster", str(cluster), "--config", str(cfg), "--now", NOW,
                     "--feature-gates", "DisablePVCReservation=true,PriorityTransformer=true")
    assert rc == 0 and len(json.loads(out)["evictions"]) == 4
    assert seen[0].enabled("DisablePVCReservation") and not seen[0].enabled("ReplaceResourcesTransformer")
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("feature gate PriorityTransformer=true" in m for m in said) == 1
