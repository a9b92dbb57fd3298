"""`koordlet run | nodemetric | version`: upstream koordlet flags plus standalone options (pods dir, NodeSLO)."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import yaml

from apis.core.errors import InvalidInput
from koordlet import __version__, flagtable, goflag, logsetup, tables
from koordlet.config import Config, EvictConfig, NriConfig, PodResourcesProxyConfig, parse_feature_gates
from koordlet.flagtable import COMMANDS, options_of
from koordlet.goflag import FlagError
from koordlet.host.paths import DS_DEFAULTS, HOST_MODE_DEFAULTS, ROOT_FLAGS, resolve_roots
from koordlet.prediction.server import PredictionConfig

if TYPE_CHECKING:  # the agent's modules load only for the commands that build one
    from koordlet.agent import Agent

log = logging.getLogger("koordlet")

# Roots without which a command would report nothing (an empty report is worse than an error); the others may be
# absent on a given host (no resctrl, no kubelet dir, no xPU device-info dir) and only disable what reads them.
REQUIRED_ROOTS: dict[str, frozenset[str]] = {
    "run": frozenset({"cgroup_root", "proc_root"}),
    "nodemetric": frozenset({"cgroup_root", "proc_root"}),
    "sched-latency": frozenset({"cgroup_root", "proc_root"}),
    "plan": frozenset({"cgroup_root", "proc_root"}),
    "qos": frozenset({"cgroup_root", "proc_root"}),
    "devices": frozenset({"sys_root"}),
    "device-daemon": frozenset({"sys_root"}),
}
# Files and directories the user names explicitly and a command reads: a missing one is a command-line mistake.
_MUST_EXIST = {"pods_dir": ("--pods-dir", os.path.isdir), "nodeslo_file": ("--nodeslo", os.path.isfile),
               "nvml_snapshot": ("--nvml-snapshot", os.path.isfile), "kubeconfig": ("--kubeconfig", os.path.isfile)}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command (no command: `run`, as upstream's binary) and every option's value, parsed with Go's flag syntax.
    FlagError (one line) on a mistake; `ns.help` asks for the command's usage."""
    args = list(argv)
    name = "run"
    if args and not args[0].startswith("-"):
        name = args.pop(0)
        if name not in COMMANDS:
            raise FlagError(f"unknown command {name!r} (commands: {', '.join(COMMANDS)})")
    command = COMMANDS[name]
    options = options_of(command)
    flags = {o.name: o.flag for o in options}
    aliases = command.aliases or {}
    parsed = goflag.parse(flags, [_alias(a, aliases) for a in args])
    if parsed.rest:
        raise FlagError(f"unexpected argument {parsed.rest[0]!r} ({name} takes flags only; see koordlet {name} -h)")
    ns = argparse.Namespace(command=name, help=parsed.help, given=dict(parsed.given))
    for o in flagtable.OPTIONS.values():  # every dest, so one Config builder serves every command
        setattr(ns, o.dest, parsed.values[o.name] if o.name in parsed.given else o.initial())
    return ns


def _alias(arg: str, aliases: Mapping[str, str]) -> str:
    """`-o json` → `-output json`: a command's short names for its options."""
    if not arg.startswith("-") or arg == "--":
        return arg
    dashes = "--" if arg.startswith("--") else "-"
    name, sep, value = arg[len(dashes):].partition("=")
    return f"{dashes}{aliases[name]}{sep}{value}" if name in aliases else arg


def usage(name: str) -> str:
    """A command's help: what it does, its options with their defaults (only its own), and the other commands."""
    command = COMMANDS[name]
    head = f"koordlet {name}: {command.summary}\n"
    if name == "run":
        head = ("koordlet [command] [flags]: Koordinator's node agent; without a command it runs the agent, taking "
                "upstream koordlet's flags (-flag=value, --flag value, bare booleans).\n\ncommands:\n"
                + "".join(f"  {c.name:<14} {c.summary}\n" for c in COMMANDS.values())
                + "\nflags of run (each command's own: koordlet <command> -h):\n")
    if not command.groups:
        return head
    sections = []
    for group in command.groups:
        opts = [o for o in options_of(command) if o.group == group]
        if opts:
            sections.append(f"{_GROUP_TITLES.get(group, group)}:\n" + goflag.usage(
                [_with_absent(o) for o in opts]))
    aliases = command.aliases or {}
    shorts = "".join(f"  -{k} is -{v}\n" for k, v in aliases.items() if k != v and len(k) == 1)
    return head + "\n".join(sections) + shorts


