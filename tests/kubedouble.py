"""kmock additions shared by API tests: the NodeMetric status subresource with optimistic concurrency."""

from __future__ import annotations

import copy
from typing import Any

import kmock

NM = "slo.koordinator.sh/v1alpha1/nodemetrics"


def status_failure(code: int, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "message": message}


def emulate_status_subresource(km: kmock.KubernetesEmulator) -> None:
    """PUT .../nodemetrics/<name>/status with optimistic concurrency: kmock has no PUT semantics itself."""

    def put_status(request: kmock.Request) -> Any:
        obj = km.objects[NM, None, str(request.name)]
        current = obj.raw
        sent = (request.data or {}).get("metadata", {}).get("resourceVersion")
        if sent != current["metadata"]["resourceVersion"]:
            return kmock.Response(status=409, payload=status_failure(409, "the object has been modified"))
        updated = copy.deepcopy(current)
        updated["status"] = request.data.get("status")  # the status subresource ignores everything else
        updated["metadata"]["resourceVersion"] = str(int(sent) + 1)
        obj.history.append(updated)
        return kmock.Response(status=200, payload=updated)  # explicit: kmock keeps a reaction's last status

    km["put", kmock.resource(NM), kmock.subresource("status")] << put_status


def emulate_put(km: kmock.KubernetesEmulator, resource: str, status_subresource: bool = False) -> None:
    """PUT <resource>/<name>: replace the stored object if resourceVersion matches (or is unset), bump it
    (cluster-scoped or namespaced alike). With `status_subresource` (a CRD declaring `subresources.status`), the
    stored status is kept whatever the body says, as the API server does: only PUT .../status changes it."""

    def put(request: kmock.Request) -> Any:
        if request.subresource:
            return kmock.Response(status=404, payload=status_failure(404, "no such subresource"))
        obj = km.objects[resource, request.namespace or None, str(request.name)]
        current = obj.raw
        sent = (request.data or {}).get("metadata", {}).get("resourceVersion")
        have = current.get("metadata", {}).get("resourceVersion", "1")
        if sent is not None and sent != have:
            return kmock.Response(status=409, payload=status_failure(409, "the object has been modified"))
        updated = copy.deepcopy(request.data)
        updated.setdefault("metadata", {})["resourceVersion"] = str(int(have) + 1)
        if status_subresource:
            updated.pop("status", None)
            if "status" in current:
                updated["status"] = copy.deepcopy(current["status"])
        obj.history.append(updated)
        return kmock.Response(status=200, payload=updated)

    km["put", kmock.resource(resource)] << put


def emulate_binding(km: kmock.KubernetesEmulator, fail_marker: str = "test/fail-binding") -> None:
    """POST pods/<name>/binding: set spec.nodeName; 409 when already assigned; 500 for pods annotated
    `fail_marker` (to test rollbacks). An explicit Response each time: kmock keeps a reaction's last status."""

    def binding(request: kmock.Request) -> Any:
        obj = km.objects["v1/pods", request.namespace, str(request.name)]
        if fail_marker in obj.raw["metadata"].get("annotations", {}):
            return kmock.Response(status=500, payload=status_failure(500, "etcd is sad"))
        if obj.raw["spec"].get("nodeName"):
            return kmock.Response(status=409, payload=status_failure(409, "pod is already assigned"))
        obj.patch({"spec": {"nodeName": ((request.data or {}).get("target") or {}).get("name")}})
        return kmock.Response(status=201, payload={"apiVersion": "v1", "kind": "Status", "status": "Success",
                                                   "code": 201})

    km["post", kmock.resource("v1/pods"), kmock.subresource("binding")] << binding


PDBS = "policy/v1/poddisruptionbudgets"


