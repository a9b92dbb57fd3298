"""`koordlet run --example-pods-cgroups`: the example pods get real cgroups with a sleeping process each.

So `make run` shows pods with usage instead of one warning per pod whose cgroup does not exist. The dirs follow
koordlet.host.driver exactly as the agent reads them (v1: every subsystem it reads or writes; v2: the unified dir)
and are removed on exit. Without root, on a simulated node, or when anything fails, nothing is left behind and
the agent runs quietly: one line says the pods have no cgroups, instead of a warning per pod.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from apis.core.errors import InvalidInput, KoordletError
from apis.slo.decode import decode_nodeslo
from koordlet.collectors.cgroups import pod_targets
from koordlet.collectors.hostapps import HostApp, host_apps, hostapp_targets
from koordlet.config import Config
from koordlet.health import Health
from koordlet.host.cgroup import detect_backend
from koordlet.host.cgtree import CgroupTree
from koordlet.host.driver import CgroupDriver, detect_driver
from koordlet.states.model import PodMeta
from koordlet.states.nodeslo import load_nodeslo_file
from koordlet.states.pods import PodsDirSource, pod_meta

log = logging.getLogger("koordlet")

_PR_SET_PDEATHSIG = 1


@dataclass
class ExamplePods:
    """The cgroups made for the example pods (and the NodeSLO's host applications) and their sleepers."""

    tree: CgroupTree
    sleepers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # `ns/name` of the pods given cgroups

    def stop(self) -> None:
        """Kill the sleepers, then remove every dir made; failures are one log line, never an exception."""
        for p in self.sleepers:
            try:
                p.kill()
                p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired) as e:
                log.warning("example pod process %d did not stop: %s", p.pid, e)
        self.sleepers = []
        failed = self.tree.remove()
        if failed:
            log.warning("example pod cgroups not removed (remove them by hand): %s", "; ".join(failed))
        else:
            log.info("example pod cgroups removed")


def unavailable_reason(config: Config, euid: int | None = None) -> str | None:
    """Why example cgroups cannot be made here (None: they can)."""
    euid = os.geteuid() if euid is None else euid
    if config.simulated_host:
        return f"--host-root {config.host_root} is a simulated node"
    if euid != 0:
        return "not running as root"
    if not os.access(config.paths.cgroup_root, os.W_OK):
        return f"{config.paths.cgroup_root} is not writable"
    if shutil.which("sleep") is None:
        return "no `sleep` command for the pods' processes"
    return None


def start(config: Config, health: Health) -> ExamplePods | None:
    """Make the cgroups and sleepers; None (after one log line and with nothing left behind) when it cannot."""
    assert config.pods_dir is not None
    why = unavailable_reason(config)
    if why is not None:
        log.info("example pods run without cgroups (%s): they are listed, their usage is not collected", why)
        return None
    backend = detect_backend(config.paths)
    driver, _ = detect_driver(config.paths, backend.version)  # systemd when unsure, as the agent assumes
    tree = CgroupTree(config.paths.cgroup_root, backend.version)
    made = ExamplePods(tree)
    try:
        for pod in _running_pods(config.pods_dir, driver, health):
            made.tree.mkdir(pod.cgroup_dir, own=True)
            for c in pod.containers:
                if c.running and c.cgroup_dir is not None:
                    made.tree.mkdir(c.cgroup_dir, own=True)
                    made.sleepers.append(_sleeper(made.tree.procs_files(c.cgroup_dir)))
            made.names.append(f"{pod.namespace}/{pod.name}")
        for app in _host_apps(config, driver):
            made.tree.mkdir(app.rel_dir, own=True)
            made.sleepers.append(_sleeper(made.tree.procs_files(app.rel_dir)))
    except (OSError, ValueError, subprocess.SubprocessError, KoordletError) as e:
        log.warning("example pods run without cgroups: making them failed (%s); nothing is left behind", e)
        made.stop()
        return None
    except BaseException:  # interrupted half-way (SIGINT/SIGTERM): take back what was made, then stop
        made.stop()
        raise
    log.info("example pods have real cgroups (v%d, %s driver) under %s, one sleeping process per container; "
             "removed on exit", backend.version, driver, config.paths.cgroup_root)
    return made


def _running_pods(pods_dir: str, driver: CgroupDriver, health: Health) -> list[PodMeta]:
    out = []
    for raw in PodsDirSource(pods_dir, health).list_pods():
        try:
            pod = pod_meta(raw, driver, health)
        except (InvalidInput, ValueError, TypeError):
            continue  # the agent's own pod sync logs and counts it
        if pod.phase == "Running":
            out.append(pod)
    return out


def _host_apps(config: Config, driver: CgroupDriver) -> list[HostApp]:
    if not config.nodeslo_file:
        return []
    try:
        obj = load_nodeslo_file(config.nodeslo_file)
    except (InvalidInput, KoordletError, OSError):
        return []  # the agent logs an unreadable NodeSLO itself
    spec = decode_nodeslo(obj).spec
    return [] if spec is None else host_apps(spec.host_applications, driver)


def _sleeper(procs_files: list[Path]) -> subprocess.Popen[bytes]:
    """`sleep infinity` that joins the cgroups before it execs, and dies with the agent even on SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: the child only calls into it

    def join() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        pid = str(os.getpid())
        for f in procs_files:
            with open(f, "w") as fh:
                fh.write(pid)

    return subprocess.Popen(["sleep", "infinity"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=join)


def quiet_missing_cgroups(health: Health, pods: list[PodMeta], apps: list[HostApp]) -> None:
    """The example pods have no cgroups here by design: their per-pod "cgroup-unreadable" warnings are silenced
    (still counted in koordlet_agent_skipped_items_total); a pod added later warns as usual."""
    for t in pod_targets(pods) + hostapp_targets(apps):
        health.expect(t.scope, "cgroup-unreadable", t.label, "example pod, cgroups not made")

