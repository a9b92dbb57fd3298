"""`koord-descheduler`: Koordinator's descheduler. `run` (also with no subcommand, as upstream's binary) deschedules
in a cluster every deschedulingInterval; `simulate` runs descheduling rounds over a directory of objects and prints
what they would evict."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import NoReturn

import yaml

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.core.errors import KoordletError
from apis.core.metatime import parse_time
from apis.core.objects import JSON
from scheduler import kubeflags
from scheduler.cluster import load_objects
from scheduler.descheduler import flags
from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.decode import load_config
from scheduler.descheduler.config.types import DeschedulerConfig
from scheduler.descheduler.framework import FrameworkError
from scheduler.descheduler.runner import simulate
from scheduler.descheduler.server import InCluster, lead_and_run, leader_health, lease_config
from scheduler.descheduler.serving import HealthServer, split_address
from scheduler.leaderelection import LeaderElector

log = logging.getLogger("koord-descheduler")
CONFIG_HELP = "DeschedulerConfiguration (descheduler/v1alpha2) file, or the ConfigMap holding one"


def fail(message: str) -> int:
    """A command-line or configuration mistake: one line on stderr, exit 2."""
    sys.stderr.write(f"koord-descheduler: {message}\n")
    return 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, its mistakes said in one line (no usage block) with exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="koord-descheduler", description=__doc__)
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
    flags.add_feature_gates(sim)
    run = sub.add_parser("run", help="descheduling in a cluster, every deschedulingInterval (the default command)")
    flags.add_flags(run)
    return ap


def with_command(argv: Sequence[str]) -> list[str]:
    """Upstream's binary takes no subcommand: `koord-descheduler --config=...` is `run --config=...`."""
    args = list(argv)
    if any(a in ("simulate", "run") for a in args) or args[:1] in (["-h"], ["--help"]):
        return args
    return ["run", *args]


def main(argv: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(with_command(sys.argv[1:] if argv is None else argv))
    if ns.command == "run":
        logging.basicConfig(level=kubeflags.log_level(ns), stream=sys.stderr,
                            format="%(levelname).1s %(name)s: %(message)s")
    else:
        logging.basicConfig(level=logging.INFO if ns.verbose else logging.WARNING, stream=sys.stderr,
                            format="%(levelname).1s %(name)s: %(message)s")
    try:
        config = load_config(ns.config)
    except ConfigError as e:
        return fail(f"invalid --config: {e}")
    if ns.command == "run":
        return run(ns, config)
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
        gates = flags.feature_gates(ns)
    except ValueError as e:
        return fail(f"simulate: {e}")
    try:
        objects = load_objects(ns.cluster)
    except (OSError, ValueError, yaml.YAMLError) as e:
        return fail(f"simulate: reading the objects: {' '.join(str(e).split())}")
    if not any(o.get("kind") == "Node" for o in objects):
        return fail(f"simulate: --cluster {ns.cluster}: no Node objects in it (read: *.yaml, *.yml, *.json)")
    for lacking in gates.not_built_on():
        log.warning("feature gate %s", lacking)
    try:
        result = simulate(objects, config, rounds=rounds, now=now, gates=gates)
    except (ConfigError, FrameworkError) as e:
        return fail(f"invalid --config: {e}")
    except KeyboardInterrupt:
        return 130
    if ns.output == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif ns.output == "yaml":
        sys.stdout.write(yaml.safe_dump(result, sort_keys=False))
    else:
        sys.stdout.write(table(result))
    return 0


def run(ns: argparse.Namespace, config: DeschedulerConfig) -> int:
    """In the cluster until SIGTERM (exit 0), a lost Lease (exit 1), or after one round with deschedulingInterval 0.
    Mistakes in the configuration or the command line: one line, exit 2."""
    try:
        config = flags.applied(ns, config)
        gates = flags.feature_gates(ns)
        kube = KubeConfig.load(ns.kubeconfig or config.client_connection.kubeconfig or None)
    except (ValueError, KoordletError) as e:
        return fail(f"run: {e}")
    if kube is None:
        return fail("run: no kubeconfig: pass --kubeconfig, set $KUBECONFIG or run in a pod")
    kube.qps, kube.burst = config.client_connection.qps, config.client_connection.burst
    ignored = flags.not_acted_on(ns)
    if ignored:
        log.info("accepted as upstream's koord-descheduler does, not acted on: %s", " ".join(ignored))
    for lacking in gates.not_built_on():
        log.warning("feature gate %s", lacking)
    try:
        rounds = InCluster(KubeClient(kube), config, gates=gates)
    except (ConfigError, FrameworkError) as e:
        return fail(f"invalid --config: {e}")
    elector = LeaderElector(KubeClient(kube), lease_config(config)) if config.leader_election.leader_elect else None
    if elector is not None:
        log.info("leader election on: Lease %s/%s", elector.config.namespace, elector.config.name)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    servers: list[HealthServer] = []
    try:
        for addr in dict.fromkeys(a for a in (config.healthz_bind_address, config.metrics_bind_address) if a):
            server = HealthServer(split_address(addr), rounds.metrics, leader_health(elector))
            server.start()
            servers.append(server)
            log.info("/healthz and /metrics on http://%s:%s", *server.server_address[:2])
    except (OSError, ValueError) as e:
        return fail(f"run: serving /healthz and /metrics: {e}")
    try:
        return lead_and_run(rounds, elector, stop)
    except KeyboardInterrupt:
        return 0
    finally:
        for server in servers:
            server.stop()


def table(result: JSON) -> str:
    lines = [f"{'POD':<40} {'NODE':<20} {'PLUGIN':<20} REASON"]
    for e in result.get("evictions") or []:
        lines.append(f"{e['namespace'] + '/' + e['name']:<40} {e['node']:<20} {e['plugin']:<20} {e['reason']}")
    nodes = result.get("nodes") or {}
    for pool, rows in nodes.items():
        lines += ["", f"POOL {pool}", f"{'NODE':<20} {'CLASS':<10} {'ABNORMALITIES':<14} {'ABNORMAL':<9} ANOMALY"]
        for node, row in rows.items():
            lines.append(f"{node:<20} {row['class'] or '-':<10} {row['abnormalities']:<14} "
                         f"{'yes' if row.get('abnormal') else 'no':<9} {'yes' if row['anomaly'] else 'no'}")
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