def _with_absent(o: flagtable.Option) -> goflag.Flag:
    if not o.absent:
        return o.flag
    return replace(o.flag, help=f"{o.flag.help} [accepted; {o.absent}]")


_GROUP_TITLES = {
    "host": "node and host paths", "source": "pods, NodeSLO and the API server", "daemon": "the daemon",
    "states": "kubelet and reports", "collect": "collection", "devices": "devices", "qos": "QoS and evictions",
    "nri": "runtime hooks (NRI)", "podresources": "PodResources proxy", "audit": "audit", "prediction":
    "peak prediction", "log": "logging (klog's flags)", "cadvisor": "cadvisor globals (accepted, no effect)",
    "run-extra": "standalone", "output": "output", "window": "sampling", "dump": "NVML dump",
    "device-daemon": "device daemon", "once": "apply",
}


def config_from_args(ns: argparse.Namespace, env: dict[str, str] | None = None, *,
                     isdir: Callable[[str], bool] = os.path.isdir,
                     ds_defaults: Mapping[str, str] = DS_DEFAULTS,
                     host_defaults: Mapping[str, str] = HOST_MODE_DEFAULTS) -> Config:
    """The Config of a parsed command line; host roots are checked (HostRootMissing names the flag to set) and a
    missing DaemonSet default falls back to the host's own path, logged once."""
    env = dict(os.environ) if env is None else env
    for dest, (flag, exists) in _MUST_EXIST.items():
        value = getattr(ns, dest, None)
        if value and not exists(value):
            raise InvalidInput(f"{flag} {value}: no such {'directory' if exists is os.path.isdir else 'file'}")
    paths, notes = resolve_roots({k: getattr(ns, k) for k in ROOT_FLAGS}, host_root=ns.host_root or None,
                                 env=env, required=REQUIRED_ROOTS.get(ns.command, ()), isdir=isdir,
                                 ds_defaults=ds_defaults, host_defaults=host_defaults)
    for note in notes:
        log.info("%s", note)
    node_name = ns.node_name or env.get("NODE_NAME") or socket.gethostname()
    return Config(
        node_name=node_name, paths=paths, host_root=ns.host_root, addr=ns.addr,
        evict=EvictConfig(cpu_evict_interval_seconds=ns.cpu_evict_interval_seconds,
                          memory_evict_interval_seconds=ns.memory_evict_interval_seconds,
                          cpu_evict_cool_time_seconds=ns.cpu_evict_cool_time_seconds,
                          memory_evict_cool_time_seconds=ns.memory_evict_cool_time_seconds,
                          only_evict_by_api=ns.only_evict_by_api),
        feature_gates=parse_feature_gates(ns.feature_gates),
        collect_res_used_interval=ns.collect_res_used_interval, psi_collector_interval=ns.psi_collector_interval,
        collect_node_cpu_info_interval=ns.collect_node_cpu_info_interval,
        enable_pagecache_collector=ns.enable_pagecache_collector,
        disable_container_metrics=ns.disable_container_metrics,
        # client-go's rest.Config: a QPS or burst of 0 takes its defaults (5 and 10); a negative QPS is no limit
        metric_gc_interval_seconds=ns.metric_gc_interval_seconds, kube_api_qps=ns.kube_api_qps or 5.0,
        kube_api_burst=ns.kube_api_burst or 10, kubeconfig=ns.kubeconfig,
        kubelet_preferred_address_type=ns.kubelet_preferred_address_type,
        kubelet_sync_interval=ns.kubelet_sync_interval, kubelet_sync_timeout=ns.kubelet_sync_timeout,
        kubelet_insecure_tls=ns.kubelet_insecure_tls, kubelet_read_only_port=ns.kubelet_read_only_port,
        enable_node_metric_report=ns.enable_node_metric_report, pods_dir=ns.pods_dir,
        nodeslo_file=ns.nodeslo_file, state_dir=ns.state_dir,
        node_topology_sync_interval=ns.node_topology_sync_interval, xpu_device_infos_dir=ns.xpu_device_infos_dir,
        disable_query_kubelet_config=ns.disable_query_kubelet_config,
        disable_unset_cpu_quota=ns.disable_unset_cpu_quota,
        xpu_enforce_collect_from_device_infos=ns.xpu_enforce_collect_from_device_infos,
        nvml_snapshot=ns.nvml_snapshot, gpu_partition_policy=ns.gpu_partition_policy,
        gpu_health_recovery_seconds=ns.gpu_health_recovery_seconds,
        reconcile_interval_seconds=ns.reconcile_interval_seconds,
        resource_force_update_seconds=ns.resource_force_update_seconds,
        nri=NriConfig(enabled=ns.enable_nri_runtime_hook, socket_path=ns.runtime_hooks_nri_socket_path,
                      plugin_name=ns.runtime_hooks_nri_plugin_name, plugin_index=ns.runtime_hooks_nri_plugin_index,
                      connect_timeout=ns.runtime_hooks_nri_connect_timeout,
                      backoff_duration=ns.runtime_hooks_nri_backoff_duration,
                      backoff_factor=ns.runtime_hooks_nri_backoff_factor,
                      backoff_cap=ns.runtime_hooks_nri_backoff_cap, gpu_env_uuid=ns.runtime_hooks_gpu_env_uuid,
                      xpu_device_inject=ns.runtime_hooks_xpu_device_inject,
                      hami_core_library_path=ns.hami_core_library_directory_path),
        pod_resources_proxy=PodResourcesProxyConfig(
            path=ns.pod_resources_proxy_path, qps=ns.pod_resources_proxy_qps, burst=ns.pod_resources_proxy_burst,
            max_age=ns.pod_resources_proxy_max_age, kubelet_timeout=ns.pod_resources_proxy_kubelet_timeout),
        prediction=PredictionConfig(
            checkpoint_filepath=ns.prediction_checkpoint_filepath or _cluster_checkpoints(ns, isdir),
            cold_start_duration=ns.prediction_cold_start_duration,
            safety_margin_percent=ns.prediction_safety_margin_percent,
            memory_histogram_decay_halflife=ns.prediction_memory_histogram_decay_halflife,
            cpu_histogram_decay_halflife=ns.prediction_cpu_histogram_decay_halflife,
            training_interval=ns.prediction_training_interval,
            model_expiration_duration=ns.prediction_model_expiration_duration,
            model_checkpoint_interval=ns.prediction_model_checkpoint_interval,
            model_checkpoint_max_per_step=ns.prediction_model_checkpoint_max_per_step),
    )


