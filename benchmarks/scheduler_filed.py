"""Issue #25's speed point in one run: the per-pod CPU of the GPU path at 5 000 nodes and the CPU of a cold start at
1 000 nodes, the filing commit's scheduler beside this tree's, interleaved rounds on the same machine, a CPU
calibration beside each figure. Goal: this tree at half the filing commit's figure or less.

The filing commit's `scheduler` and `koordlet` packages are taken with `git archive` into a temporary directory and
timed by benchmarks.schedcpu in a subprocess (the same cluster objects, the same driver); a clone without that
commit (a shallow one) says so and times this tree alone."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.gpucluster import KINDS

FILED = "814a135"  # the commit that filed #25: its own bench's figures are the "before"
ROOT = Path(__file__).resolve().parent.parent
GOAL = 0.5
GPU_KINDS = tuple(k for k in KINDS if k != "cpu")


def archive(commit: str, into: Path) -> str | None:
    """`scheduler/` and `koordlet/` of `commit` unpacked under `into`; None when done, else why not."""
    try:
        got = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "scheduler", "koordlet"],
                             capture_output=True, check=False)
    except OSError as e:
        return f"git: {e.strerror}"
    if got.returncode != 0:
        return got.stderr.decode(errors="replace").strip().splitlines()[-1] if got.stderr else "git archive failed"
    tar_path = into / "filed.tar"
    tar_path.write_bytes(got.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into)  # our own repository's tree, not foreign input
    tar_path.unlink()
    return None


def measure(tree: Path | None, nodes: int, pods: int, runs: int, kinds: tuple[str, ...]) -> dict[str, Any]:
    """benchmarks.schedcpu's JSON with `tree`'s scheduler first on the path (None: this tree's)."""
    paths = ([str(tree)] if tree is not None else []) + [str(ROOT)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    out = subprocess.run([sys.executable, "-m", "benchmarks.schedcpu", "--nodes", str(nodes), "--pods", str(pods),
                          "--runs", str(runs), "--kinds", ",".join(kinds)],
                         capture_output=True, text=True, env=env, cwd=tree or ROOT, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _cell(before: float | None, after: float, scale: float) -> str:
    if before is None:
        return f"{'-':>9} {after * scale:>9.0f} {'-':>6}"
    ratio = after / before
    return f"{before * scale:>9.0f} {after * scale:>9.0f} {ratio:>6.2f} {'ok' if ratio <= GOAL else 'MISS'}"


def table(title: str, unit: str, figure: str, scale: float, rounds: list[tuple[dict[str, Any] | None,
                                                                          dict[str, Any]]]) -> None:
    print(f"\n{title}")
    print(f"{'round':<6} {'pod kind':<11} {'filed ' + unit:>9} {'now ' + unit:>9} {'ratio':>6}  "
          f"(goal <= {GOAL}; calibration ms filed / now)")
    for n, (before, after) in enumerate(rounds, 1):
        cal = f"{before['calibration_ms']:.0f}" if before else "-"
        for kind, fig in after["kinds"].items():
            old = before["kinds"][kind][figure] if before else None
            print(f"{n:<6} {kind:<11} {_cell(old, fig[figure], scale)}  ({cal} / {after['calibration_ms']:.0f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=5000, help="cluster size for the per-pod figure")
    ap.add_argument("--cold-nodes", type=int, default=1000, help="cluster size for the cold start")
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3, help="fresh clusters per kind in one round (least kept)")
    ap.add_argument("--rounds", type=int, default=2, help="filed then now, this many times")
    ap.add_argument("--commit", default=FILED, help="the 'before' commit")
    args = ap.parse_args()
    if min(args.nodes, args.cold_nodes, args.pods, args.runs, args.rounds) < 1:
        ap.error("every count takes a positive number")
    with tempfile.TemporaryDirectory(prefix="koord-filed-") as tmp:
        why = archive(args.commit, Path(tmp))
        if why is not None:
            print(f"the 'before' commit {args.commit} cannot be read ({why}): this tree alone")
        filed = None if why is not None else Path(tmp)
        per_pod: list[tuple[dict[str, Any] | None, dict[str, Any]]] = []
        cold: list[tuple[dict[str, Any] | None, dict[str, Any]]] = []
        try:
            for _ in range(args.rounds):
                before = measure(filed, args.nodes, args.pods, args.runs, GPU_KINDS) if filed else None
                per_pod.append((before, measure(None, args.nodes, args.pods, args.runs, GPU_KINDS)))
                before = measure(filed, args.cold_nodes, args.pods, args.runs, GPU_KINDS) if filed else None
                cold.append((before, measure(None, args.cold_nodes, args.pods, args.runs, GPU_KINDS)))
        except subprocess.CalledProcessError as e:
            said = (e.stderr or "").strip().splitlines()
            print(f"benchmarks.schedcpu failed (exit {e.returncode}): {said[-1] if said else 'no message'}",
                  file=sys.stderr)
            return 1
    table(f"per-pod CPU, median pod, {args.nodes} nodes x 8 GPUs, {args.pods} pods after prepare(), least of "
          f"{args.runs} runs; filed = {args.commit}", "us", "median", 1e6, per_pod)
    table(f"cold start CPU: prepare() + {args.pods} pods, {args.cold_nodes} nodes x 8 GPUs, least of {args.runs} "
          "runs", "ms", "cold", 1e3, cold)
    return 0


if __name__ == "__main__":
    sys.exit(main())
