"""deploy/prometheus/rules.yaml's alerts: each has a `promtool test rules` file in deploy/prometheus/tests/ that
passes, shows it firing and shows it quiet, and fails when the alert never fires; every alert tells a person what
happened and what to check."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import require

PROMETHEUS = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yaml"
UNIT_TESTS = sorted((PROMETHEUS / "tests").glob("*.yaml"))


def promtool() -> str:
    path = shutil.which("promtool")
    require(path is not None, "promtool (Debian's prometheus) is not installed (scripts/install.sh dev installs it)")
    assert path is not None
    return path


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def _cases(path: Path) -> list[dict[str, Any]]:
    return [case for t in yaml.safe_load(path.read_text())["tests"] for case in t.get("alert_rule_test", [])]


@pytest.mark.parametrize("unit_test", UNIT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_test_passes(unit_test: Path) -> None:
    out = subprocess.run([promtool(), "test", "rules", unit_test.name], cwd=unit_test.parent, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    names = {a["alert"] for a in alerts()}
    fired = {c["alertname"] for p in UNIT_TESTS for c in _cases(p) if c.get("exp_alerts")}
    quiet = {c["alertname"] for p in UNIT_TESTS for c in _cases(p) if not c.get("exp_alerts")}
    assert names == fired, "alerts without a firing case (or cases for no alert)"
    assert names == quiet, "alerts without a case where they must not fire"
    for p in UNIT_TESTS:
        assert yaml.safe_load(p.read_text())["rule_files"] == ["../rules.yaml"], p.name


def test_the_unit_tests_fail_when_an_alert_never_fires(tmp_path: Path) -> None:
    """The promtool tests are real: with every alert's expression made empty, each test file fails."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["expr"] = "vector(1) == 0"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "tests").mkdir()
    for p in UNIT_TESTS:
        shutil.copy(p, tmp_path / "tests" / p.name)
        out = subprocess.run([promtool(), "test", "rules", p.name], cwd=tmp_path / "tests", capture_output=True,
                             text=True, timeout=60)
        assert out.returncode != 0, f"{p.name} passes with alerts that never fire"


def test_every_alert_says_what_happened_and_what_to_check() -> None:
    for a in alerts():
        assert a["labels"]["severity"] in ("critical", "warning", "info"), a["alert"]
        ann = a["annotations"]
        assert set(ann) == {"summary", "description"}, a["alert"]
        assert "\n" not in ann["summary"] and len(ann["summary"]) < 240, a["alert"]  # a line (template source)
        # a runbook in short: what it means for the cluster and where to look
        assert len(ann["description"]) > 200, a["alert"]
        assert a["alert"].startswith("Koordlet"), "alert names say whose they are"


def test_rules_file_passes_promtool_check() -> None:
    out = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
