"""benchmarks.scheduler_filed times the filing commit's scheduler and this tree's with one driver: each subprocess
imports the tree it is given, a missing commit is said and this tree timed alone, bad counts are refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.scheduler_filed import FILED, ROOT, archive, measure


def test_each_tree_is_timed_from_its_own_sources(tmp_path: Path) -> None:
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True).stdout.strip()
    if shallow != "false":
        pytest.skip("a shallow clone (or no git): the filing commit is not here to time")
    assert archive(FILED, tmp_path) is None, "the filing commit is part of this repository's history"
    before = measure(tmp_path, nodes=20, pods=3, runs=1, kinds=("whole-gpu",))
    after = measure(None, nodes=20, pods=3, runs=1, kinds=("whole-gpu",))
    assert Path(before["tree"]) == tmp_path and Path(after["tree"]) == ROOT
    for result in (before, after):
        fig = result["kinds"]["whole-gpu"]
        assert 0 < fig["prepare"] < fig["cold"] and fig["median"] > 0 and result["calibration_ms"] > 0


def test_unreadable_commit_is_said_and_this_tree_timed_alone() -> None:
    out = subprocess.run([sys.executable, "-m", "benchmarks.scheduler_filed", "--commit", "0" * 40, "--nodes", "10",
                          "--cold-nodes", "10", "--pods", "2", "--runs", "1", "--rounds", "1"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "cannot be read" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("1 ")]
    assert len(rows) == 6 and all(r[2] == "-" and float(r[3]) > 0 for r in rows)


def test_a_bad_count_is_one_line_and_exit_2() -> None:
    got = subprocess.run([sys.executable, "-m", "benchmarks.scheduler_filed", "--pods", "0"],
                         capture_output=True, text=True, cwd=ROOT)
    assert got.returncode == 2 and "Traceback" not in got.stderr and "positive" in got.stderr


def test_a_failing_driver_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A 'before' tree whose scheduler cannot be imported: the driver's last error line, exit 1."""
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "__init__.py").write_text("raise ImportError('not a scheduler')\n")
    script = ("import sys; from pathlib import Path; import benchmarks.scheduler_filed as f;"
              f"f.archive = lambda commit, into: (Path(into, 'scheduler').symlink_to({str(tmp_path / 'scheduler')!r})"
              " and None); sys.argv = ['x', '--nodes', '5', '--cold-nodes', '5', '--pods', '1', '--runs', '1',"
              " '--rounds', '1']; sys.exit(f.main())")
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert got.returncode == 1 and "Traceback" not in got.stderr
    assert got.stderr.strip().endswith("ImportError: not a scheduler")
