"""The node's pod list: from a PodSource to PodMeta records with cgroup dirs, kept across source failures.

Upstream: pkg/koordlet/statesinformer/impl/states_pods.go (sync, keep the old map on failure),
pkg/koordlet/util/cgroup_parent_utils.go (dirs).
"""

from __future__ import annotations

import json
import logging
import os

import yaml

from apis.core.errors import InvalidInput, KoordletError
from apis.core.objects import JSON
from apis.core.qos import k8s_qos_class
from apis.extension.priority import priority_class_with_default
from apis.extension.qos import koord_qos_class_with_default
from koordlet.health import Health
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir
from koordlet.states.model import ContainerMeta, PodMeta
from koordlet.states.shapes import ShapeGate

log = logging.getLogger(__name__)

# libyaml's safe loader when PyYAML was built with it (Debian's and the wheels are): ~10× faster than pure Python.
_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    kubelet. A file that does not parse is skipped with a log line; the others still count.

    Only files whose (inode, size, mtime) changed are parsed again; when no file changed, the very same list
    object is returned, so PodState and every cache keyed on the pod list stay as they are.
    """

    name = "pods-dir"

    def __init__(self, directory: str, health: Health) -> None:
        self.directory = directory
        self.health = health
        self._files: dict[str, tuple[tuple[int, int, int], list[JSON]]] = {}  # path → (stat key, its pods)
        self._pods: list[JSON] = []

    def list_pods(self) -> list[JSON]:
        try:
            names = sorted(n for n in os.listdir(self.directory)
                           if n.endswith((".yaml", ".yml", ".json")) and not n.startswith("."))  # dot-files: temps
        except OSError as e:
            raise KoordletError(f"pods dir {self.directory} is not readable: {e.strerror}") from e
        files: dict[str, tuple[tuple[int, int, int], list[JSON]]] = {}
        changed = len(names) != len(self._files)
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                st = os.stat(path)
            except OSError:
                changed = True  # removed between listdir and stat
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            known = self._files.get(path)
            if known is not None and known[0] == key:
                files[path] = known
                continue
            changed = True
            files[path] = (key, self._parse(path))
        if changed:
            self._files = files
            self._pods = [p for _, pods in files.values() for p in pods]
        return self._pods

    def _parse(self, path: str) -> list[JSON]:
        try:
            with open(path, encoding="utf-8") as f:
                docs = list(yaml.load_all(f, Loader=_YAML_LOADER)) if not path.endswith(".json") else [json.load(f)]
        except (OSError, yaml.YAMLError, ValueError) as e:
            self.health.skip("manifest", "unparsable", path, str(e).splitlines()[0])
            return []
        self.health.recovered("manifest", "unparsable", path)
        return [p for doc in docs for p in _pods_of(doc, path, self.health)]


def _pods_of(doc: object, path: str, health: Health) -> list[JSON]:
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
        self.gate = ShapeGate(health)
        self.pods: list[PodMeta] = []
        self.synced = False
        self._raw: list[JSON] | None = None

    def set_driver(self, driver: CgroupDriver) -> None:
        """A newly detected cgroup driver moves every pod's dir: the next update rebuilds all records."""
        if driver != self.driver:
            self.driver, self._raw = driver, None

    def update(self, raw_pods: list[JSON]) -> bool:
        """Replace the pod list from raw Pod objects; malformed pods are skipped (reported once per version by the
        shape gate), the others kept. Returns whether anything changed; when nothing did, `pods` stays the same list
        object (collection targets and QoS facts are cached on it)."""
        if raw_pods is self._raw:  # the source says nothing changed (pods dir): keep every downstream cache
            return False
        self._raw = raw_pods
        metas: list[PodMeta] = []
        seen: set[str] = set()
        for pod in raw_pods:
            if not self.gate.admit("pod", pod):
                continue
            try:
                meta = pod_meta(pod, self.driver, self.health)
            except (InvalidInput, ValueError, TypeError) as e:
                self.health.skip("pod", "malformed", _ident(pod), str(e))
                continue
            if meta.uid in seen:  # two manifests with one UID (standalone): the first one counts
                self.health.skip("pod", "duplicate-uid", f"{meta.namespace}/{meta.name}", f"uid {meta.uid} is taken")
                continue
            seen.add(meta.uid)
            metas.append(meta)
        self.synced = True
        if _same(metas, self.pods):  # e.g. kubelet answered with equal pods: the old list (and its caches) stays
            return False
        self.pods = metas
        return True


def _same(new: list[PodMeta], old: list[PodMeta]) -> bool:
    """Equal records and equal raw objects (annotations and labels drive QoS, and PodMeta does not compare raw)."""
    return len(new) == len(old) and all(a == b and a.raw == b.raw for a, b in zip(new, old, strict=True))


def _ident(pod: object) -> str:
    if isinstance(pod, dict) and isinstance(pod.get("metadata"), dict):
        m = pod["metadata"]
        return f"{m.get('namespace', '?')}/{m.get('name', '?')}"
    return "<unnamed>"