def emulate_eviction(km: kmock.KubernetesEmulator) -> None:
    """POST pods/<name>/eviction as the API server does it: 409 when deleteOptions.preconditions.uid names another
    pod of that name; 429 when a matching PodDisruptionBudget (status.disruptionsAllowed, matchLabels only) allows
    no more, else the pod turns terminating (deletionTimestamp) and the budget is spent; 404 for a pod that is
    gone."""

    def evict(request: kmock.Request) -> Any:
        try:
            obj = km.objects["v1/pods", request.namespace, str(request.name)]
            pod = obj.raw
        except KeyError:
            return kmock.Response(status=404, payload=status_failure(404, "pods not found"))
        want_uid = (((request.data or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        if want_uid and want_uid != pod["metadata"].get("uid"):
            return kmock.Response(status=409, payload=status_failure(
                409, f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: "
                     f"{pod['metadata'].get('uid')}"))
        labels = pod["metadata"].get("labels") or {}
        budgets = []
        for (res, ns, _), pdb in list(km.objects.items()):
            if res != PDBS or ns != request.namespace:
                continue
            sel = (pdb.raw.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
            if sel and all(labels.get(k) == v for k, v in sel.items()):
                budgets.append(pdb)
        for pdb in budgets:
            if (pdb.raw.get("status") or {}).get("disruptionsAllowed", 0) <= 0:
                return kmock.Response(status=429, payload=status_failure(
                    429, "Cannot evict pod as it would violate the pod's disruption budget."))
        for pdb in budgets:
            pdb.patch({"status": {"disruptionsAllowed": pdb.raw["status"]["disruptionsAllowed"] - 1}})
        obj.patch({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
        return kmock.Response(status=201, payload={"apiVersion": "v1", "kind": "Status", "status": "Success",
                                                   "code": 201})

    km["post", kmock.resource("v1/pods"), kmock.subresource("eviction")] << evict


def driver_client(km: kmock.KubernetesEmulator) -> Any:
    """A client for a test acting as somebody else on the cluster (a user creating a pod, a controller editing a
    quota): its own User-Agent keeps its requests out of the least-privilege proofs (tests/test_rbac.py)."""
    from apis.client.kubeapi import KubeClient, KubeConfig

    return KubeClient(KubeConfig(server=str(km.url), user_agent="test-driver"))


def emulate_discovery(km: kmock.KubernetesEmulator, group_version: str) -> None:
    """GET /apis/<group>/<version> (or /api/v1) as the API server answers it: an APIResourceList of the resources
    the double serves there; a `scale` subresource is listed as kind Scale of autoscaling/v1 (kmock's own listing
    gives subresources their parent's kind); 404 when it serves nothing there."""
    path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    group, _, version = group_version.rpartition("/")

    def discovery(request: kmock.Request) -> Any:
        entries = []
        for res in km.resources:
            if (res.group or "", res.version) != (group, version) or not res.plural:
                continue
            info = km.resources[res]
            entries.append({"name": res.plural, "singularName": info.singular or "",
                            "namespaced": bool(info.namespaced), "kind": info.kind or res.plural.capitalize(),
                            "verbs": sorted(info.verbs)})
            for sub in sorted(info.subresources):
                entry = {"name": f"{res.plural}/{sub}", "singularName": "", "namespaced": bool(info.namespaced),
                         "kind": info.kind or res.plural.capitalize(), "verbs": ["get", "patch", "update"]}
                if sub == "scale":
                    entry.update(group="autoscaling", version="v1", kind="Scale")
                entries.append(entry)
        if not entries:
            return kmock.Response(status=404, payload=status_failure(404, "the server could not find the requested "
                                                                           "resource"))
        return kmock.Response(status=200, payload={"kind": "APIResourceList", "apiVersion": "v1",
                                                   "groupVersion": group_version, "resources": entries})

    km["get", kmock.path(path)] << discovery


def emulate_scale(km: kmock.KubernetesEmulator, resource: str, kind: str) -> None:
    """A namespaced custom resource whose CRD declares `subresources.scale` as most do (specReplicasPath
    .spec.replicas, statusReplicasPath .status.replicas, labelSelectorPath .status.selector), discovery of its
    group/version included: GET <resource>/<name>/scale answers the autoscaling/v1 Scale the API server builds
    from the object (metadata name, namespace, uid, resourceVersion, creationTimestamp; the replicas; the selector);
    404 for an object that is not there."""
    km.resources[resource] = {"kind": kind, "namespaced": True, "singular": kind.lower(),
                              "verbs": {"get", "list", "watch", "create", "update", "patch", "delete"},
                              "subresources": {"scale", "status"}}
    emulate_discovery(km, resource.rsplit("/", 1)[0])

    def scale(request: kmock.Request) -> Any:
        try:
            obj = km.objects[resource, request.namespace, str(request.name)].raw
        except KeyError:
            return kmock.Response(status=404, payload=status_failure(404, f"{resource} {request.name!r} not found"))
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        body: dict[str, Any] = {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {"replicas": status.get("replicas", 0)}}
        if status.get("selector"):
            body["status"]["selector"] = status["selector"]
        return kmock.Response(status=200, payload=body)

    km["get", kmock.resource(resource), kmock.subresource("scale")] << scale
