"""An owner of any other kind read through its `scale` subresource, as upstream's controller finder reads it in a
cluster (controllerfinder/controller_finder.go getScaleController, with client-go's scale client and the manager's
RESTMapper).

The owner's group/version/kind is mapped to its resource through API discovery, as a RESTMapper maps it: GET /api/v1
(core) or /apis/<group>/<version>, the APIResourceList entry of that `kind` (subresource entries skipped), kept per
group/version; the kind must also list `<resource>/scale` there (client-go's discovery scale-kind resolver). Then
GET .../namespaces/<ns>/<resource>/<name>/scale: an autoscaling/v1 Scale whose metadata is the object's (name, uid),
`spec.replicas` and `status.selector` (a selector string). A discovery failure, a kind the group/version does not
serve or that has no `scale`, or a scale that cannot be read is one log line (once per owner kind and reason) and no
answer; a scale that is not found (the object is gone) is no answer and no line, as upstream's NotFound.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from apis.client.kubeapi import KubeClient
from apis.core.errors import KoordletError, NotFound
from apis.core.objects import JSON, as_objects

log = logging.getLogger("koord-descheduler.migration")


@dataclass(frozen=True)
class Served:
    """One kind as a group/version's discovery lists it."""

    resource: str
    has_scale: bool


def group_version_path(api_version: str) -> str:
    """The discovery path of an apiVersion: `v1` → /api/v1, `<group>/<version>` → /apis/<group>/<version>."""
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def served_kinds(resource_list: Mapping[str, object]) -> dict[str, Served]:
    """An APIResourceList's kinds → their resource, and whether `<resource>/scale` is listed."""
    entries = as_objects(resource_list.get("resources"))
    names = {str(e.get("name") or "") for e in entries}
    out: dict[str, Served] = {}
    for e in entries:
        name, kind = str(e.get("name") or ""), str(e.get("kind") or "")
        if name and kind and "/" not in name:
            out.setdefault(kind, Served(name, f"{name}/scale" in names))
    return out


class ScaleReader:
    """`scale(api_version, kind, namespace, name)`: the owner's Scale, or None (see the module)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.discovered: dict[str, dict[str, Served]] = {}
        self.said: set[tuple[str, str, str]] = set()
        self.lock = threading.Lock()  # the rounds' thread and the controller's

    def scale(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        served = self._served(api_version, kind)
        if served is None:
            return None
        if not served.has_scale:
            self._say(api_version, kind, f"{served.resource} has no scale subresource")
            return None
        path = f"{group_version_path(api_version)}/namespaces/{namespace}/{served.resource}/{name}/scale"
        try:
            return self.client.get(path)
        except NotFound:
            return None
        except KoordletError as e:
            self._say(api_version, kind, f"reading {served.resource}/scale: {e}")
            return None

    def _served(self, api_version: str, kind: str) -> Served | None:
        with self.lock:
            kinds = self.discovered.get(api_version)
        if kinds is None or kind not in kinds:  # a kind missing from what was kept: discovered again (a new CRD)
            try:
                kinds = served_kinds(self.client.get(group_version_path(api_version)))
            except KoordletError as e:
                self._say(api_version, kind, f"discovery of {api_version}: {e}")
                return None
            with self.lock:
                self.discovered[api_version] = kinds
        if kind not in kinds:
            self._say(api_version, kind, f"{api_version} serves no kind {kind}")
            return None
        return kinds[kind]

    def _say(self, api_version: str, kind: str, why: str) -> None:
        with self.lock:
            if (api_version, kind, why) in self.said:
                return
            self.said.add((api_version, kind, why))
        log.warning("workload of kind %s (%s) not read through its scale subresource: %s; its pods are not "
                    "migrated", kind, api_version, why)
