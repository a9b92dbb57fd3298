"""`koord-sched simulate`: where would these pods land on this cluster, and why not elsewhere?"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import ssl
import sys
import threading
from collections.abc import Sequence
from typing import Any

import yaml

from apis.client.kubeapi import KubeClient, KubeConfig
from apis.core.errors import KoordletError
from apis.core.objects import JSON
from apis.core.shape import object_ident
from scheduler import kubeflags, tlsserve
from scheduler.cluster import Cluster, build_cluster, key, load_objects, pod_problem
from scheduler.config import ConfigError, SchedulerConfig, load_config
from scheduler.config.describe import describe
from scheduler.elasticquota.plugin import NAME as ELASTIC_QUOTA
from scheduler.elasticquota.plugin import ElasticQuota
from scheduler.elasticquota.profile import apply_profiles, with_tree_affinity
from scheduler.extender import ClusterSource, Extender, parse_addr, serve
from scheduler.framework import Profile, Scheduler
from scheduler.gang.model import parse_go_duration
from scheduler.gang.planner import plan_jobs
from scheduler.interfaces import Placement
from scheduler.leaderelection import LeaderElector, LeaseConfig
from scheduler.metrics import SchedulerMetrics
from scheduler.noderesource import cli as noderesource_cli
from scheduler.noderesource.fill import config_of, fill_amplification, fill_missing
from scheduler.queue.pending import MAX_IN_UNSCHEDULABLE_SECONDS
from scheduler.registry import build
from scheduler.reservation.plugin import NAME as RESERVATION_PLUGIN
from scheduler.reservation.plugin import ReservationPlugin
from scheduler.runner import SecondaryScheduler
from scheduler.services import DiagnosisAPI, DiagnosisServer

log = logging.getLogger("koord-sched")
CONFIG_HELP = "KubeSchedulerConfiguration (v1) file, or the koord-scheduler ConfigMap holding one"


def profile(config: str | SchedulerConfig | None, *, simulate: bool = False, topology_manager: bool = True
            ) -> Profile:
    """Fresh plugin instances of the profile, for `Scheduler(cluster, profile(...))`.

    `config` is a --config path (read each call), a parsed SchedulerConfig, or None for the defaults;
    `topology_manager` is --enable-network-topology-manager (a library caller gets the manager)."""
    return build(config if isinstance(config, SchedulerConfig) else load_config(config), simulate=simulate,
                 topology_manager=topology_manager)


def simulate(cluster: Cluster, pods: list[JSON], config: str | SchedulerConfig | None = None, *,
             topology_manager: bool = True) -> JSON:
    """Place the pods in order; gang members as whole jobs (all-or-nothing, network topology, job preemption).
    Reservation objects among them (and pending ones of the cluster, first) are placed as their template pod.

    Preemption planning and network-topology awareness are on unless the config turns them off, and the network
    topology manager unless `topology_manager` is false: a simulation answers "what would the scheduler do with
    them" (upstream's CoschedulingArgs default both to false, its --enable-network-topology-manager too)."""
    for eqp, reason in apply_profiles(cluster, cluster.quota_profiles):  # koord-manager's part, restated
        log.warning("ElasticQuotaProfile %s skipped: %s", eqp, reason)
    pods = with_tree_affinity(pods, cluster, cluster.quota_profiles)
    sched = Scheduler(cluster, profile(config, simulate=True, topology_manager=topology_manager))
    resv = sched.plugin(RESERVATION_PLUGIN, ReservationPlugin)
    if resv is not None:
        resv.bind(cluster)
        for r in sorted(resv.book.values(), key=lambda r: r.name):  # --cluster's pending ones first
            resv.schedule_reservation(sched, r)
    placements: list[Placement] = []
    preemptions: list[Any] = []
    # Pods and Reservations in --pods order: each run of pods is planned as before, each Reservation placed.
    batch: list[JSON] = []
    for obj in [*pods, None]:
        why = None if obj is None else pod_problem(obj) if isinstance(obj, dict) else "not an object"
        if why is None and obj is not None and obj.get("kind", "Pod") == "Pod":
            batch.append(obj)
            continue
        if batch:
            got, pre = plan_jobs(sched, batch)
            placements += got
            preemptions += pre
            batch = []
        if obj is None:
            break
        if why is not None:  # refused as the API server would refuse it: one line, naming the field
            name, _ = object_ident(obj)
            placements.append(Placement(name, None, reason=f"invalid {_kind(obj)}: {why}"))
            continue
        if resv is None:
            log.warning("Reservation %s ignored: the Reservation plugin is disabled", key(obj))
        else:
            resv.schedule_reservation(sched, resv.add(obj))
    result: JSON = {"placements": [p.as_json() for p in placements], "preemptions": preemptions}
    if resv is not None and (resv.book or any(isinstance(o, dict) and o.get("kind") == "Reservation" for o in pods)):
        result["reservations"] = resv.report()
        preemptions += resv.preemptions
    quota = sched.plugin(ELASTIC_QUOTA, ElasticQuota)
    if quota is not None and cluster.elastic_quotas:
        result.update(quota_report(quota, placements))
    return result


