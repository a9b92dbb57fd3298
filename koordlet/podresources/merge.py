"""kubelet's List/Get answer plus the devices koord-scheduler allocated, as pure functions of (answer, pods).

Upstream: pkg/koordlet/statesinformer/impl/states_pod_resources.go (fillPodDevicesAllocatedByKoord). For each
PodResources entry with at least one container whose pod (by namespace/name) carries a decodable
`scheduling.koordinator.sh/device-allocated`, one ContainerDevices per device type is appended to the *first*
container, without topology, and that container's devices are re-sorted by resource name. Where this differs from
upstream (each a [quirk] of spec §5, see docs/podresources.md):

- a type without a kubelet resource name (`fpga`, anything new) is skipped and reported, not listed as `""`;
- an allocation gives its VFs' bus ids when it lists VFs and its own `id` otherwise, as the RDMA runtime hook does
  (upstream drops the id whenever `extension` is present: a whole PF with `extension: {}`, or a GPU carrying a
  shared-resource template, would list nothing);
- an empty id (a GPU without `id`, a VF without `busID`) is left out and reported, never listed as `""`;
- an id kubelet already lists for the same resource in that pod is not listed twice (a VF must not be handed to two
  attachments);
- a type that yields no id adds no empty entry; the sort is stable and only done when something was added, so a pod
  without allocations is byte-for-byte kubelet's;
- a malformed annotation (upstream skips it silently) leaves the pod as kubelet has it and is reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from apis.core.errors import InvalidInput
from apis.core.objects import JSONMapping
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED, Allocations, pod_device_allocations
from apis.extension.resources import RESOURCE_NVIDIA_GPU, RESOURCE_RDMA
from apis.scheduling.device import DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA
from koordlet.pb import podresources_v1_pb2 as v1
from koordlet.pb import podresources_v1alpha1_pb2 as v1alpha1
from koordlet.states.model import PodMeta

# apis/extension/device_share.go: ResourceNvidiaGPU, ResourceRDMA
RESOURCE_NAMES: Mapping[str, str] = {DEVICE_TYPE_GPU: RESOURCE_NVIDIA_GPU, DEVICE_TYPE_RDMA: RESOURCE_RDMA}

PodKey = tuple[str, str]  # (namespace, name), how PodResources names a pod

MALFORMED = "malformed"  # the annotation does not decode: the pod is left as kubelet has it
NO_ID = "no-id"  # an allocation without an id to list
UNKNOWN_TYPE = "unknown-type"  # a device type kubelet has no resource name for


@dataclass(frozen=True)
class Problem:
    """Why a pod's allocation was (partly) left out; `field` is below the annotation, e.g. `gpu[0].id`."""

    pod: str  # namespace/name
    uid: str
    kind: str  # MALFORMED, NO_ID or UNKNOWN_TYPE
    field: str
    message: str


def index_pods(pods: Iterable[PodMeta]) -> dict[PodKey, PodMeta]:
    """Pods by (namespace, name); of two with one name (a pod being replaced), the one not being deleted."""
    out: dict[PodKey, PodMeta] = {}
    for pod in pods:
        key = (pod.namespace, pod.name)
        old = out.get(key)
        if old is None or (terminating(old) and not terminating(pod)):
            out[key] = pod
    return out


def terminating(pod: PodMeta) -> bool:
    meta = pod.raw.get("metadata")
    return isinstance(meta, dict) and bool(meta.get("deletionTimestamp"))


def merge_list(response: v1.ListPodResourcesResponse,
               pods: Mapping[PodKey, PodMeta]) -> tuple[v1.ListPodResourcesResponse, list[Problem]]:
    """A copy of kubelet's List answer with each known pod's allocated devices added; `response` is not changed."""
    out = v1.ListPodResourcesResponse()
    out.CopyFrom(response)
    problems: list[Problem] = []
    for entry in out.pod_resources:
        pod = pods.get((entry.namespace, entry.name))
        if pod is not None:
            problems += add_allocated(entry, pod)
    return out, problems


