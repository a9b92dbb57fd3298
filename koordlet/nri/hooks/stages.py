"""The runtime-hook stages: each runs its enabled hooks in upstream's order and merges what they return.

Usage (the NRI plugin; see koordlet.nri.hooks.facts for the facts and their refresh)::

    options = HookOptions(gates=cfg.feature_gates, gpu_env_uuid=cfg.nri.gpu_env_uuid)
    result = stages.run_pod_sandbox(pod, reader.facts(), options)         # RunPodSandbox
    result = stages.create_container(pod, container, reader.facts(), options)  # CreateContainer
    result = stages.update_container(pod, container, reader.facts(), options)  # UpdateContainer
    result = stages.remove_pod_sandbox(pod, reader.facts(), options)      # RemovePodSandbox
    # then: refresh and run again once if result.stale_facts; create result.host_dirs; apply result.plan through
    # the executor; answer the runtime with result.adjustment; report result.failures as Events.

Upstream: pkg/koordlet/runtimehooks/hooks/hooks.go, runtimehooks/config.go (spec §5.1, §5.4). Within a stage the
hooks run sorted by name in byte order (upper case first):

- PreRunPodSandbox (RunPodSandbox): BatchResource (gate BatchResource: a BE pod's shares, quota and memory limit),
  CPUSetAllocator (gate CPUSetAllocator: the pod's CFS quota -1 when it has a cpuset), GroupIdentity (gate
  GroupIdentity), Resctrl (gate Resctrl)
- PreCreateContainer (CreateContainer): BatchResource (the container's), CPUSetAllocator (the container's cpuset
  and quota: its -1 wins over BatchResource's quota, as upstream's later hook), Resctrl (Resctrl), gpu env inject
  (GPUEnvInject), rdma device inject (RDMADeviceInject), xpu device inject (ours: option xpu_device_inject)
- PreUpdateContainerResources (UpdateContainer): BatchResource, CPUSetAllocator (upstream's CPUNormalization is
  not implemented here)
- PreRemoveRunPodSandbox (RemovePodSandbox): Resctrl (Resctrl)

Failure policy Ignore (upstream's default): a hook that finds bad input, misses a node fact, or raises contributes
nothing; the others still run; the failure is a PlanError (kind Pod, `namespace/name`, uid, the field, reason
RuntimeHookFailed) in `failures`. No exception leaves an entry point.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from apis.core.errors import PlanError
from koordlet.nri.hooks import batchresource, cpuset, gpu, groupidentity, rdma, resctrl, xpu
from koordlet.nri.hooks.context import FactMissing, HookCall, HookInputError
from koordlet.nri.hooks.facts import NodeFacts
from koordlet.nri.hooks.model import ContainerInfo, HookResult, PodInfo
from koordlet.nri.hooks.options import HookOptions

log = logging.getLogger(__name__)

PRE_RUN_POD_SANDBOX = "PreRunPodSandbox"
PRE_CREATE_CONTAINER = "PreCreateContainer"
PRE_UPDATE_CONTAINER_RESOURCES = "PreUpdateContainerResources"
PRE_REMOVE_RUN_POD_SANDBOX = "PreRemoveRunPodSandbox"
REASON = "RuntimeHookFailed"


@dataclass(frozen=True)
class Hook:
    name: str
    enabled: Callable[[HookOptions], bool]
    run: Callable[[HookCall], HookResult]


def _gated(gate: str) -> Callable[[HookOptions], bool]:
    return lambda options: options.gate(gate)


def _by_name(hooks: list[Hook]) -> tuple[Hook, ...]:
    return tuple(sorted(hooks, key=lambda h: h.name.encode()))


STAGES: dict[str, tuple[Hook, ...]] = {
    PRE_RUN_POD_SANDBOX: _by_name([
        Hook(batchresource.HOOK_NAME, _gated(batchresource.GATE), batchresource.set_pod),
        Hook(cpuset.HOOK_NAME, _gated(cpuset.GATE), cpuset.unset_pod_quota),
        Hook(groupidentity.HOOK_NAME, _gated(groupidentity.GATE), groupidentity.set_pod_bvt),
        Hook(resctrl.HOOK_NAME, _gated(resctrl.GATE), resctrl.run_pod_sandbox),
    ]),
    PRE_CREATE_CONTAINER: _by_name([
        Hook(batchresource.HOOK_NAME, _gated(batchresource.GATE), batchresource.set_container),
        Hook(cpuset.HOOK_NAME, _gated(cpuset.GATE), cpuset.set_container),
        Hook(resctrl.HOOK_NAME, _gated(resctrl.GATE), resctrl.create_container),
        Hook(gpu.HOOK_NAME, _gated(gpu.GATE), gpu.inject),
        Hook(rdma.HOOK_NAME, _gated(rdma.GATE), rdma.inject),
        Hook(xpu.HOOK_NAME, lambda options: options.xpu_device_inject, xpu.inject),
    ]),
    PRE_UPDATE_CONTAINER_RESOURCES: _by_name([
        Hook(batchresource.HOOK_NAME, _gated(batchresource.GATE), batchresource.set_container),
        Hook(cpuset.HOOK_NAME, _gated(cpuset.GATE), cpuset.set_container),
    ]),
    PRE_REMOVE_RUN_POD_SANDBOX: _by_name([
        Hook(resctrl.HOOK_NAME, _gated(resctrl.GATE), resctrl.remove_pod_sandbox),
    ]),
}


def run_pod_sandbox(pod: PodInfo, facts: NodeFacts, options: HookOptions) -> HookResult:
    """RunPodSandbox: host writes for the pod (its bvt, batch limits, resctrl group); the adjustment stays
    empty."""
    return run_stage(PRE_RUN_POD_SANDBOX, HookCall(pod, facts, options))


def create_container(pod: PodInfo, container: ContainerInfo, facts: NodeFacts, options: HookOptions) -> HookResult:
    """CreateContainer: the container's adjustment (env, mounts, devices, RDT class, cgroup resources)."""
    return run_stage(PRE_CREATE_CONTAINER, HookCall(pod, facts, options, container))


