"""The NRI Plugin service: runtime calls in, adjustments out, and the pods and containers the runtime told us about.

Every call is answered from memory (the hooks' node facts are kept between calls) and never with an error status
for a hook problem: the runtime fails the user's container on any non-fatal error a plugin returns
(containerd/nri pkg/adaptation/plugin.go), so a hook failure means "no adjustment from that hook", a log line and
an Event, never an RPC error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import yaml
from google.protobuf.message import DecodeError, Message

from koordlet.nri import convert
from koordlet.nri.hooks.model import ContainerInfo, HookResult, PodInfo
from koordlet.nri.metrics import NriMetrics
from koordlet.pb import nri_pb2 as api

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"

# Event enum (containerd/nri pkg/api/api.proto) and the subscription mask bit of each: 1 << (event - 1).
EVENTS = {
    "RunPodSandbox": 1, "StopPodSandbox": 2, "RemovePodSandbox": 3, "CreateContainer": 4,
    "PostCreateContainer": 5, "StartContainer": 6, "PostStartContainer": 7, "UpdateContainer": 8,
    "PostUpdateContainer": 9, "StopContainer": 10, "RemoveContainer": 11,
}
# Upstream koordlet subscribes to these four (mask 0x8D, runtimehooks/nri/server.go). We add RemoveContainer so a
# removed container leaves our memory; every bit stays below 0x800, which runtimes vendoring NRI <= 0.9 accept.
ERROR_LOG_EVERY_SECONDS = 60.0
SUBSCRIBED = ("RunPodSandbox", "RemovePodSandbox", "CreateContainer", "UpdateContainer", "RemoveContainer")


_POD_EVENTS = ("RunPodSandbox", "StopPodSandbox", "RemovePodSandbox")
_ALL_EVENTS = 0x7FF  # every event up to RemoveContainer: valid for runtimes with NRI <= 0.9 and newer alike


def event_mask(names: tuple[str, ...] | list[str]) -> int:
    mask = 0
    for name in names:
        mask |= 1 << (EVENTS[name] - 1)
    return mask


def parse_event_names(names: list[str]) -> int:
    """The mask for event names as NRI's ParseEventMask reads them (containerd/nri pkg/api/event.go): case-
    insensitive, comma-separated, plus `all`, `pod`/`podsandbox` and `container`; ValueError names a bad one."""
    by_lower = {n.lower(): n for n in EVENTS}
    mask = 0
    for item in names:
        for name in filter(None, (p.strip() for p in str(item).lower().split(","))):
            if name == "all":
                mask |= _ALL_EVENTS
            elif name in ("pod", "podsandbox"):
                mask |= event_mask(list(_POD_EVENTS))
            elif name == "container":
                mask |= event_mask([n for n in EVENTS if n not in _POD_EVENTS])
            elif name in by_lower:
                mask |= event_mask([by_lower[name]])
            else:
                raise ValueError(f"unknown event {name!r}")
    return mask


class HookRunner(Protocol):
    """Runs the enabled hooks of a stage and carries out their host writes; never raises for bad input."""

    def run_pod_sandbox(self, pod: PodInfo) -> HookResult: ...
    def create_container(self, pod: PodInfo, container: ContainerInfo) -> HookResult: ...
    def update_container(self, pod: PodInfo, container: ContainerInfo) -> HookResult: ...
    def remove_pod_sandbox(self, pod: PodInfo) -> HookResult: ...


@dataclass
class RuntimeView:
    """Pods and containers as the runtime reported them (Synchronize, then events): no kubelet needed."""

    pods: dict[str, PodInfo] = field(default_factory=dict)  # sandbox id → pod
    containers: dict[str, ContainerInfo] = field(default_factory=dict)  # container id → container

    def forget_pod(self, sandbox_id: str) -> None:
        self.pods.pop(sandbox_id, None)
        for cid in [c.container_id for c in self.containers.values() if c.sandbox_id == sandbox_id]:
            del self.containers[cid]


@dataclass
class RuntimeInfo:
    """What Configure told us about the runtime on the current connection."""

    name: str = ""
    version: str = ""
    nri_version: str = ""
    request_timeout: float = 2.0  # seconds; NRI's DefaultPluginRequestTimeout
    registration_timeout: float = 5.0


Handler = Callable[[bytes, float | None], Awaitable[bytes]]
Reply = tuple[Message, bool]  # the reply, and whether a hook failed (for the calls metric; already reported)


class NriPlugin:
    """The handlers of service `nri.pkg.api.v1alpha1.Plugin`, for a TtrpcServer:

        plugin = NriPlugin(runner, metrics)
        server = TtrpcServer({PLUGIN_SERVICE: plugin.methods()})
    """

    def __init__(self, runner: HookRunner, metrics: NriMetrics, *, events: tuple[str, ...] = SUBSCRIBED) -> None:
        self.runner = runner
        self.metrics = metrics
        self.mask = event_mask(events)
        self.view = RuntimeView()
        self.runtime = RuntimeInfo()
        self._sync_pods: list[api.PodSandbox] = []
        self._sync_containers: list[api.Container] = []
        self.synchronized = False  # the current connection's Synchronize finished
        self._slow_said: set[str] = set()
        self._errors: dict[str, tuple[float | None, int]] = {}  # failure kind -> (last said, left unsaid since)

    def methods(self) -> Mapping[str, Handler]:
        calls: list[tuple[str, type[Message], Callable[[Message], Reply]]] = [
            ("Configure", api.ConfigureRequest, self.configure),  # type: ignore[list-item]
            ("Synchronize", api.SynchronizeRequest, self.synchronize),  # type: ignore[list-item]
            ("Shutdown", api.Empty, self.shutdown),  # type: ignore[list-item]
            ("CreateContainer", api.CreateContainerRequest, self.create_container),  # type: ignore[list-item]
            ("UpdateContainer", api.UpdateContainerRequest, self.update_container),  # type: ignore[list-item]
            ("StopContainer", api.StopContainerRequest, self.stop_container),  # type: ignore[list-item]
            ("StateChange", api.StateChangeEvent, self.state_change),  # type: ignore[list-item]
            ("UpdatePodSandbox", api.UpdatePodSandboxRequest, self.update_pod_sandbox),  # type: ignore[list-item]
            # NRI >= 0.12 calls these first and falls back to StateChange on UNIMPLEMENTED.
            ("RunPodSandbox", api.RunPodSandboxRequest, self.run_pod_sandbox),  # type: ignore[list-item]
            ("RemovePodSandbox", api.RemovePodSandboxRequest, self.remove_pod_sandbox),  # type: ignore[list-item]
            ("RemoveContainer", api.RemoveContainerRequest, self.remove_container),  # type: ignore[list-item]
        ]
        return {name: self._handler(name, cls, fn) for name, cls, fn in calls}

    def _handler(self, method: str, request_type: type[Message], fn: Callable[[Message], Reply]) -> Handler:
        async def handle(payload: bytes, deadline: float | None) -> bytes:
            started = time.perf_counter()
            request = request_type()
            try:
                request.ParseFromString(payload)
                reply, hook_failed = fn(request)
                outcome = "hook_failed" if hook_failed else "ok"
            except DecodeError as e:  # an error status would fail the user's container: answer empty instead
                self._error_said(f"{method}/decode", "NRI %s: cannot decode %s (%s); answering with no adjustment",
                                 method, request_type.__name__, e)
                reply, outcome = _empty_reply(method), "error"
            except Exception as e:  # our bug: answer as if no hook applied, so the container is still created
                if self._error_said(f"{method}/{type(e).__name__}", "NRI %s failed (%s: %s); answering with no "
                                    "adjustment", method, type(e).__name__, e):
                    log.debug("NRI %s failure", method, exc_info=True)
                reply, outcome = _empty_reply(method), "error"
            took = time.perf_counter() - started
            self.metrics.call(method, outcome, took)
            if took > self.runtime.request_timeout / 2 and method not in self._slow_said:
                self._slow_said.add(method)  # once per method: the histogram has the rest
                log.warning("NRI %s took %.0f ms of the runtime's %.1f s budget; past it the runtime drops koordlet",
                            method, took * 1000, self.runtime.request_timeout)
            return reply.SerializeToString()

        return handle

    def _error_said(self, key: str, msg: str, *args: object) -> bool:
        """An ERROR line for a failed call, at most once a minute per kind of failure (a runtime that sends garbage
        on every call must not flood the log; koordlet_nri_calls_total counts every call by outcome); the next line
        says how many were left unsaid. Whether this one was said."""
        now = time.monotonic()
        last, unsaid = self._errors.get(key, (None, 0))
        if last is not None and now - last < ERROR_LOG_EVERY_SECONDS:
            self._errors[key] = (last, unsaid + 1)
            return False
        self._errors[key] = (now, 0)
        log.error(msg + (f" (and {unsaid} more like it since the last such line)" if unsaid else ""), *args)
        return True

    # -- session -------------------------------------------------------------------------------------------
    def connection_started(self) -> None:
        """A new connection: the runtime will Synchronize everything again."""
        self.synchronized = False
        self._sync_pods, self._sync_containers = [], []

    def configure(self, req: api.ConfigureRequest) -> Reply:
        self.runtime = RuntimeInfo(
            name=req.runtime_name, version=req.runtime_version, nri_version=req.NRI_version,
            request_timeout=(req.request_timeout or 2000) / 1000, registration_timeout=(req.registration_timeout or
                                                                                         5000) / 1000)
        mask = self.mask
        if req.config:
            mask = self._configured_mask(req.config)
        log.info("NRI configured by %s %s (request timeout %.1fs); subscribing to 0x%x", req.runtime_name or "?",
                 req.runtime_version or "?", self.runtime.request_timeout, mask)
        return _outcome(api.ConfigureResponse(events=mask))

    def _configured_mask(self, text: str) -> int:
        """Plugin config from the runtime (`events: [...]` replaces our subscription, as upstream). Upstream fails
        Configure on a bad config, which unregisters every hook; we keep our own subscription and say why."""
        try:
            doc = yaml.safe_load(text)
            events = doc.get("events") if isinstance(doc, dict) else None
            if events is None:
                return self.mask
            if not isinstance(events, list):
                raise ValueError("events must be a list")
            return parse_event_names(events)
        except (yaml.YAMLError, ValueError) as e:
            log.error("NRI plugin config from the runtime ignored (%s); subscribing to koordlet's events", e)
            return self.mask

    def synchronize(self, req: api.SynchronizeRequest) -> Reply:
        """Existing pods and containers, possibly in parts (`more`); like upstream we answer with no updates: the
        reconcilers own containers that already run."""
        self._sync_pods.extend(req.pods)
        self._sync_containers.extend(req.containers)
        if req.more:
            return _outcome(api.SynchronizeResponse(more=True))
        view = RuntimeView()
        for pod in self._sync_pods:
            view.pods[pod.id] = convert.pod_info(pod)
        for c in self._sync_containers:
            view.containers[c.id] = convert.container_info(c)
        self.view = view
        self._sync_pods, self._sync_containers = [], []
        self.synchronized = True
        log.info("NRI synchronized: %d pods, %d containers", len(view.pods), len(view.containers))
        return _outcome(api.SynchronizeResponse())

    def shutdown(self, req: api.Empty) -> Reply:
        log.info("NRI runtime asked the plugin to shut down; will reconnect when it comes back")
        return _outcome(api.Empty())

    # -- pods ----------------------------------------------------------------------------------------------
    def _pod_started(self, pod_msg: api.PodSandbox) -> HookResult:
        pod = convert.pod_info(pod_msg)
        self.view.pods[pod.sandbox_id] = pod
        return self.runner.run_pod_sandbox(pod)

    def _pod_removed(self, pod_msg: api.PodSandbox) -> HookResult:
        pod = self.view.pods.get(pod_msg.id) or convert.pod_info(pod_msg)
        self.view.forget_pod(pod.sandbox_id)
        return self.runner.remove_pod_sandbox(pod)

    def run_pod_sandbox(self, req: api.RunPodSandboxRequest) -> Reply:
        return _outcome(api.RunPodSandboxResponse(), self._pod_started(req.pod))

    def remove_pod_sandbox(self, req: api.RemovePodSandboxRequest) -> Reply:
        return _outcome(api.RemovePodSandboxResponse(), self._pod_removed(req.pod))

    def update_pod_sandbox(self, req: api.UpdatePodSandboxRequest) -> Reply:
        self.view.pods[req.pod.id] = convert.pod_info(req.pod)
        return _outcome(api.UpdatePodSandboxResponse())

    def state_change(self, req: api.StateChangeEvent) -> Reply:
        """NRI <= 0.11 delivers pod and post-container events only here."""
        reply = api.Empty()
        if req.event == EVENTS["RunPodSandbox"]:
            return _outcome(reply, self._pod_started(req.pod))
        if req.event == EVENTS["RemovePodSandbox"]:
            return _outcome(reply, self._pod_removed(req.pod))
        if req.event in (EVENTS["StopContainer"], EVENTS["RemoveContainer"]):
            self.view.containers.pop(req.container.id, None)
        elif req.event == EVENTS["StopPodSandbox"]:
            pass  # the sandbox is gone only at RemovePodSandbox
        return _outcome(reply)

    # -- containers ----------------------------------------------------------------------------------------
    def _pod_of(self, pod_msg: api.PodSandbox) -> PodInfo:
        """The request's pod (always present on container events); remembered if Synchronize missed it."""
        pod = convert.pod_info(pod_msg)
        self.view.pods[pod.sandbox_id] = pod
        return pod

    def create_container(self, req: api.CreateContainerRequest) -> Reply:
        pod, container = self._pod_of(req.pod), convert.container_info(req.container)
        self.view.containers[container.container_id] = container
        result = self.runner.create_container(pod, container)
        reply = api.CreateContainerResponse()
        if result.adjustment:
            reply.adjust.CopyFrom(convert.container_adjustment(result.adjustment))
        return _outcome(reply, result)

    def update_container(self, req: api.UpdateContainerRequest) -> Reply:
        pod, container = self._pod_of(req.pod), convert.container_info(req.container)
        self.view.containers[container.container_id] = container
        result = self.runner.update_container(pod, container)
        reply = api.UpdateContainerResponse(update=convert.container_updates(container.container_id,
                                                                             result.adjustment))
        return _outcome(reply, result)

    def stop_container(self, req: api.StopContainerRequest) -> Reply:
        self.view.containers.pop(req.container.id, None)
        return _outcome(api.StopContainerResponse())

    def remove_container(self, req: api.RemoveContainerRequest) -> Reply:
        self.view.containers.pop(req.container.id, None)
        return _outcome(api.RemoveContainerResponse())


def _outcome(reply: Message, result: HookResult | None = None) -> Reply:
    return reply, bool(result is not None and result.failures)


def _empty_reply(method: str) -> Message:
    cls: type[Message] = {"Configure": api.ConfigureResponse, "Synchronize": api.SynchronizeResponse,
           "CreateContainer": api.CreateContainerResponse, "UpdateContainer": api.UpdateContainerResponse,
           "StopContainer": api.StopContainerResponse, "UpdatePodSandbox": api.UpdatePodSandboxResponse,
           "RunPodSandbox": api.RunPodSandboxResponse, "RemovePodSandbox": api.RemovePodSandboxResponse,
           "RemoveContainer": api.RemoveContainerResponse}.get(method, api.Empty)
    return cls()
