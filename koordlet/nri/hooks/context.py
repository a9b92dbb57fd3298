"""What every hook receives (HookCall) and the two ways a hook gives up: bad input, or a node fact not found."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apis.core.errors import InvalidInput
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED, Allocations
from apis.extension.errors import AnnotationError
from apis.extension.pod import device_allocations
from koordlet.nri.hooks.model import ContainerInfo, PodInfo

if TYPE_CHECKING:
    from koordlet.nri.hooks.facts import NodeFacts
    from koordlet.nri.hooks.options import HookOptions

# A pod UID or container name that becomes part of a host path must be a plain name.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class HookInputError(InvalidInput):
    """The pod (annotation, label, cgroup parent) is malformed for this hook: it contributes nothing.

    `field` is the full path of the bad field, e.g.
    `annotations[scheduling.koordinator.sh/device-allocated].gpu[0].minor`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class FactMissing(HookInputError):
    """A node fact the hook needs is not in the cached facts (e.g. the uverbs node of a VF created since they were
    read). `kinds` (FACT_* of koordlet.nri.hooks.model) tell the caller what to read again before a retry."""

    def __init__(self, kinds: str | Collection[str], field: str, message: str) -> None:
        super().__init__(field, message)
        self.kinds = frozenset({kinds} if isinstance(kinds, str) else kinds)


def annotation_field(key: str, path: str = "") -> str:
    """`annotations[<key>]` followed by the path inside its value."""
    if not path:
        return f"annotations[{key}]"
    return f"annotations[{key}]" + (path if path.startswith("[") else f".{path}")


@dataclass
class HookCall:
    """One stage call: the pod (and container), the node facts and the options; the device allocation is decoded
    at most once per call, whichever hook asks first."""

    pod: PodInfo
    facts: NodeFacts
    options: HookOptions
    container: ContainerInfo | None = None
    _allocations: Allocations | None = field(default=None, repr=False)
    _allocation_error: HookInputError | None = field(default=None, repr=False)
    _decoded: bool = field(default=False, repr=False)

    def allocations(self) -> Allocations:
        """The pod's device allocations ({} without the annotation); HookInputError naming the field when it is
        malformed."""
        if not self._decoded:
            self._decoded = True
            try:
                self._allocations = device_allocations(self.pod) or {}
            except AnnotationError as e:
                self._allocation_error = HookInputError(annotation_field(ANNOTATION_DEVICE_ALLOCATED, e.path),
                                                        e.message)
        if self._allocation_error is not None:
            raise self._allocation_error
        assert self._allocations is not None
        return self._allocations

    def allocation_field(self, path: str) -> str:
        return annotation_field(ANNOTATION_DEVICE_ALLOCATED, path)