def update_container(pod: PodInfo, container: ContainerInfo, facts: NodeFacts, options: HookOptions) -> HookResult:
    """UpdateContainer: the container's cpuset, quota, shares and memory limit again (kubelet's update would
    otherwise reset what the hooks set; the scheduler's allocation may have changed)."""
    return run_stage(PRE_UPDATE_CONTAINER_RESOURCES, HookCall(pod, facts, options, container))


def remove_pod_sandbox(pod: PodInfo, facts: NodeFacts, options: HookOptions) -> HookResult:
    """RemovePodSandbox: host writes that undo the pod's (its resctrl group)."""
    return run_stage(PRE_REMOVE_RUN_POD_SANDBOX, HookCall(pod, facts, options))


def run_stage(stage: str, call: HookCall) -> HookResult:
    out = HookResult()
    for hook in STAGES[stage]:
        try:
            if not hook.enabled(call.options):
                continue
        except Exception:  # a broken options object must not fail the stage either
            log.exception("runtime hook %s: checking its gate failed", hook.name)
            continue
        started = time.perf_counter()
        ok = False
        try:
            part = hook.run(call)
        except FactMissing as e:
            out.stale_facts |= e.kinds
            _fail(out, call, hook.name, e.field, e.message)
        except HookInputError as e:
            _fail(out, call, hook.name, e.field, e.message)
        except Exception as e:
            log.exception("runtime hook %s failed on pod %s", hook.name, call.pod.key)
            _fail(out, call, hook.name, "", f"unexpected error {type(e).__name__}: {e}")
        else:
            _merge(out, part)
            ok = True
        out.timings.append((hook.name, ok, time.perf_counter() - started))
    return out


def _fail(out: HookResult, call: HookCall, hook: str, field_path: str, message: str) -> None:
    """One PlanError per bad field: hooks that fail on the same field for the same reason (a malformed device
    allocation read by three hooks) share it, their names listed before the message."""
    pod = call.pod
    for i, prev in enumerate(out.failures):
        names, sep, rest = prev.message.partition(": ")
        if sep and prev.field == field_path and rest == message:
            out.failures[i] = replace(prev, message=f"{names}, {hook}: {message}")
            return
    out.failures.append(PlanError("Pod", pod.key, field_path, f"{hook}: {message}", REASON, uid=pod.uid))


def _merge(out: HookResult, part: HookResult) -> None:
    """A later hook's env wins on the same name; mounts and devices are appended (a device path or mount
    destination already present is kept as it is); the RDT class is the last one set."""
    adj, new = out.adjustment, part.adjustment
    adj.env.update(new.env)
    seen_mounts = {m.destination for m in adj.mounts}
    adj.mounts += [m for m in new.mounts if m.destination not in seen_mounts]
    seen_devices = {d.path for d in adj.devices}
    adj.devices += [d for d in new.devices if d.path not in seen_devices]
    if new.rdt_class is not None:
        adj.rdt_class = new.rdt_class
    if new.cpuset_cpus:
        adj.cpuset_cpus = new.cpuset_cpus
    if new.cpu_quota is not None:
        adj.cpu_quota = new.cpu_quota
    if new.cpu_shares is not None:
        adj.cpu_shares = new.cpu_shares
    if new.memory_limit is not None:
        adj.memory_limit = new.memory_limit
    out.plan.extend(part.plan)
    out.host_dirs += part.host_dirs
    out.stale_facts |= part.stale_facts
    for err in part.failures:
        if err not in out.failures:
            out.failures.append(err)
