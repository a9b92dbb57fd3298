"""`koordlet run | nodemetric | version`: upstream koordlet flags plus standalone options (pods dir, NodeSLO)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from koordlet import __version__, tables
from koordlet.config import Config, NriConfig, PodResourcesProxyConfig, parse_feature_gates, parse_go_interval
from koordlet.errors import InvalidInput
from koordlet.host.paths import DS_DEFAULTS, HOST_MODE_DEFAULTS, ROOT_FLAGS, resolve_roots
from koordlet.prediction.server import PredictionConfig

log = logging.getLogger("koordlet")

_OUTPUTS = ("json", "yaml", "table")

_PATH_FLAGS = ROOT_FLAGS
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


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node-name", default=None, help="node name (default: env NODE_NAME, then the hostname)")
    for dest, flag in _PATH_FLAGS.items():
        p.add_argument(flag, dest=dest, default=None, help=f"host path root ({dest.replace('_', ' ')})")
    p.add_argument("--host-root", default=None,
                   help="set every host path root to the matching path under DIR (a simulated node; '/' = this host)")
    p.add_argument("--pods-dir", default=None, help="standalone: directory of Pod manifests standing in for kubelet")
    p.add_argument("--nodeslo", dest="nodeslo_file", default=None, help="standalone: NodeSLO YAML/JSON file")
    p.add_argument("--state-dir", default="./state", help="standalone: where reports are written")
    p.add_argument("--addr", default=":9316", help="metrics/HTTP address")
    p.add_argument("--feature-gates", default="", help="comma-separated Gate=true|false")
    p.add_argument("--collect-res-used-interval", default="1s", type=parse_go_interval)
    p.add_argument("--psi-collector-interval", default="10s", type=parse_go_interval)
    p.add_argument("--collect-node-cpu-info-interval", default="60s", type=parse_go_interval)
    p.add_argument("--enable-pagecache-collector", default=False, type=_bool, nargs="?", const=True)
    p.add_argument("--metric-gc-interval-seconds", default=300, type=int)
    p.add_argument("--kube-api-qps", default=20.0, type=float)
    p.add_argument("--kube-api-burst", default=30, type=int)
    p.add_argument("--kubeconfig", default=None, help="kubeconfig (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--kubelet-preferred-address-type", default="InternalIP")
    p.add_argument("--kubelet-sync-interval", default="10s", type=parse_go_interval)
    p.add_argument("--kubelet-sync-timeout", default="3s", type=parse_go_interval)
    p.add_argument("--kubelet-insecure-tls", default=False, type=_bool, nargs="?", const=True)
    p.add_argument("--kubelet-read-only-port", default=10255, type=int)
    p.add_argument("--enable-node-metric-report", default=True, type=_bool, nargs="?", const=True)
    p.add_argument("--reconcile-interval-seconds", default=1.0, type=float, help="QoS reconcile period")
    p.add_argument("--resource-force-update-seconds", default=60.0, type=float,
                   help="rewrite a cgroup file holding the same value after this long")
    p.add_argument("--node-topology-sync-interval", default="3s", type=parse_go_interval,
                   help="NodeResourceTopology and Device CR report period")
    p.add_argument("--disable-query-kubelet-config", default=False, type=_bool, nargs="?", const=True,
                   help="do not ask kubelet /configz for the CPU manager policy (the config file is still read)")
    p.add_argument("--disable-unset-cpu-quota", default=False, type=_bool, nargs="?", const=True,
                   help="keep the CFS quota of pods with a cpuset (CPUSetAllocator)")
    p.add_argument("--xpu-device-infos-dir", default=None,
                   help="xPU device-info files (default: <var-run-root-dir>/koordlet/xpu-device-infos/)")
    p.add_argument("--xpu-enforce-collect-from-device-infos", default=False, type=_bool, nargs="?", const=True)
    p.add_argument("--nvml-snapshot", default=None, help="replay this NVML snapshot instead of calling NVML")
    p.add_argument("--gpu-partition-policy", default="Prefer", choices=("Prefer", "Honor"),
                   help="node.koordinator.sh/gpu-partition-policy for NVLink partitions found through NVML")
    p.add_argument("--gpu-health-recovery-seconds", default=300.0, type=float,
                   help="a GPU marked unhealthy by an XID is healthy again after this long without one")
    # NRI runtime hooks (pkg/koordlet/runtimehooks/config.go); --runtime-hooks-gpu-env-uuid is ours
    p.add_argument("--enable-nri-runtime-hook", default=True, type=_bool, nargs="?", const=True,
                   help="serve the runtime hooks as an NRI plugin of containerd/CRI-O")
    p.add_argument("--runtime-hooks-nri-socket-path", default="nri/nri.sock",
                   help="NRI socket, under --var-run-root-dir (default nri/nri.sock)")
    p.add_argument("--runtime-hooks-nri-plugin-name", default="koordlet_nri",
                   help="the name the NRI plugin registers with the runtime")
    p.add_argument("--runtime-hooks-nri-plugin-index", default="00",
                   help="the plugin's index: the runtime calls plugins in index order")
    p.add_argument("--runtime-hooks-nri-connect-timeout", default="6s", type=parse_go_interval,
                   help="how long to wait for the runtime to accept the plugin (a little over containerd's 5s "
                        "registration timeout)")
    p.add_argument("--runtime-hooks-nri-backoff-duration", default="1s", type=parse_go_interval,
                   help="first wait before reconnecting to a runtime that went away")
    p.add_argument("--runtime-hooks-nri-backoff-factor", default=2.0, type=float,
                   help="each further reconnect waits this many times longer")
    p.add_argument("--runtime-hooks-nri-backoff-cap", default="30s", type=parse_go_interval,
                   help="the longest wait between reconnects")
    p.add_argument("--runtime-hooks-gpu-env-uuid", default=False, type=_bool, nargs="?", const=True,
                   help="NVIDIA_VISIBLE_DEVICES by GPU UUID when the allocation carries UUIDs (ours; see "
                        "docs/runtime-hooks.md)")
    p.add_argument("--runtime-hooks-xpu-device-inject", default=False, type=_bool, nargs="?", const=True,
                   help="Ascend/Cambricon device nodes and visible-devices env for allocated cards (ours; upstream "
                        "leaves them to the vendors' device plugins; see docs/runtime-hooks.md)")
    # PodResources proxy (gate PodResourcesProxy): upstream's path flag, then ours (docs/podresources.md)
    p.add_argument("--pod-resources-proxy-path", default=None,
                   help="directory of the proxy's kubelet.sock (default: <var-run-root-dir>/koordlet/pod-resources, "
                        "upstream's /var/run/koordlet/pod-resources)")
    p.add_argument("--pod-resources-proxy-qps", default=100.0, type=float,
                   help="requests a second the proxy accepts, kubelet's own limit (<= 0: no limit; ours)")
    p.add_argument("--pod-resources-proxy-burst", default=10, type=int, help="burst of that limit (ours)")
    p.add_argument("--pod-resources-proxy-max-age", default="100ms", type=parse_go_interval,
                   help="how long one kubelet List answer serves later requests (0: ask kubelet each time; ours)")
    p.add_argument("--pod-resources-proxy-kubelet-timeout", default="5s", type=parse_go_interval,
                   help="a kubelet call slower than this is answered UNAVAILABLE (ours)")
    # peak prediction (pkg/koordlet/prediction/config.go): NodeMetric's prodReclaimableMetric and prodPeakMetric
    p.add_argument("--prediction-checkpoint-filepath", default="",
                   help="directory of the prediction models' checkpoints (default: <state-dir>/prediction-checkpoints;"
                        " upstream /prediction-checkpoints)")
    p.add_argument("--prediction-cold-start-duration", default="24h", type=parse_go_interval,
                   help="a pod this young is not predicted: its request counts as its peak")
    p.add_argument("--prediction-safety-margin-percent", default=10, type=int,
                   help="the redundancy kept above the predicted peak")
    p.add_argument("--prediction-memory-histogram-decay-halflife", default="24h", type=parse_go_interval,
                   help="half-life of memory samples' weight")
    p.add_argument("--prediction-cpu-histogram-decay-halflife", default="12h", type=parse_go_interval,
                   help="half-life of CPU samples' weight")
    p.add_argument("--prediction-training-interval", default="1m", type=parse_go_interval,
                   help="period of the prediction models' update")
    p.add_argument("--prediction-model-expiration-duration", default="30m", type=parse_go_interval,
                   help="a model not updated for this long is dropped")
    p.add_argument("--prediction-model-checkpoint-interval", default="10m", type=parse_go_interval,
                   help="a model is checkpointed at most this often")
    p.add_argument("--prediction-model-checkpoint-max-per-step", default=12, type=int,
                   help="models checkpointed per round (every minute)")
    p.add_argument("-v", "--v", dest="verbosity", default=0, type=int, help="log verbosity (klog style)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="koordlet", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the node agent")
    _common(run)
    run.add_argument("--example-pods-cgroups", action="store_true",
                     help="standalone, as root on this host: give the --pods-dir pods real cgroups with a sleeping "
                          "process each, removed on exit (`make run` does this for examples/pods)")
    nm = sub.add_parser("nodemetric", help="sample for a window and print the NodeMetric this node would report")
    _common(nm)
    nm.add_argument("--window", type=float, default=10.0, help="seconds to sample before printing")
    nm.add_argument("-o", "--output", choices=_OUTPUTS, default="json")
    sl = sub.add_parser("sched-latency", help="sample for a window and print each pod's CPU run-queue waits "
                        "(eBPF via bcc, else per-task schedstat)")
    _common(sl)
    sl.add_argument("--window", type=float, default=10.0, help="seconds to sample before printing")
    sl.add_argument("-o", "--output", choices=_OUTPUTS, default="json")
    dev = sub.add_parser("devices", help="print the Device CR this node would report (every source enabled)")
    _common(dev)
    dev.add_argument("-o", "--output", choices=_OUTPUTS, default="json")
    dev.add_argument("--dump-nvml", default=None, metavar="FILE",
                     help="also write everything discovery read from NVML as a snapshot ('-' = stdout only)")
    dd = sub.add_parser("device-daemon", help="write the xPU device-info file from vendor tools (npu-smi, cnmon)")
    _common(dd)
    dd.add_argument("--oneshot", default=False, type=_bool, nargs="?", const=True)
    dd.add_argument("--output", "--prints-output-file", dest="output_file", default=None,
                    help="default: <var-run-root-dir>/koordlet/xpu-device-infos/ic-device")
    dd.add_argument("--sleep-interval", default="900s", type=parse_go_interval)
    pl = sub.add_parser("plan", help="print what one QoS reconcile pass would write, without writing")
    _common(pl)
    pl.add_argument("-o", "--output", choices=_OUTPUTS, default="json")
    qo = sub.add_parser("qos", help="apply QoS (one pass with --once)")
    _common(qo)
    qo.add_argument("--once", action="store_true", required=True, help="apply one reconcile pass and exit")
    qo.add_argument("-o", "--output", choices=_OUTPUTS, default="json")
    ver = sub.add_parser("version", help="print the version")
    _common(ver)
    return parser


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Go's flag package accepts `-flag=value`; turn single-dash long flags into `--flag` for argparse."""
    out = []
    for a in argv:
        if a.startswith("-") and not a.startswith("--") and len(a.split("=", 1)[0]) > 2:
            out.append("-" + a)
        else:
            out.append(a)
    return out


