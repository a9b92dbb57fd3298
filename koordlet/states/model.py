"""Plain records the rest of the agent reads: a pod with its cgroup dirs, and one immutable snapshot per tick."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from apis.core.objects import JSON
from apis.extension.pod import AnnotationCache


@dataclass(frozen=True, slots=True)
class ContainerMeta:
    name: str
    container_id: str  # as in containerStatuses: `<runtime>://<id>`; empty until the runtime reports it
    cgroup_dir: str | None  # relative cgroup dir, None when the id is missing or unsupported
    running: bool


@dataclass(frozen=True, slots=True)
class PodMeta:
    """A pod of this node as the agent needs it (upstream statesinformer.PodMeta)."""

    uid: str
    namespace: str
    name: str
    k8s_qos: str  # Guaranteed / Burstable / BestEffort
    koord_qos: str  # LSE/LSR/LS/BE/SYSTEM or "" (QoSNone)
    priority_class: str  # koord-prod/mid/batch/free or "" (none)
    phase: str
    cgroup_dir: str  # pod cgroup parent dir, relative to a subsystem root
    containers: tuple[ContainerMeta, ...]
    raw: JSON = field(repr=False, compare=False)
    decoded: AnnotationCache = field(default_factory=AnnotationCache, repr=False, compare=False)

    @property
    def labels(self) -> Mapping[str, object]:
        """metadata.labels ({} when absent or not an object; values as received)."""
        return _mapping(_mapping(self.raw.get("metadata")).get("labels"))

    @property
    def annotations(self) -> Mapping[str, object]:
        """metadata.annotations ({} when absent or not an object; values as received)."""
        return _mapping(_mapping(self.raw.get("metadata")).get("annotations"))


_EMPTY: Mapping[str, object] = {}


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else _EMPTY


class PodSource(Protocol):
    """Where the pod list comes from: kubelet, the API server, or a directory of manifests."""

    name: str

    def list_pods(self) -> list[JSON]:
        """Raw Pod objects of this node. Raises on failure; an empty list is a valid answer only here."""
        ...
