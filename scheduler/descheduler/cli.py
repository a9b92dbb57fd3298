"""`koord-descheduler`: Koordinator's descheduler. `simulate` runs descheduling rounds over a directory of objects
and prints what they would evict; `run` (in a cluster) is not built yet."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence

import yaml

from apis.core.metatime import parse_time
from apis.core.objects import JSON
from scheduler.cluster import load_objects
from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.decode import load_config
from scheduler.descheduler.framework import FrameworkError
from scheduler.descheduler.runner import simulate

log = logging.getLogger("koord-descheduler")
CONFIG_HELP = "DeschedulerConfiguration (descheduler/v1alpha2) file, or the ConfigMap holding one"


def fail(message: str) -> int:
    """A command-line or configuration mistake: one line on stderr, exit 2."""
    sys.stderr.write(f"koord-descheduler: {message}\n")
    return 2


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="koord-descheduler", description=__doc__)
    ap.add_argument("-v", "--verbose", action="store_true", help="log each decision on stderr")
    sub = ap.add_subparsers(dest="command")
    sim = sub.add_parser("simulate", help="descheduling rounds over a directory of objects")
    sim.add_argument("--cluster", help="dir (or file) of Node, Pod, NodeMetric, PodDisruptionBudget, ... objects "
                                       "(required)")
    sim.add_argument("--config", default=None, help=CONFIG_HELP)
    sim.add_argument("--rounds", default="1", help="rounds over the same state (default 1)")
    sim.add_argument("--now", default=None,
                     help="the first round's time, RFC 3339 (default: now); later rounds add deschedulingInterval")
    sim.add_argument("-o", "--output", choices=("json", "yaml", "table"), default="json")
    run = sub.add_parser("run", help="descheduling in a cluster (not built yet)")
    run.add_argument("--config", default=None, help=CONFIG_HELP)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if ns.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname).1s %(name)s: %(message)s")
    if ns.command in (None, "run"):
        return fail("run: not built yet: koord-descheduler in a cluster (rounds, leader election, PodMigrationJobs) "
                  "comes later; use `koord-descheduler simulate`")
    try:
        config = load_config(ns.config)
    except ConfigError as e:
        return fail(f"invalid --config: {e}")
    if not ns.cluster:
        return fail("simulate: --cluster is required (a file or directory of objects)")
    if not os.path.exists(ns.cluster):
        return fail(f"simulate: --cluster {ns.cluster}: no such file or directory")
    try:
        rounds = int(ns.rounds)
    except ValueError:
        rounds = 0
    if rounds < 1:
        return fail(f"simulate: --rounds {ns.rounds}: want a whole number of rounds, 1 or more")
    now = time.time() if ns.now is None else parse_time(ns.now)
    if now is None:
        return fail(f"simulate: --now {ns.now}: want an RFC 3339 time such as 2024-01-01T00:00:00Z")
    try:
        objects = load_objects(ns.cluster)
    except (OSError, ValueError, yaml.YAMLError) as e:
        return fail(f"simulate: reading the objects: {' '.join(str(e).split())}")
    try:
        result = simulate(objects, config, rounds=rounds, now=now)
    except (ConfigError, FrameworkError) as e:
        return fail(f"invalid --config: {e}")
    if ns.output == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif ns.output == "yaml":
        sys.stdout.write(yaml.safe_dump(result, sort_keys=False))
    else:
        sys.stdout.write(table(result))
    return 0


def table(result: JSON) -> str:
    lines = [f"{'POD':<40} {'NODE':<20} {'PLUGIN':<20} REASON"]
    for e in result.get("evictions") or []:
        lines.append(f"{e['namespace'] + '/' + e['name']:<40} {e['node']:<20} {e['plugin']:<20} {e['reason']}")
    nodes = result.get("nodes") or {}
    for pool, rows in nodes.items():
        lines += ["", f"POOL {pool}", f"{'NODE':<20} {'CLASS':<10} {'ABNORMALITIES':<14} ANOMALY"]
        for node, row in rows.items():
            lines.append(f"{node:<20} {row['class'] or '-':<10} {row['abnormalities']:<14} "
                         f"{'yes' if row['anomaly'] else 'no'}")
    jobs = result.get("podMigrationJobs")
    if jobs:
        lines += ["", f"{'PODMIGRATIONJOB':<38} {'POD':<40} {'MODE':<17} PHASE"]
        for job in jobs:
            ref = job["spec"]["podRef"]
            lines.append(f"{job['metadata']['name']:<38} {ref['namespace'] + '/' + ref['name']:<40} "
                         f"{job['spec'].get('mode') or '-':<17} {(job.get('status') or {}).get('phase') or '-'}")
    for err in result.get("errors") or []:
        lines.append(f"round {err['round']} failed: {err['error']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
