"""The first lines `koordlet run` prints: what the agent sees on this node and where to look at what it reports."""

from __future__ import annotations

from dataclasses import dataclass

from koordlet import __version__
from koordlet.agent import NODEMETRIC_API_VERSION, NODEMETRIC_GROUP, Agent, api_path
from koordlet.devices.report import API_VERSION as DEVICE_API_VERSION
from koordlet.devices.report import GROUP as DEVICE_GROUP
from koordlet.devices.report import PLURAL as DEVICE_PLURAL
from koordlet.reporters import nrt

_ANY_HOST = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class Seen:
    """What start-up found, beside the agent itself."""

    devices: int | None  # None: no device gate on (or discovery failed)
    cgroup_pods: list[str] | None  # pods given real example cgroups; None without --example-pods-cgroups


def base_url(addr: str) -> str:
    host, _, port = addr.rpartition(":")
    if host in _ANY_HOST:
        host = "localhost"
    return f"http://{host}:{port or '<port>'}"


def banner(agent: Agent, seen: Seen) -> list[str]:
    cfg = agent.config
    node = cfg.node_name
    url = base_url(cfg.addr)
    mode = f"standalone, pods from {cfg.pods_dir}" if cfg.standalone else "cluster"
    lines = [f"koordlet {__version__} on node {node} ({mode}): cgroup v{agent.backend.version}, "
             f"{agent.state.driver()} driver, cgroup root {cfg.paths.cgroup_root}"]
    if cfg.standalone:
        pods = f"  pods        {len(agent.state.pods())}"
        if seen.cgroup_pods is not None:
            pods += (f" (example cgroups, a sleeping process each: {', '.join(seen.cgroup_pods)})"
                     if seen.cgroup_pods else " (no cgroups: usage not collected)")
        lines.append(pods)
        slo = agent.state.nodeslo()
        if slo.present and slo.host_apps:
            lines.append(f"  host apps   {len(slo.host_apps)} ({', '.join(a.name for a in slo.host_apps)})")
    else:
        lines.append("  pods        from kubelet / the API server")
    if agent.devices is None:
        lines.append("  devices     off (--feature-gates Accelerators=true,RDMADevices=true)")
    else:
        lines.append(f"  devices     {seen.devices if seen.devices is not None else '?'} found")
    lines.append(_nri_line(agent))
    if cfg.gate("PodResourcesProxy"):
        pr = cfg.pod_resources_proxy
        lines.append(f"  PodResources proxy on {pr.socket(cfg.paths, cfg.host_root)} in front of "
                     f"{pr.kubelet_socket(cfg.paths)} (koordlet_pod_resources_proxy_* in /metrics)")
    lines.append(f"  metrics     {url}/metrics")
    nm = api_path(NODEMETRIC_API_VERSION, "nodemetrics", node)
    if cfg.standalone:
        nm_file = agent.state_writer.path(NODEMETRIC_GROUP, "nodemetrics", node)
        lines.append(f"  NodeMetric  {url}{nm}  (and {nm_file}; first report in a few seconds)")
        if agent.devices is not None:
            dev_file = agent.state_writer.path(DEVICE_GROUP, DEVICE_PLURAL, node)
            lines.append(f"  Device      {url}{api_path(DEVICE_API_VERSION, DEVICE_PLURAL, node)}  (and {dev_file})")
        if cfg.gate("NodeTopologyReport"):
            nrt_file = agent.state_writer.path(nrt.GROUP, nrt.PLURAL, node)
            lines.append(f"  NRT         {url}{api_path(nrt.API_VERSION, nrt.PLURAL, node)}  (and {nrt_file})")
    else:
        lines.append(f"  NodeMetric  kubectl get nodemetric {node} -o yaml")
        if agent.devices is not None:
            lines.append(f"  Device      kubectl get device {node} -o yaml")
        if cfg.gate("NodeTopologyReport"):
            lines.append(f"  NRT         kubectl get noderesourcetopology {node} -o yaml")
    if agent.schedlat is not None:
        lines.append("  run-queue   per-pod CPU wait (eBPF, else schedstat): koordlet sched-latency, "
                     "koordlet_pod_cpu_schedule_latency_seconds in /metrics")
    return lines


def _nri_line(agent: Agent) -> str:
    nri = agent.config.nri
    if not nri.enabled:
        return "  NRI         off (--enable-nri-runtime-hook=false)"
    hooks = [g for g in ("GPUEnvInject", "RDMADeviceInject", "GroupIdentity", "CPUSetAllocator", "BatchResource",
                         "Resctrl")
             if agent.config.gate(g)]
    return (f"  NRI         plugin {nri.plugin_index}-{nri.plugin_name} on {nri.socket(agent.config.paths)} "
            f"(hooks: {', '.join(hooks) or 'none gated on'}; koordlet_nri_connected in /metrics)")
