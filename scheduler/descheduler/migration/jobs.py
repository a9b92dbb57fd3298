"""Which PodMigrationJobs are migrating, as the limits count them.

Upstream: arbitrator/filter.go (forEachAvailableMigrationJobs, existingPodMigrationJob and the per-limit counts):
a job migrates while its phase is empty, Pending or Running; while a pod is being arbitrated, a Pending job counts
only once it has passed arbitration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from apis.scheduling.migration import PHASE_PENDING, PHASE_RUNNING, PodMigrationJob


@dataclass
class MigratingJobs:
    """The jobs known now and the UIDs of those that passed arbitration."""

    jobs: list[PodMigrationJob]
    passed: set[str]

    def active(self, arbitrating: bool = False) -> Iterable[PodMigrationJob]:
        for job in self.jobs:
            phase = job.phase or PHASE_PENDING
            if phase == PHASE_RUNNING or (phase == PHASE_PENDING and (not arbitrating or job.ident in self.passed)):
                yield job

    def has_job(self, uid: str, namespace: str, name: str, arbitrating: bool = False) -> bool:
        """A migrating job names the pod: by UID first, then by namespace/name."""
        jobs = list(self.active(arbitrating))
        if uid and any(j.pod_ref.uid == uid for j in jobs):
            return True
        return any(j.pod_ref.namespace == namespace and j.pod_ref.name == name for j in jobs)

    def count_other(self, uid: str, arbitrating: bool, namespace: str | None = None) -> int:
        """Migrating jobs for pods other than `uid` (in `namespace` when given)."""
        return sum(1 for j in self.active(arbitrating)
                   if j.pod_ref.uid != uid and (namespace is None or j.pod_ref.namespace == namespace))