def merge_get(response: v1.GetPodResourcesResponse,
              pods: Mapping[PodKey, PodMeta]) -> tuple[v1.GetPodResourcesResponse, list[Problem]]:
    """kubelet's Get answer for one pod, merged as List merges it (upstream passes Get through unmerged)."""
    out = v1.GetPodResourcesResponse()
    out.CopyFrom(response)
    entry = out.pod_resources
    pod = pods.get((entry.namespace, entry.name))
    return out, ([] if pod is None else add_allocated(entry, pod))


def add_allocated(entry: v1.PodResources, pod: PodMeta) -> list[Problem]:
    """Append the pod's allocated devices to `entry.containers[0]` (in place); what was left out, and why."""
    if not entry.containers:
        return []
    name = f"{pod.namespace}/{pod.name}"
    annotations = _annotations(pod.raw)
    text = annotations.get(ANNOTATION_DEVICE_ALLOCATED)
    if text is not None and not isinstance(text, str):  # a manifest can say anything; the API server would not
        return [Problem(name, pod.uid, MALFORMED, "", f"must be a string, not {type(text).__name__}")]
    try:
        allocations = pod_device_allocations(annotations)
    except InvalidInput as e:
        path = getattr(e, "path", "")
        return [Problem(name, pod.uid, MALFORMED, path, str(getattr(e, "message", e)))]
    if not allocations:
        return []
    devices, problems = allocated_devices(allocations, name, pod.uid)
    listed = _listed_ids(entry)
    first = entry.containers[0]
    added = False
    for resource, ids in devices:
        seen = listed.get(resource, set())
        fresh = [i for i in dict.fromkeys(ids) if i not in seen]
        if fresh:
            first.devices.add(resource_name=resource, device_ids=fresh)
            added = True
    if added:
        first.devices.sort(key=_resource_name)  # list.sort is stable; upstream's sort.Slice is not
    return problems


def allocated_devices(allocations: Allocations, pod: str = "", uid: str = "") -> tuple[list[tuple[str, list[str]]],
                                                                                      list[Problem]]:
    """(resource name, device ids) per device type, in the annotation's order, and what was left out."""
    out: list[tuple[str, list[str]]] = []
    problems: list[Problem] = []
    for dtype, items in allocations.items():
        resource = RESOURCE_NAMES.get(dtype)
        if resource is None:
            problems.append(Problem(pod, uid, UNKNOWN_TYPE, dtype,
                                    f"device type {dtype!r} has no kubelet resource name; not listed"))
            continue
        ids: list[str] = []
        for i, alloc in enumerate(items):
            if alloc.vfs:
                for j, vf in enumerate(alloc.vfs):
                    if vf.bus_id:
                        ids.append(vf.bus_id)
                    else:
                        problems.append(Problem(pod, uid, NO_ID, f"{dtype}[{i}].extension.vfs[{j}].busID",
                                                "a VF without busID; not listed"))
            elif alloc.id:
                ids.append(alloc.id)
            else:
                problems.append(Problem(pod, uid, NO_ID, f"{dtype}[{i}].id",
                                        f"minor {alloc.minor} has no id; not listed"))
        if ids:
            out.append((resource, ids))
    return out, problems


def to_v1alpha1(v1_list: bytes) -> bytes:
    """A v1 List answer as v1alpha1 (the same field numbers, the newer fields dropped)."""
    msg = v1alpha1.ListPodResourcesResponse.FromString(v1_list)
    msg.DiscardUnknownFields()
    return msg.SerializeToString()


def field_of(problem: Problem) -> str:
    """The field an Event names: the annotation, then the path below it."""
    at = f".{problem.field}" if problem.field and not problem.field.startswith("[") else problem.field
    return f"annotations[{ANNOTATION_DEVICE_ALLOCATED}]{at}"


def _listed_ids(entry: v1.PodResources) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for c in entry.containers:
        for d in c.devices:
            out.setdefault(d.resource_name, set()).update(d.device_ids)
    return out


def _annotations(raw: JSONMapping) -> JSONMapping:
    meta = raw.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def _resource_name(d: v1.ContainerDevices) -> str:
    return d.resource_name
