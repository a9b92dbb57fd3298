"""Which PodMigrationJobs are migrating, as the limits count them.

Upstream: arbitrator/filter.go (forEachAvailableMigrationJobs, existingPodMigrationJob and the per-limit counts):
a job migrates while its phase is empty, Pending or Running; while a pod is being arbitrated, a Pending job counts
only once it has passed arbitration. The counts are kept per instance (one instance per state of the jobs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from apis.scheduling.migration import PHASE_PENDING, PHASE_RUNNING, PodMigrationJob, PodRef


@dataclass
class _Counts:
    uids: set[str]
    keys: set[str]
    total: int
    by_namespace: Counter[str]
    by_uid: Counter[str]
    by_uid_namespace: Counter[tuple[str, str]]


@dataclass
class MigratingJobs:
    """The jobs known now and the identities (jobs.ident) of those that passed arbitration."""

    jobs: list[PodMigrationJob]
    passed: set[str]
    _counts: dict[bool, _Counts] = field(default_factory=dict, repr=False)
    _owners: dict[bool, dict[str | None, list[PodRef]]] = field(default_factory=dict, repr=False)
    _controller_uid: Callable[[str], str | None] | None = field(default=None, repr=False)

    def counts(self, job: PodMigrationJob, arbitrating: bool) -> bool:
        phase = job.phase or PHASE_PENDING
        return phase == PHASE_RUNNING or (phase == PHASE_PENDING and (not arbitrating or job.ident in self.passed))

    def active(self, arbitrating: bool = False) -> Iterable[PodMigrationJob]:
        return (job for job in self.jobs if self.counts(job, arbitrating))

    def add(self, job: PodMigrationJob) -> None:
        """One more job, the counts kept (a round creating thousands of jobs would otherwise recount each time)."""
        self.jobs.append(job)
        r = job.pod_ref
        for arbitrating, c in self._counts.items():
            if self.counts(job, arbitrating):
                c.uids.add(r.uid)
                c.keys.add(r.key)
                c.total += 1
                c.by_namespace[r.namespace] += 1
                c.by_uid[r.uid] += 1
                c.by_uid_namespace[(r.uid, r.namespace)] += 1
        for arbitrating, owners in self._owners.items():
            if self.counts(job, arbitrating) and self._controller_uid is not None:
                owners.setdefault(self._controller_uid(r.key), []).append(r)

    def has_job(self, uid: str, namespace: str, name: str, arbitrating: bool = False) -> bool:
        """A migrating job names the pod: by UID first, then by namespace/name."""
        c = self._count(arbitrating)
        return (bool(uid) and uid in c.uids) or f"{namespace}/{name}" in c.keys

    def count_other(self, uid: str, arbitrating: bool, namespace: str | None = None) -> int:
        """Migrating jobs for pods other than `uid` (in `namespace` when given)."""
        c = self._count(arbitrating)
        if namespace is None:
            return c.total - c.by_uid[uid]
        return c.by_namespace[namespace] - c.by_uid_namespace[(uid, namespace)]

    def by_controller(self, arbitrating: bool, controller_uid: Callable[[str], str | None]) -> dict[str | None,
                                                                                                list[PodRef]]:
        """The pods of migrating jobs by their controller's UID (`controller_uid` of a pod key)."""
        if controller_uid != self._controller_uid:  # bound methods of one view compare equal
            self._owners.clear()
            self._controller_uid = controller_uid
        owners = self._owners.get(arbitrating)
        if owners is None:
            owners = self._owners[arbitrating] = {}
            for job in self.active(arbitrating):
                owners.setdefault(controller_uid(job.pod_ref.key), []).append(job.pod_ref)
        return owners

    def _count(self, arbitrating: bool) -> _Counts:
        c = self._counts.get(arbitrating)
        if c is None:
            refs = [j.pod_ref for j in self.active(arbitrating)]
            c = self._counts[arbitrating] = _Counts(
                {r.uid for r in refs}, {r.key for r in refs}, len(refs), Counter(r.namespace for r in refs),
                Counter(r.uid for r in refs), Counter((r.uid, r.namespace) for r in refs))
        return c