def _cluster_checkpoints(ns: argparse.Namespace, isdir: Callable[[str], bool]) -> str:
    """Upstream's default checkpoint dir, where the chart mounts it (a cluster's agent); else "" (<state-dir>)."""
    default = flagtable.OPTIONS["prediction-checkpoint-filepath"].flag.default
    return default if ns.pods_dir is None and ns.host_root is None and isdir(default) else ""


def cmd_run(config: Config, example_pods_cgroups: bool = False, given: Mapping[str, str] | None = None) -> int:
    from koordlet import examplepods
    from koordlet.absent import report_absent
    from koordlet.agent import Agent
    from koordlet.banner import Seen, banner
    from koordlet.daemon import Daemon
    from koordlet.health import Health

    if example_pods_cgroups and not config.standalone:
        log.error("--example-pods-cgroups needs --pods-dir (it gives the pods listed there real cgroups)")
        return 2
    health = Health()
    examples = None
    if config.gate("CPUSchedLatency"):  # what the image's entrypoint did, whatever `command` a manifest sets
        from koordlet.schedlat.hostprep import prepare_host

        prepare_host()
    try:
        agent = Agent(config, health)
        daemon = Daemon(agent)
        try:
            daemon.bind()
        except OSError as e:
            log.error("cannot listen on --addr %s: %s%s", config.addr, e.strerror or e,
                      " (is another koordlet, e.g. upstream's, still running on this node?)"
                      if e.errno == errno.EADDRINUSE else "")
            return 2
        if not config.standalone:
            from koordlet.cluster import ClusterLink

            try:
                daemon.cluster = ClusterLink.connect(config, agent)
            except (OSError, InvalidInput) as e:
                log.error("kubeconfig: %s", one_line(e))
                return 2
            if daemon.cluster is None:
                log.error("no Kubernetes configuration found (in-cluster or --kubeconfig); "
                          "for a node without a cluster use --pods-dir (see `make run`)")
                return 2
        if example_pods_cgroups:
            # Until the daemon installs its own handlers, SIGTERM unwinds like Ctrl-C so the cgroups are removed.
            signal.signal(signal.SIGTERM, _interrupt)
            examples = examplepods.start(config, health)
        if config.standalone:
            if config.nodeslo_file:
                agent.load_nodeslo_file()
            agent.sync_pods()
            if example_pods_cgroups and examples is None:
                slo = agent.state.nodeslo()
                examplepods.quiet_missing_cgroups(health, agent.state.pods(), slo.host_apps if slo.present else [])
        seen = Seen(_first_devices(agent), None if not example_pods_cgroups else
                    examples.names if examples is not None else [])
        log.info("%s", "\n".join(banner(agent, seen)))
        report_absent(health, given or {}, config.feature_gates)
        asyncio.run(daemon.run())
        return 0
    except KeyboardInterrupt:  # SIGINT/SIGTERM before the daemon's loop took over the signals
        log.info("stopped during start-up")
        return 0
    finally:
        if examples is not None:
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                examples.stop()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _first_devices(agent: Agent) -> int | None:
    """Standalone: one device round before the loops start, so the banner can count them and the Device URL
    answers at once (the device loop then rewrites it only on change)."""
    if agent.devices is None or not agent.config.standalone:
        return None
    try:
        composed = agent.refresh_devices()
        if composed is None:
            return None
        agent.write_devices(composed)
        return len(composed.devices)
    except Exception as e:  # the device loop retries and logs its own failures
        log.warning("first device discovery failed (%s: %s); the device loop retries", type(e).__name__, e)
        return None