def _kind(obj: object) -> str:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) and kind else "object"


def quota_report(quota: ElasticQuota, placements: list[Placement]) -> JSON:
    """Per quota: min, max, runtime, used and the pods ElasticQuota refused; and the objects left out."""
    unplaced = {p.pod for p in placements if p.node is None}
    refused: dict[str, list[str]] = {}
    for pod_key, reason in quota.refused.items():
        if pod_key in unplaced:
            name = reason.split("quotaName: ", 1)[-1].split(",", 1)[0]
            refused.setdefault(name, []).append(pod_key)
    rows = []
    for name, s in quota.summaries().items():
        if name in ("koordinator-system-quota", "koordinator-default-quota") and not s["used"] and not refused.get(
                name):
            continue
        row = {"name": name, "parent": s["parentName"], "min": s["min"], "max": s["max"],
               "runtime": s["runtime"], "used": s["used"], "request": s["request"],
               "refused": sorted(refused.get(name, []))}
        if s["tree"]:
            row["tree"] = s["tree"]
        rows.append(row)
    out: JSON = {"quotas": rows, "rejectedQuotas": [{"quota": k, "reason": why} for k, why in quota.rejected]}
    if quota.revokes:
        out["revocations"] = quota.revocations()
    return out


def table(result: JSON) -> str:
    lines = []
    for p in result["placements"]:
        if p["node"]:
            extra = f"  {', '.join(f'{k}={v}' for k, v in p['annotations'].items())}" if p["annotations"] else ""
            lines.append(f"{p['pod']:<40} -> {p['node']}{extra}")
        else:
            lines.append(f"{p['pod']:<40} -> (unschedulable) {p['reason']}")
    if result.get("quotas"):
        def fmt(r: dict[str, str]) -> str:
            return ",".join(f"{k}:{v}" for k, v in r.items()) or "-"
        lines += ["", f"{'QUOTA':<28} {'PARENT':<24} {'MIN':<20} {'MAX':<20} {'RUNTIME':<20} {'USED':<20} REFUSED"]
        for q in result["quotas"]:
            lines.append(f"{q['name']:<28} {q['parent']:<24} {fmt(q['min']):<20} {fmt(q['max']):<20} "
                         f"{fmt(q['runtime']):<20} {fmt(q['used']):<20} {', '.join(q['refused']) or '-'}")
    if result.get("reservations"):
        lines += ["", f"{'RESERVATION':<28} {'NODE':<20} {'PHASE':<10} OWNERS"]
        for r in result["reservations"]:
            lines.append(f"{r['name']:<28} {r['node'] or '-':<20} {r['phase']:<10} {', '.join(r['owners']) or '-'}"
                         f"{'  ' + r['reason'] if r.get('reason') else ''}")
    for r in result.get("rejectedQuotas") or []:
        lines.append(f"ElasticQuota {r['quota']} left out: {r['reason']}")
    for r in result.get("revocations") or []:
        lines.append(f"ElasticQuota {r['quota']} uses {r['used']} over its runtime {r['runtime']}: after "
                     f"delayEvictTime, revokes {', '.join(r['pods'])}")
    return "\n".join(lines) + "\n"


