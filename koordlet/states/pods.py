"""The node's pod list: from a PodSource to PodMeta records with cgroup dirs, kept across source failures.

Upstream: pkg/koordlet/statesinformer/impl/states_pods.go (sync, keep the old map on failure),
pkg/koordlet/util/cgroup_parent_utils.go (dirs).
"""

from __future__ import annotations

import glob
import json
import logging
import os
from typing import Any

import yaml

from koordlet.errors import InvalidInput, KoordletError
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir
from koordlet.states.model import JSON, ContainerMeta, PodMeta
from koordlet.states.qos import k8s_qos_class, koord_qos_class_with_default, priority_class_with_default

log = logging.getLogger(__name__)


def pod_meta(pod: JSON, driver: CgroupDriver, health: Health) -> PodMeta:
    """A raw Pod → PodMeta; InvalidInput when it lacks the identity fields every later step needs."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not meta.get("uid") or not meta.get("name"):
        raise InvalidInput("pod without metadata.uid/name")
    uid, ns, name = str(meta["uid"]), str(meta.get("namespace") or "default"), str(meta["name"])
    qos = K8sQoS(k8s_qos_class(pod))
    rel = pod_dir(driver, qos, uid)
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    assert isinstance(status, dict)
    containers = []
    for cs in status.get("containerStatuses") or []:
        if not isinstance(cs, dict):
            continue
        cid = str(cs.get("containerID") or "")
        cdir: str | None = None
        if cid:
            try:
                cdir = container_dir(driver, rel, cid)
            except InvalidInput as e:
                health.skip("container", "bad-container-id", f"{ns}/{name}/{cs.get('name')}", str(e))
        state = cs.get("state")
        running = isinstance(state, dict) and "running" in state
        containers.append(ContainerMeta(str(cs.get("name", "")), cid, cdir, running))
    return PodMeta(
        uid=uid, namespace=ns, name=name, k8s_qos=qos.value,
        koord_qos=koord_qos_class_with_default(pod), priority_class=priority_class_with_default(pod),
        phase=str(status.get("phase", "")), cgroup_dir=rel, containers=tuple(containers), raw=pod,
    )


class PodsDirSource:
    """Standalone mode: Pod manifests (YAML or JSON, one or many docs, or a List) in a directory stand in for
    kubelet. A file that does not parse is skipped with a log line; the others still count."""

    name = "pods-dir"

    def __init__(self, directory: str, health: Health) -> None:
        self.directory = directory
        self.health = health

    def list_pods(self) -> list[JSON]:
        if not os.path.isdir(self.directory):
            raise KoordletError(f"pods dir {self.directory} does not exist")
        pods: list[JSON] = []
        files = sorted(glob.glob(os.path.join(self.directory, "*.y*ml")) +
                       glob.glob(os.path.join(self.directory, "*.json")))
        for path in files:
            try:
                with open(path, encoding="utf-8") as f:
                    docs = list(yaml.safe_load_all(f)) if not path.endswith(".json") else [json.load(f)]
            except (OSError, yaml.YAMLError, ValueError) as e:
                self.health.skip("manifest", "unparsable", path, str(e).splitlines()[0])
                continue
            for doc in docs:
                pods.extend(_pods_of(doc, path, self.health))
        return pods


def _pods_of(doc: Any, path: str, health: Health) -> list[JSON]:
    if doc is None:
        return []
    if isinstance(doc, dict) and doc.get("kind") in ("PodList", "List") and isinstance(doc.get("items"), list):
        return [p for item in doc["items"] for p in _pods_of(item, path, health)]
    if isinstance(doc, dict) and doc.get("kind", "Pod") == "Pod":
        return [doc]
    kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
    health.skip("manifest", "not-a-pod", path, f"kind {kind!r}")
    return []


class PodState:
    """Current PodMeta list of this node; a failed or empty sync keeps the previous list (upstream)."""

    def __init__(self, driver: CgroupDriver, health: Health) -> None:
        self.driver = driver
        self.health = health
        self.pods: list[PodMeta] = []
        self.synced = False

    def update(self, raw_pods: list[JSON]) -> bool:
        """Replace the pod list from raw Pod objects; bad pods are skipped. Returns whether the set changed."""
        metas: list[PodMeta] = []
        for pod in raw_pods:
            try:
                metas.append(pod_meta(pod, self.driver, self.health))
            except (InvalidInput, ValueError, TypeError) as e:
                ident = _ident(pod)
                self.health.skip("pod", "malformed", ident, str(e))
        changed = [p.uid for p in metas] != [p.uid for p in self.pods]
        self.pods = metas
        self.synced = True
        return changed


def _ident(pod: Any) -> str:
    if isinstance(pod, dict) and isinstance(pod.get("metadata"), dict):
        m = pod["metadata"]
        return f"{m.get('namespace', '?')}/{m.get('name', '?')}"
    return "<unnamed>"
