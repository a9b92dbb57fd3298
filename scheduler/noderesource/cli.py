"""`koord-sched noderesource` and `koord-sched run --with-noderesource`: flags, one pass or the loop, the table."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading

from apis.client.kubeapi import KubeClient, KubeConfig, TokenBucket
from apis.core.errors import KoordletError
from scheduler.gang.model import parse_go_duration
from scheduler.noderesource.apply import format_value
from scheduler.noderesource.controller import NodeResourceController, PassResult, parse_gates
from scheduler.noderesource.strategy import CONFIG_NAMESPACE

log = logging.getLogger("koord-sched")
DEFAULT_INTERVAL = "30s"


def add_flags(p: argparse.ArgumentParser, *, prefix: str = "") -> None:
    """The loop's flags; `run` takes them as --noderesource-interval etc. beside --with-noderesource."""
    p.add_argument(f"--{prefix}interval", dest="nr_interval", default=DEFAULT_INTERVAL,
                   help=f"pause between node resource passes (Go duration, default {DEFAULT_INTERVAL})")
    p.add_argument(f"--{prefix}feature-gates", dest="nr_feature_gates", default="",
                   help="koord-manager gates of the loop: EnableSyncGPUSharedResource=true|false (default false)")
    p.add_argument(f"--{prefix}rest-config-qps", dest="nr_qps", default=30.0, type=float,
                   help="API requests a second of the loop (koord-manager's --rest-config-qps, default 30)")
    p.add_argument(f"--{prefix}rest-config-burst", dest="nr_burst", default=50, type=int,
                   help="burst of that limit (koord-manager's --rest-config-burst, default 50)")
    p.add_argument("--config-namespace", dest="nr_config_namespace", default=CONFIG_NAMESPACE,
                   help=f"namespace of the slo-controller-config ConfigMap (default {CONFIG_NAMESPACE})")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    nr = sub.add_parser("noderesource", help="write node allocatable for devices, batch and mid resources "
                                             "(koord-manager's noderesource controller)")
    nr.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube)")
    add_flags(nr)
    nr.add_argument("--once", action="store_true", help="one pass, print what was written, exit")
    nr.add_argument("--dry-run", action="store_true", help="with --once: compute and print, write nothing")
    nr.add_argument("-o", "--output", choices=("table", "json"), default="table")


def _interval(text: str) -> float | None:
    seconds = parse_go_duration(text)
    if seconds is None:
        try:
            seconds = float(text)
        except ValueError:
            return None
    return max(seconds, 0.0)


def client(kube: KubeConfig, ns: argparse.Namespace) -> KubeClient:
    """A client of its own, at koord-manager's rate (not the scheduler's)."""
    return KubeClient(kube, limiter=TokenBucket(ns.nr_qps, ns.nr_burst))


def controller(client: KubeClient, ns: argparse.Namespace, *, dry_run: bool = False) -> NodeResourceController:
    """ValueError (one line naming the flag) for a bad --feature-gates."""
    gates = parse_gates(ns.nr_feature_gates)
    return NodeResourceController(client, sync_gpu_shared=gates["EnableSyncGPUSharedResource"],
                                  config_namespace=ns.nr_config_namespace, dry_run=dry_run)


def start_background(kube: KubeConfig, ns: argparse.Namespace, stop: threading.Event) -> threading.Thread:
    """`run --with-noderesource`: the loop in a daemon thread with its own client, stopped with the scheduler."""
    interval = _interval(ns.nr_interval)
    if interval is None:
        raise ValueError(f"invalid --noderesource-interval {ns.nr_interval!r} (want a Go duration such as 30s)")
    ctl = controller(client(kube, ns), ns)
    thread = threading.Thread(target=ctl.run, args=(stop, interval), name="noderesource", daemon=True)
    thread.start()
    log.info("node resources (devices, batch, mid) written every %gs", interval)
    return thread


def table(result: PassResult) -> str:
    lines = [f"{'NODE':<28} {'ACTION':<10} RESOURCES"]
    for o in result.nodes:
        action = "error" if o.error else ("write" if o.plan.status or o.plan.labels else "unchanged")
        shown = ", ".join(f"{k}={format_value(k, v)}" for k, v in sorted(o.resources.resources.items()))
        removed = sorted(r for r in o.resources.resets if r in o.plan.status)
        if removed:
            shown += (", " if shown else "") + "removed: " + ", ".join(removed)
        lines.append(f"{o.node:<28} {action:<10} {shown or '-'}{'  ' + o.error if o.error else ''}")
    if result.config_error:
        lines.append(f"colocation config refused: {result.config_error}")
    return "\n".join(lines) + "\n"


def as_json(result: PassResult) -> str:
    return json.dumps({"nodes": [{"node": o.node, "resources": {k: format_value(k, v) for k, v in
                                                                 sorted(o.resources.resources.items())},
                                  "status": o.plan.status, "labels": o.plan.labels, "reasons": o.plan.reasons,
                                  "messages": o.resources.messages, **({"error": o.error} if o.error else {}),
                                  **({"annotations": o.annotations} if o.annotations else {})}
                                 for o in result.nodes],
                       "statusWrites": result.status_writes, "labelWrites": result.label_writes,
                       "annotationWrites": result.annotation_writes,
                       **({"configError": result.config_error} if result.config_error else {})}, indent=2) + "\n"


def command(ns: argparse.Namespace) -> int:
    interval = _interval(ns.nr_interval)
    if interval is None:
        log.error("noderesource: invalid --interval %r (want a Go duration such as 30s)", ns.nr_interval)
        return 2
    if ns.dry_run and not ns.once:
        log.error("noderesource: --dry-run needs --once")
        return 2
    try:
        kube = KubeConfig.load(ns.kubeconfig)
        if kube is None:
            log.error("no kubeconfig: pass --kubeconfig, set $KUBECONFIG or run in a pod")
            return 2
        ctl = controller(client(kube, ns), ns, dry_run=ns.dry_run)
    except ValueError as e:
        log.error("noderesource: %s", e)
        return 2
    except KoordletError as e:
        log.error("noderesource: %s", e)
        return 1
    try:
        if ns.once:
            result = ctl.run_once()
            sys.stdout.write(as_json(result) if ns.output == "json" else table(result))
            return 1 if result.errors or (result.config_error and ctl.config is None) else 0
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        log.info("node resources (devices, batch, mid) written every %gs", interval)
        ctl.run(stop, interval)
    except (KoordletError, OSError) as e:
        log.error("noderesource: %s", e)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
