"""NRI protobuf messages to the hooks' plain records and back: the one place both vocabularies meet."""

from __future__ import annotations

from koordlet.nri.hooks.model import Adjustment, ContainerInfo, PodInfo
from koordlet.pb import nri_pb2 as api


def pod_info(pod: api.PodSandbox) -> PodInfo:
    return PodInfo(
        sandbox_id=pod.id, uid=pod.uid, namespace=pod.namespace, name=pod.name,
        labels=dict(pod.labels), annotations=dict(pod.annotations),
        cgroup_parent=pod.linux.cgroup_parent if pod.HasField("linux") else "",
        runtime_handler=pod.runtime_handler,
    )


def container_info(container: api.Container) -> ContainerInfo:
    return ContainerInfo(
        container_id=container.id, sandbox_id=container.pod_sandbox_id, name=container.name,
        env=tuple(container.env),
        cgroups_path=container.linux.cgroups_path if container.HasField("linux") else "",
    )


def container_adjustment(adj: Adjustment) -> api.ContainerAdjustment:
    """The ContainerAdjustment the runtime merges into the OCI spec; fields koordlet does not set stay unset, so
    they never conflict with another plugin's (the runtime refuses two plugins setting one field)."""
    out = api.ContainerAdjustment()
    for key, value in adj.env.items():
        out.env.add(key=key, value=value)
    for m in adj.mounts:
        out.mounts.add(destination=m.destination, type=m.type, source=m.source, options=list(m.options))
    for d in adj.devices:
        dev = out.linux.devices.add(path=d.path, type=d.type, major=d.major, minor=d.minor)
        if d.file_mode is not None:
            dev.file_mode.value = d.file_mode
        if d.uid is not None:
            dev.uid.value = d.uid
        if d.gid is not None:
            dev.gid.value = d.gid
    if adj.rdt_class is not None:
        out.linux.resources.rdt_class.value = adj.rdt_class
    _cpu(out.linux.resources, adj)
    return out


def _cpu(resources: api.LinuxResources, adj: Adjustment) -> None:
    if adj.cpuset_cpus:
        resources.cpu.cpus = adj.cpuset_cpus
    if adj.cpu_quota is not None:
        resources.cpu.quota.value = adj.cpu_quota
    if adj.cpu_shares is not None:
        resources.cpu.shares.value = adj.cpu_shares
    if adj.memory_limit is not None:
        resources.memory.limit.value = adj.memory_limit


def container_updates(container_id: str, adj: Adjustment) -> list[api.ContainerUpdate]:
    """An UpdateContainer answer: only cgroup resources can change on a running container (NRI's rule)."""
    if not adj.resources:
        return []
    update = api.ContainerUpdate(container_id=container_id)
    if adj.rdt_class is not None:
        update.linux.resources.rdt_class.value = adj.rdt_class
    _cpu(update.linux.resources, adj)
    return [update]