def cmd_nodemetric(config: Config, window: float, output: str) -> int:
    agent = _agent_with_state(config)
    try:
        # The daemon's device round (gated as there): it hands the GPUs found to the collection tick, so the
        # NodeMetric carries nodeUsage.devices and pods' device usage as the daemon's does.
        agent.refresh_devices()
        deadline = time.monotonic() + max(window, 0.0)
        agent.collect()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(config.collect_res_used_interval, remaining))
            agent.collect()
        obj = agent.build_nodemetric()
    finally:
        if agent.devices is not None:
            agent.devices.close()
    _dump(obj, output, tables.nodemetric_table)
    return 0


def cmd_sched_latency(config: Config, window: float, output: str) -> int:
    from koordlet.schedlat.collector import SchedLatency
    from koordlet.schedlat.report import sample

    agent = _agent_with_state(config)
    # Measured even with the gate off: the gate decides what the daemon runs all the time.
    schedlat = agent.schedlat or SchedLatency(config.paths, agent.backend.version, agent.health)
    try:
        rows = sample(schedlat, agent.state.pods(), window)
    finally:
        schedlat.close()
    _dump(rows, output, tables.schedlat_table)
    return 0


def _dump(obj: object, output: str, table: Callable[[Any], str]) -> None:
    """The command's object as JSON, YAML, or (`table`) the view a person reads, from koordlet.tables."""
    if output == "table":
        sys.stdout.write(table(obj))
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(obj, sort_keys=False))
    else:
        sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def cmd_devices(config: Config, output: str, dump_nvml: str | None) -> int:
    from koordlet.devices.inventory import DeviceInventory, dump_json
    from koordlet.devices.report import desired
    from koordlet.health import Health

    inventory = DeviceInventory(config, Health(), accelerators=True, rdma_devices=True)
    try:
        composed = inventory.refresh()
        if dump_nvml:
            snapshot = inventory.dump_nvml()
            if snapshot is None:
                log.error("no NVML to dump (see the log line above)")
                return 1
            if dump_nvml == "-":
                sys.stdout.write(dump_json(snapshot))
                return 0
            with open(dump_nvml, "w", encoding="utf-8") as f:
                f.write(dump_json(snapshot))
            log.info("NVML snapshot written to %s", dump_nvml)
    finally:
        inventory.close()
    _dump(desired(config.node_name, None, composed, None), output, tables.device_table)
    return 0