def config_from_args(ns: argparse.Namespace, env: dict[str, str] | None = None, *,
                     isdir: Callable[[str], bool] = os.path.isdir,
                     ds_defaults: Mapping[str, str] = DS_DEFAULTS,
                     host_defaults: Mapping[str, str] = HOST_MODE_DEFAULTS) -> Config:
    """The Config of a parsed command line; host roots are checked (HostRootMissing names the flag to set) and a
    missing DaemonSet default falls back to the host's own path, logged once."""
    env = dict(os.environ) if env is None else env
    paths, notes = resolve_roots({k: getattr(ns, k) for k in _PATH_FLAGS}, host_root=ns.host_root or None,
                                 env=env, required=REQUIRED_ROOTS.get(ns.command, ()), isdir=isdir,
                                 ds_defaults=ds_defaults, host_defaults=host_defaults)
    for note in notes:
        log.info("%s", note)
    node_name = ns.node_name or env.get("NODE_NAME") or socket.gethostname()
    return Config(
        node_name=node_name, paths=paths, host_root=ns.host_root, addr=ns.addr,
        feature_gates=parse_feature_gates(ns.feature_gates),
        collect_res_used_interval=ns.collect_res_used_interval, psi_collector_interval=ns.psi_collector_interval,
        collect_node_cpu_info_interval=ns.collect_node_cpu_info_interval,
        enable_pagecache_collector=ns.enable_pagecache_collector,
        metric_gc_interval_seconds=ns.metric_gc_interval_seconds, kube_api_qps=ns.kube_api_qps,
        kube_api_burst=ns.kube_api_burst, kubeconfig=ns.kubeconfig,
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
                      xpu_device_inject=ns.runtime_hooks_xpu_device_inject),
        pod_resources_proxy=PodResourcesProxyConfig(
            path=ns.pod_resources_proxy_path, qps=ns.pod_resources_proxy_qps, burst=ns.pod_resources_proxy_burst,
            max_age=ns.pod_resources_proxy_max_age, kubelet_timeout=ns.pod_resources_proxy_kubelet_timeout),
        prediction=PredictionConfig(
            checkpoint_filepath=ns.prediction_checkpoint_filepath,
            cold_start_duration=ns.prediction_cold_start_duration,
            safety_margin_percent=ns.prediction_safety_margin_percent,
            memory_histogram_decay_halflife=ns.prediction_memory_histogram_decay_halflife,
            cpu_histogram_decay_halflife=ns.prediction_cpu_histogram_decay_halflife,
            training_interval=ns.prediction_training_interval,
            model_expiration_duration=ns.prediction_model_expiration_duration,
            model_checkpoint_interval=ns.prediction_model_checkpoint_interval,
            model_checkpoint_max_per_step=ns.prediction_model_checkpoint_max_per_step),
    )