def extender(ns: argparse.Namespace) -> int:
    try:
        kube = KubeConfig.load(ns.kubeconfig)
        if kube is None:
            log.error("no kubeconfig: pass --kubeconfig, set $KUBECONFIG or run in a pod")
            return 2
        cfg: SchedulerConfig = ns.cfg
        # Fresh plugins per re-list: their device state is derived from the listed pods.
        metrics = SchedulerMetrics(cfg.scheduler_name)
        ext = Extender(ClusterSource(KubeClient(kube)), lambda c: Scheduler(c, profile(cfg), metrics=metrics))
        ext.metrics = metrics
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())  # kubelet's stop: close cleanly, exit 0
        ext.refresh()
        if not stop.is_set():
            serve(ext, ns.addr, ns.prefix, ns.resync, stop=stop, tls=ns.tls)
    except (KoordletError, OSError, ValueError) as e:
        log.error("extender: %s", e)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def run(ns: argparse.Namespace) -> int:
    interval = parse_go_duration(ns.interval)
    if interval is None:
        try:
            interval = float(ns.interval)
        except ValueError:
            log.error("run: invalid --interval %r (want a Go duration such as 1s or 500ms)", ns.interval)
            return 2
    try:
        kube = KubeConfig.load(ns.kubeconfig)
        if kube is None:
            log.error("no kubeconfig: pass --kubeconfig, set $KUBECONFIG or run in a pod")
            return 2
        cfg: SchedulerConfig = ns.cfg
        cos = cfg.plugin_args("Coscheduling")
        # Fresh plugins per cycle: their device state is derived from the cache's snapshot of the pods. `--once`
        # lists once; the loop watches (no list request in a steady cycle).
        # --enable-network-topology-manager defaults to false as upstream's (frameworkext): off, no tree is kept
        # (no ClusterNetworkTopology status written) and a gang carrying a network-topology-spec is refused
        topology = ns.enable_network_topology_manager is True
        runner = SecondaryScheduler(KubeClient(kube), ns.scheduler_name,
                                    lambda c: Scheduler(c, profile(cfg, topology_manager=topology)),
                                    default_timeout=cos.default_timeout, enable_preemption=cos.enable_preemption,
                                    watch=not ns.once, write_topology_status=topology,
                                    max_unschedulable=ns.pod_max_in_unschedulable or MAX_IN_UNSCHEDULABLE_SECONDS,
                                    record_events=True)
        runner.metrics = SchedulerMetrics(ns.scheduler_name)
        if ns.once:
            if ns.elect:
                log.info("--once: one cycle without leader election")
            placements = runner.run_once()
            sys.stdout.write(table({"placements": [p.as_json() for p in placements]}) if placements else "")
            return 1 if runner.failures else 0
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        if ns.with_noderesource:
            try:
                noderesource_cli.start_background(kube, ns, stop)
            except ValueError as e:  # a bad --noderesource-* flag
                log.error("run: %s", e)
                return 2
        elector = None
        if ns.elect:
            le = LeaseConfig(cfg.lease_namespace, cfg.lease_name, *cfg.lease_timing)
            elector = LeaderElector(KubeClient(kube), le)
        start_servers(ns, runner, elector)
        if elector is not None:
            if not elector.acquire(stop):
                return 0
            lost = threading.Event()

            def on_lost() -> None:
                lost.set()
                stop.set()

            threading.Thread(target=elector.renew_until_lost, args=(stop, on_lost), name="leader-election",
                             daemon=True).start()
        log.info("scheduling pods of schedulerName %s every %gs", ns.scheduler_name, interval)
        runner.run(stop, max(interval, 0.0))
        if elector is not None:
            if lost.is_set():
                return 1  # kube-scheduler exits when it stops leading; the Deployment restarts it as a candidate
            elector.release()
    except (KoordletError, OSError, ValueError) as e:
        log.error("run: %s", e)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def start_servers(ns: argparse.Namespace, runner: SecondaryScheduler, elector: LeaderElector | None
                  ) -> list[DiagnosisServer]:
    """kube-scheduler's ports on `run`: --port (healthz, metrics, debug flags, the plugin services), the secure port
    (the same over TLS, when a certificate is given) and the plugin services alone on --services-port (v0.7's
    10252). The services answer on the leader only (upstream's handler: 503 on a candidate)."""
    is_leader = (lambda: elector.leading) if elector is not None else None
    tls: ssl.SSLContext | None = ns.tls
    servers: list[DiagnosisServer] = []
    addr = kubeflags.diagnosis_addr(ns)
    if addr:
        servers.append(DiagnosisServer(parse_addr(addr), DiagnosisAPI(runner.state, runner.metrics, is_leader)))
    if tls is not None and kubeflags.secure_port(ns) > 0:
        secure = DiagnosisServer((ns.bind_address or "", kubeflags.secure_port(ns)),
                                 DiagnosisAPI(runner.state, runner.metrics, is_leader))
        secure.tls = tls
        servers.append(secure)
    port = kubeflags.services_port(ns)
    if port:
        servers.append(DiagnosisServer((ns.bind_address or "", port),
                                       DiagnosisAPI(runner.state, None, is_leader, services_only=True)))
    for server in servers:
        server.start()
        what = "plugin services" if server.api.services_only else "healthz, metrics, debug flags, plugin services"
        log.info("%s on %s://%s:%s", what, server.scheme, *server.server_address[:2])
    return servers


