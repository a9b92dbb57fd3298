"""Runs a hook stage for the plugin: current node facts in, host writes through the one executor, failures reported.

The hooks are pure; this is where their result meets the node: the plan goes to the agent's single writer
(koordlet.qos.executor), each failure becomes a log line and an Event naming the pod and field, and the stage's
latency is recorded under upstream's runtime-hook metric.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable

from koordlet.events import EventRecorder
from koordlet.nri.hooks import stages
from koordlet.nri.hooks.facts import NodeFacts, NodeFactsReader
from koordlet.nri.hooks.model import ContainerInfo, HookResult, HostDir, PodInfo
from koordlet.nri.hooks.options import HookOptions
from koordlet.nri.metrics import NriMetrics
from koordlet.qos.executor import Executor

log = logging.getLogger(__name__)


class StageRunner:
    """The plugin's HookRunner (koordlet.nri.plugin)."""

    def __init__(self, facts: NodeFactsReader, options: HookOptions, executor: Executor,
                 events: EventRecorder, metrics: NriMetrics) -> None:
        self.facts = facts
        self.options = options
        self.executor = executor
        self.events = events
        self.metrics = metrics

    def run_pod_sandbox(self, pod: PodInfo) -> HookResult:
        return self._run("PreRunPodSandbox", pod, lambda f: stages.run_pod_sandbox(pod, f, self.options))

    def create_container(self, pod: PodInfo, container: ContainerInfo) -> HookResult:
        return self._run("PreCreateContainer", pod,
                         lambda f: stages.create_container(pod, container, f, self.options))

    def update_container(self, pod: PodInfo, container: ContainerInfo) -> HookResult:
        return self._run("PreUpdateContainerResources", pod,
                         lambda f: stages.update_container(pod, container, f, self.options))

    def remove_pod_sandbox(self, pod: PodInfo) -> HookResult:
        return self._run("PreRemoveRunPodSandbox", pod, lambda f: stages.remove_pod_sandbox(pod, f, self.options))

    def _run(self, stage: str, pod: PodInfo, fn: Callable[[NodeFacts], HookResult]) -> HookResult:
        started = time.perf_counter()
        result = fn(self.facts.facts())
        if result.stale_facts:  # e.g. a VF created after the facts were read: read those again, once
            self.facts.refresh(result.stale_facts)
            result = fn(self.facts.facts())
        for d in result.host_dirs:
            _make_host_dir(d)
        if result.plan.writes:
            self.facts.observe(self.executor.apply(result.plan))
        for err in result.failures:
            log.warning("runtime hook %s for pod %s skipped %s: %s", stage, err.name, err.field, err.message)
            self.events.report(err)
        for hook, ok, seconds in result.timings:
            self.metrics.hook(hook, stage, ok, seconds)
        log.debug("%s %s took %.3f ms", stage, pod.key, (time.perf_counter() - started) * 1000)
        return result


def _make_host_dir(d: HostDir) -> None:
    """Create (after removing, with `recreate`) a directory a hook's mount needs; a failure is logged and the
    container is still created: the mount will then fail in the runtime, which names the path."""
    path = os.path.normpath(d.path)
    if not os.path.isabs(path) or path != d.path.rstrip("/") or path.count("/") < 3:
        log.warning("runtime hook asked for host dir %r, which is not a plain absolute path deep enough; skipped",
                    d.path)
        return
    try:
        if d.recreate and os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, d.mode)
    except OSError as e:
        log.warning("cannot prepare host dir %s (%s): %s", path, d.reason or "runtime hook", e)
