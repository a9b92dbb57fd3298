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
        log.error("run: not built yet: koord-descheduler in a cluster (rounds, leader election, PodMigrationJobs) "
                  "comes later; use `koord-descheduler simulate`")
        return 2
    try:
        config = load_config(ns.config)
    except ConfigError as e:
        log.error("invalid --config: %s", e)
        return 2
    if not ns.cluster:
        log.error("simulate: --cluster is required (a file or directory of objects)")
        return 2
    if not os.path.exists(ns.cluster):
        log.error("simulate: --cluster %s: no such file or directory", ns.cluster)
        return 2
    try:
        rounds = int(ns.rounds)
    except ValueError:
        rounds = 0
    if rounds < 1:
        log.error("simulate: --rounds %s: want a whole number of rounds, 1 or more", ns.rounds)
        return 2
    now = time.time() if ns.now is None else parse_time(ns.now)
    if now is None:
        log.error("simulate: --now %s: want an RFC 3339 time such as 2024-01-01T00:00:00Z", ns.now)
        return 2
    try:
        objects = load_objects(ns.cluster)
    except (OSError, ValueError, yaml.YAMLError) as e:
        log.error("simulate: reading the objects: %s", " ".join(str(e).split()))
        return 2
    try:
        result = simulate(objects, config, rounds=rounds, now=now)
    except (ConfigError, FrameworkError) as e:
        log.error("invalid --config: %s", e)
        return 2
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
    for err in result.get("errors") or []:
        lines.append(f"round {err['round']} failed: {err['error']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
