"""Pod and container pressure stall information (cpu/memory/io `some`/`full` avg10/60/300) from cgroups.

Upstream: pkg/koordlet/metricsadvisor/collectors/performance (PSI part), gate PSICollector, 10 s interval;
on cgroup v1 the files only exist on kernels that expose v1 PSI (e.g. Anolis), otherwise the collector idles.
"""

from __future__ import annotations

from dataclasses import dataclass

from apis.core.errors import HostReadError
from koordlet.collectors.cgroups import Target
from koordlet.health import Health
from koordlet.host.cgroup import PSI_FILES, CgroupBackend, PSIStats


@dataclass(frozen=True, slots=True)
class PSIReading:
    """All three pressure files of one cgroup; `cpu_full_supported` = cpu.pressure has a `full` line."""

    by_resource: dict[str, PSIStats]

    @property
    def cpu_full_supported(self) -> bool:
        cpu = self.by_resource.get("cpu")
        return cpu is not None and cpu.full is not None


class PSICollector:
    def __init__(self, backend: CgroupBackend, health: Health) -> None:
        self.backend = backend
        self.health = health
        self.supported = backend.psi_supported()
        health.capability(
            f"psi-cgroup-v{backend.version}", self.supported,
            "no cgroup pressure files; PSI collection is idle", fallback=True,
        )

    def collect(self, targets: list[Target]) -> dict[tuple[str, str], PSIReading]:
        out: dict[tuple[str, str], PSIReading] = {}
        if not self.supported:
            return out
        for t in targets:
            if t.scope not in ("pod", "container"):
                continue
            try:
                readings = {res: self.backend.psi(t.rel_dir, res) for res in PSI_FILES}
            except HostReadError as e:
                self.health.cgroup_read_errors["psi"] += 1
                if not t.quiet:
                    self.health.skip(t.scope, "psi-unreadable", t.label, str(e))
                continue
            self.health.cgroup_reads += len(PSI_FILES)
            out[(t.scope, t.key)] = PSIReading(readings)
        return out