def cmd_device_daemon(config: Config, oneshot: bool, output: str | None, interval: float,
                      host_root: str | None) -> int:
    from koordlet.devices.device_daemon import run_device_daemon, subprocess_runner

    target = output or config.paths.var_run("koordlet", "xpu-device-infos", "ic-device")
    return run_device_daemon(config.paths, target, oneshot=oneshot, interval=interval,
                             runner=subprocess_runner(host_root or "/"))


def _agent_with_state(config: Config) -> Agent:
    """An Agent with pods and NodeSLO loaded once (standalone files or the cluster), for one-shot commands."""
    from koordlet.agent import Agent

    agent = Agent(config)
    if config.nodeslo_file:
        agent.load_nodeslo_file()
    if config.standalone:
        agent.sync_pods()
    else:
        from koordlet.cluster import ClusterLink

        cluster = ClusterLink.connect(config, agent)
        if cluster is not None:
            cluster.sync_pods(agent)
            cluster.load_once(agent)
    return agent


def cmd_plan(config: Config, output: str, apply: bool) -> int:
    from koordlet.qos.cpusuppress import suppress_acts
    from koordlet.qos.manager import plan_json

    agent = _agent_with_state(config)
    usage_gates = ("BECPUSuppress", "BEMemoryEvict", "BECPUEvict")
    slo = agent.state.nodeslo()
    if any(config.gate(g) for g in usage_gates) and slo.present and suppress_acts(slo.spec):
        # BE CPU suppress and the evictions (resourceUsedThresholdWithBE.enable) plan from usage: two collection
        # ticks give the CPU rates and memory samples they need
        agent.collect()
        time.sleep(config.collect_res_used_interval)
        agent.collect()
    qos = agent.qos_manager(dry_run=not apply)
    plan_holder: list[Any] = []
    results = qos.reconcile(agent.qos_state(), report=plan_holder.append)
    if apply:
        summary: dict[str, int] = {}
        for r in results:
            summary[r.result] = summary.get(r.result, 0) + 1
        _dump({"results": summary, "errors": [e.as_json() for e in plan_holder[0].errors]}, output,
              tables.qos_table)
    else:
        _dump(plan_json(results, plan_holder[0], qos.executor), output, tables.plan_table)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        ns = parse_args(sys.argv[1:] if argv is None else argv)
        logsetup.setup(vars(ns))
    except InvalidInput as e:
        print(f"koordlet: {e}", file=sys.stderr)
        return 2
    if ns.help:
        sys.stdout.write(usage(ns.command))
        return 0
    if ns.command == "version" or ns.version:
        print(f"koordlet {__version__}")
        return 0
    if ns.command == "qos" and not ns.once:
        log.error("koordlet qos applies one pass and exits: give --once (koordlet plan shows it without applying)")
        return 2
    try:
        return _dispatch(ns, config_from_args(ns))
    except InvalidInput as e:  # a command-line mistake found while starting (e.g. a malformed --kubeconfig)
        log.error("%s", one_line(e))
        return 2


def one_line(e: BaseException) -> str:
    """An error's text on one line (YAML and JSON parsers' messages span several)."""
    return "; ".join(part.strip() for part in str(e).splitlines() if part.strip())


def _dispatch(ns: argparse.Namespace, config: Config) -> int:
    if ns.command == "run":
        return cmd_run(config, ns.example_pods_cgroups, ns.given)
    if ns.command in ("plan", "qos"):
        return cmd_plan(config, ns.output, apply=ns.command == "qos")
    if ns.command == "devices":
        return cmd_devices(config, ns.output, ns.dump_nvml)
    if ns.command == "sched-latency":
        return cmd_sched_latency(config, ns.window, ns.output)
    if ns.command == "device-daemon":
        return cmd_device_daemon(config, ns.oneshot, ns.output_file, ns.sleep_interval, ns.host_root)
    return cmd_nodemetric(config, ns.window, ns.output)


if __name__ == "__main__":
    sys.exit(main())