def _setup_logging(verbosity: int) -> None:
    logging.basicConfig(level=logging.DEBUG if verbosity >= 4 else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname).1s %(name)s: %(message)s")


def cmd_run(config: Config, example_pods_cgroups: bool = False) -> int:
    from koordlet import examplepods
    from koordlet.agent import Agent
    from koordlet.banner import Seen, banner
    from koordlet.daemon import Daemon
    from koordlet.health import Health

    if example_pods_cgroups and not config.standalone:
        log.error("--example-pods-cgroups needs --pods-dir (it gives the pods listed there real cgroups)")
        return 2
    health = Health()
    examples = None
    try:
        if example_pods_cgroups:
            # Until the daemon installs its own handlers, SIGTERM unwinds like Ctrl-C so the cgroups are removed.
            signal.signal(signal.SIGTERM, _interrupt)
            examples = examplepods.start(config, health)
        agent = Agent(config, health)
        cluster = None
        if not config.standalone:
            from koordlet.cluster import ClusterLink

            cluster = ClusterLink.connect(config, agent)
            if cluster is None:
                log.error("no Kubernetes configuration found (in-cluster or --kubeconfig); "
                          "for a node without a cluster use --pods-dir (see `make run`)")
                return 2
        else:
            if config.nodeslo_file:
                agent.load_nodeslo_file()
            agent.sync_pods()
            if example_pods_cgroups and examples is None:
                examplepods.quiet_missing_cgroups(health, agent.pods.pods,
                                                  agent.host_apps if agent.nodeslo_present else [])
        seen = Seen(_first_devices(agent), None if not example_pods_cgroups else
                    examples.names if examples is not None else [])
        log.info("%s", "\n".join(banner(agent, seen)))
        asyncio.run(Daemon(agent, cluster).run())
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


def _first_devices(agent: Any) -> int | None:
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
        rows = sample(schedlat, agent.pods.pods, window)
    finally:
        schedlat.close()
    _dump(rows, output, tables.schedlat_table)
    return 0


def _dump(obj: Any, output: str, table: Callable[[Any], str]) -> None:
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


def _agent_with_state(config: Config) -> Any:
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
    if config.gate("BECPUSuppress") and agent.nodeslo_present and suppress_acts(agent.nodeslo_spec):
        # BE CPU suppress plans from usage: two collection ticks give the CPU rates it needs
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
    args = normalize_argv(sys.argv[1:] if argv is None else argv)
    ns = build_parser().parse_args(args)
    _setup_logging(ns.verbosity)
    if ns.command == "version":
        print(f"koordlet {__version__}")
        return 0
    try:
        config = config_from_args(ns)
    except InvalidInput as e:
        log.error("%s", e)
        return 2
    if ns.command == "run":
        return cmd_run(config, ns.example_pods_cgroups)
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
