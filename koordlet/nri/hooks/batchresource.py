"""Runtime hook `BatchResource` (gate BatchResource, on): a BE pod's cpu.shares, CFS quota and memory limit at birth.

Upstream: pkg/koordlet/runtimehooks/hooks/batchresource/{batch_resource.go,rule.go}, protocol/pod_context.go and
container_context.go (FromNri: the batch resources come from the `node.koordinator.sh/extended-resource-spec`
annotation, NRI carries no pod spec; NriDone: pod values are written at the pod's cgroup dir, container values go
into the adjustment). Spec qos-and-runtime-hooks.md §5.4. The values are koordlet.qos.batchspec's `pod_values` and
`container_values`, the ones the QoS reconciler (koordlet.qos.batchresource) writes and keeps repairing, so the
hook and the reconciler never disagree:

- only pods labelled `koordinator.sh/qosClass: BE` whose annotation names containers; a container the annotation
  does not name gets nothing (upstream: "keep the original cgroup configs");
- the quota is -1 while NodeSLO selects BE CPU suppress with the cfsQuota policy (no NodeSLO yet: quota on, as
  upstream's nil rule), else divided by the Node's CPU normalization ratio when > 1;
- RunPodSandbox: the pod's cpu.shares, quota and memory limit, host writes through the executor (no containers
  exist yet, so the v1 quota order needs nothing more); CreateContainer / UpdateContainer: the container's
  `linux.resources.cpu.shares`, `cpu.quota` and `memory.limit` in the adjustment or the update.

Fails open: a malformed annotation or a value the kernel would refuse adds nothing and is reported (an Event, a
log line, the hook's failed-invocation metric); the reconciler reports the same annotation on its next pass.
"""

from __future__ import annotations

from apis.extension.resources import ANNOTATION_EXTENDED_RESOURCE_SPEC
from koordlet.host.resources import RESOURCES
from koordlet.nri.hooks.context import HookCall, HookInputError, annotation_field
from koordlet.nri.hooks.groupidentity import pod_cgroup_dir
from koordlet.nri.hooks.model import Adjustment, HookResult
from koordlet.qos.batchresource import cfs_quota_enabled, cgroup_writes
from koordlet.qos.batchspec import (
    BatchSpecError,
    BatchValues,
    ContainerBatch,
    PodBatch,
    annotation_containers,
    container_values,
    is_batch_labels,
    pod_values,
)
from koordlet.qos.model import Plan

HOOK_NAME = "BatchResource"
GATE = "BatchResource"


def _batch(call: HookCall) -> PodBatch | None:
    """The BE pod's batch resources from the annotation; None when it is not BE or declares none."""
    if not is_batch_labels(call.pod.labels):
        return None
    try:
        containers = annotation_containers(call.pod.annotations)
    except BatchSpecError as e:
        raise HookInputError(e.field, e.message) from None
    return PodBatch({}, containers) if containers else None


def _cfs_quota(call: HookCall) -> bool:
    return cfs_quota_enabled(call.facts.nodeslo)


def _checked(values: BatchValues) -> BatchValues:
    """The values as the runtime (or the executor) will write them to v1-style files: refused when out of range."""
    for resource, value in (("cpu.shares", values.shares), ("cpu.cfs_quota_us", values.quota),
                            ("memory.limit_in_bytes", values.memory_limit)):
        why = RESOURCES[resource].validate(str(value), 1)
        if why is not None:
            raise HookInputError(annotation_field(ANNOTATION_EXTENDED_RESOURCE_SPEC),
                                 f"{resource} {value} would be refused: {why}")
    return values


def set_pod(call: HookCall) -> HookResult:
    """RunPodSandbox: the pod cgroup's cpu.shares, CFS quota and memory limit."""
    batch = _batch(call)
    if batch is None:
        return HookResult()
    values = _checked(pod_values(batch, cfs_quota=_cfs_quota(call), ratio=call.facts.cpu_normalization_ratio))
    rel = pod_cgroup_dir(call.pod.cgroup_parent)
    facts = call.facts
    writes = cgroup_writes(facts.cgroup_version, facts.paths, rel, values,
                           f"runtime hook {HOOK_NAME}: pod {call.pod.key}")
    return HookResult(plan=Plan(writes=writes))


def set_container(call: HookCall) -> HookResult:
    """CreateContainer / UpdateContainer: the container's shares, quota and memory limit in the adjustment."""
    batch = _batch(call)
    if batch is None or call.container is None:
        return HookResult()
    spec: ContainerBatch | None = batch.container(call.container.name)
    if spec is None:
        return HookResult()
    values = _checked(container_values(spec, cfs_quota=_cfs_quota(call),
                                       ratio=call.facts.cpu_normalization_ratio))
    return HookResult(adjustment=Adjustment(cpu_shares=values.shares, cpu_quota=values.quota,
                                            memory_limit=values.memory_limit))
