"""What both programs read of a pod (the PodView protocol) and its annotations decoded at most once per pod."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from apis.core.errors import InvalidInput
from apis.extension import device_allocated, resource_status
from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED, Allocations
from apis.extension.errors import AnnotationError
from apis.extension.resource_status import ANNOTATION_RESOURCE_STATUS, ResourceStatus

T = TypeVar("T")


class AnnotationCache:
    """One pod's decoded annotations, each kept with the text it was decoded from: a value (or the error it raised)
    is reused while the annotation's text is the same object or equal, and decoded again once the text changes."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, tuple[str, object, InvalidInput | None]] = {}

    def get(self, name: str, text: str, decode: Callable[[str], T]) -> T:
        """`decode(text)` for annotation `name`, decoded once per text; a malformed text raises its error each time."""
        hit = self._entries.get(name)
        if hit is None or (hit[0] is not text and hit[0] != text):
            try:
                hit = (text, decode(text), None)
            except InvalidInput as e:
                hit = (text, None, e)
            self._entries[name] = hit
        if hit[2] is not None:
            raise hit[2].with_traceback(None)  # the same error again, without the frames of earlier raises
        return hit[1]  # type: ignore[return-value]  # stored by `decode` for this name


class PodView(Protocol):
    """A pod as rules shared by both programs read it: the agent's PodMeta, an NRI request's PodInfo and the
    scheduler's view of a raw pod are each one, so no caller builds a Pod dict to call them."""

    @property
    def uid(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, object]: ...

    @property
    def annotations(self) -> Mapping[str, object]: ...

    @property
    def decoded(self) -> AnnotationCache: ...


def device_allocations(pod: PodView) -> Allocations | None:
    """The pod's `device-allocated`, None without it; AnnotationError when it is malformed (not a string included)."""
    text = pod.annotations.get(ANNOTATION_DEVICE_ALLOCATED)
    if text is None:
        return None
    if not isinstance(text, str):
        raise AnnotationError("", "must be a string")
    # looked up on the module at each call, so a test can count the decodes
    return pod.decoded.get(ANNOTATION_DEVICE_ALLOCATED, text, device_allocated.decode_device_allocations)


def pod_resource_status(pod: PodView) -> ResourceStatus:
    """The pod's `resource-status` (empty without it), as `resource_status.resource_status` reads annotations;
    AnnotationError when it is malformed."""
    text = pod.annotations.get(ANNOTATION_RESOURCE_STATUS)
    if text is None:
        return ResourceStatus()
    if not isinstance(text, str):
        raise AnnotationError("", "must be a string")
    return pod.decoded.get(ANNOTATION_RESOURCE_STATUS, text, resource_status.decode_resource_status)