def start_run(ns: argparse.Namespace, cfg: SchedulerConfig) -> int:
    """`run` with kube-scheduler's command line: the scheduler name from the profile unless given, the flags that
    are accepted and not acted on said once."""
    if ns.scheduler_name is None:
        if not cfg.named:
            log.error("run: no scheduler name: pass --scheduler-name, or a --config whose profile sets schedulerName")
            return 2
        ns.scheduler_name = cfg.scheduler_name
    ignored = kubeflags.not_acted_on(ns)
    if ignored:
        log.info("accepted as kube-scheduler does, not acted on by koord-sched: %s", " ".join(ignored))
    ns.elect = ns.leader_elect if ns.leader_elect is not None else cfg.leader_elect
    if ns.elect:
        log.info("leader election on: Lease %s/%s", cfg.lease_namespace, cfg.lease_name)
    return run(ns)


def parser() -> argparse.ArgumentParser:
    """koord-sched's command line (`simulate`, `extender`, `run`, `noderesource`)."""
    ap = argparse.ArgumentParser(prog="koord-sched", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="place pods on a cluster described by files")
    sim.add_argument("--cluster", help="dir (or file) of Node, Device, NodeMetric, Pod, ... objects (required)")
    sim.add_argument("--pods", help="pods (and PodGroups) to place, in order (required)")
    sim.add_argument("--config", default=None, help=CONFIG_HELP)
    sim.add_argument("-o", "--output", choices=("json", "yaml", "table"), default="table")
    sim.add_argument("--feature-gates", default=None,
                     help=f"Name=true|false,...: acted on: {', '.join(kubeflags.ACTED_GATES)}")
    sim.add_argument("--enable-network-topology-manager", type=kubeflags.go_bool, nargs="?", const=True, default=None,
                     help="the network topology manager (default here: on; `run`'s default is off, as upstream's); "
                          "off, a gang with a network-topology-spec is refused as `run` refuses it")
    ext = sub.add_parser("extender", help="kube-scheduler extender HTTP API: POST <prefix>/filter|prioritize|bind")
    ext.add_argument("--addr", default=":8080", help="listen address host:port (default :8080)")
    ext.add_argument("--config", default=None, help=CONFIG_HELP)
    ext.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube)")
    ext.add_argument("--prefix", default="", help="URL path prefix, e.g. /extender for urlPrefix .../extender")
    ext.add_argument("--resync", type=float, default=30.0, help="re-list the cluster every N seconds (0: never)")
    tlsserve.add_flags(ext)
    run_p = sub.add_parser("run", help="secondary scheduler for gang and topology jobs (binds whole gangs)")
    run_p.add_argument("--scheduler-name", default=None,
                       help="schedule pods with this spec.schedulerName (default: the --config profile's)")
    run_p.add_argument("--config", default=None, help=CONFIG_HELP)
    run_p.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube)")
    run_p.add_argument("--interval", default="1s", help="pause between scheduling cycles (Go duration, default 1s)")
    run_p.add_argument("--once", action="store_true", help="one cycle, print the placements, exit")
    run_p.add_argument("--addr", default=None,
                       help="diagnosis API and /debug/flags listen address (default :--port, else :10251; '' for none)")
    kubeflags.add_flags(run_p)
    tlsserve.add_flags(run_p)
    run_p.add_argument("--with-noderesource", action="store_true",
                       help="also run the noderesource loop (node allocatable for devices, batch and mid)")
    noderesource_cli.add_flags(run_p, prefix="noderesource-")
    noderesource_cli.add_parser(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    logging.basicConfig(level=kubeflags.log_level(ns), stream=sys.stderr,
                        format="%(levelname).1s %(name)s: %(message)s")
    if ns.command == "noderesource":  # no scheduler configuration: koord-manager's part
        return noderesource_cli.command(ns)
    try:  # before anything else: a bad config is reported first, in one line, exit 2
        ns.cfg = cfg = load_config(ns.config, getattr(ns, "scheduler_name", None))
    except ConfigError as e:
        log.error("invalid --config: %s", e)
        return 2
    for line in describe(cfg):  # the resolved plugin lists (kube-scheduler logs its component config so)
        log.log(logging.INFO if ns.config else logging.DEBUG, "%s", line)
    try:
        feature_gates = kubeflags.gates(getattr(ns, "feature_gates", None))
    except ValueError as e:
        log.error("%s", e)
        return 2
    if set(feature_gates) & set(kubeflags.ACTED_GATES):
        quota_args = cfg.plugin_args("ElasticQuota")
        quota_args.guarantee_usage = feature_gates.get(kubeflags.GUARANTEE_USAGE, False)
        quota_args.multi_quota_tree = feature_gates.get(kubeflags.MULTI_QUOTA_TREE, True)
    if ns.command in ("extender", "run"):
        try:
            ns.tls = tlsserve.server_context(ns)
        except ValueError as e:
            log.error("%s: %s", ns.command, e)
            return 2
    if ns.command == "extender":
        return extender(ns)
    if ns.command == "run":
        return start_run(ns, cfg)
    for flag, path in (("--cluster", ns.cluster), ("--pods", ns.pods)):
        if not path:
            log.error("simulate: %s is required (a file or directory of objects)", flag)
            return 2
        if not os.path.exists(path):
            log.error("simulate: %s %s: no such file or directory", flag, path)
            return 2
    try:
        objects = load_objects(ns.cluster)
        given = load_objects(ns.pods)
    except (OSError, ValueError, yaml.YAMLError) as e:  # unreadable, not JSON/YAML: one line, no traceback
        log.error("simulate: reading the objects: %s", " ".join(str(e).split()))
        return 2
    cluster = build_cluster(objects)
    fill_missing(cluster, config_of(objects))
    fill_amplification(cluster, objects)
    pods = [o for o in given if o.get("kind", "Pod") in ("Pod", "Reservation")]
    # the PodGroups and PriorityClasses given with the pods join the cluster's, read as build_cluster reads them
    catalogue = build_cluster([o for o in given if o.get("kind") in ("PodGroup", "PriorityClass")])
    cluster.podgroups.update(catalogue.podgroups)
    cluster.priority_classes.update(catalogue.priority_classes)
    result = simulate(cluster, pods, cfg, topology_manager=ns.enable_network_topology_manager is not False)
    if ns.output == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif ns.output == "yaml":  # the same object as -o json
        sys.stdout.write(yaml.safe_dump(json.loads(json.dumps(result)), sort_keys=False))
    else:
        sys.stdout.write(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
