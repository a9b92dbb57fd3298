"""Arbitration of pending PodMigrationJobs: their order, and which of them may go on to migrate.

Upstream: controllers/migration/arbitrator/{arbitrator.go,sort.go}. Stable sorts run in this order, the last being
the primary key: creation time (newest first, whole seconds); the pods' order (LowNodeLoad's pod sorter without the
usage score; jobs without a pod first); jobs of pods of the same batch `Job` placed together at the first one's
position; the number of migrating jobs over that Job's pods, most first. Then each job in turn: its pod is marked
arbitrating; a non-retryable refusal fails the job (ForbiddenMigratePod), a retryable one leaves it waiting; a job
that passes is annotated passed-arbitration. A job whose pod cannot be found passes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from apis.core import podmeta
from apis.core.objects import JSON
from apis.extension.descheduling import ANNOTATION_PASSED_ARBITRATION, ANNOTATION_POD_ARBITRATING
from apis.scheduling.migration import (
    PHASE_FAILED,
    PHASE_RUNNING,
    REASON_FORBIDDEN_MIGRATE_POD,
    PodMigrationJob,
)
from scheduler.descheduler.plugins.lownodeload.sorting import sort_pods

JOB_KIND = "Job"
PASSED, FAILED, WAITING = "passed", "failed", "waiting"


def job_controller_uid(pod: JSON | None) -> str | None:
    """The UID of the batch Job controlling the pod, if one does."""
    ref = podmeta.controller_ref(pod) if pod is not None else None
    return str(ref.get("uid") or "") if ref is not None and ref.get("kind") == JOB_KIND else None


def is_migrating(job: PodMigrationJob) -> bool:
    """isJobMigrating: passed arbitration or Running."""
    return job.annotations.get(ANNOTATION_PASSED_ARBITRATION) == "true" or job.phase == PHASE_RUNNING


def sort_jobs(jobs: Sequence[PodMigrationJob], pod_of: Mapping[str, JSON],
              migrating_of_owner: Callable[[str], int]) -> list[PodMigrationJob]:
    """The arbitration order; `pod_of` maps a job's name to its pod, `migrating_of_owner` counts the migrating
    jobs over a batch Job's pods."""
    out = sorted(jobs, key=lambda j: -int(j.created or 0))
    with_pods = [pod_of[j.name] for j in out if j.name in pod_of]
    rank = {id(p): i for i, p in enumerate(sort_pods(with_pods, {}, {}, {}))}
    out.sort(key=lambda j: rank[id(pod_of[j.name])] if j.name in pod_of else -1)
    first: dict[str, int] = {}
    place = {}
    for i, j in enumerate(out):
        owner = job_controller_uid(pod_of.get(j.name))
        place[j.name] = first.setdefault(owner, i) if owner is not None else i
    out.sort(key=lambda j: place[j.name])
    counts: dict[str, int] = {}
    for j in out:
        owner = job_controller_uid(pod_of.get(j.name))
        if owner is not None and owner not in counts:
            counts[owner] = migrating_of_owner(owner)
    out.sort(key=lambda j: -counts.get(job_controller_uid(pod_of.get(j.name)) or "", 0))
    return out


@dataclass(frozen=True)
class Decision:
    job: PodMigrationJob
    outcome: str  # PASSED, FAILED or WAITING
    why: str = ""


def arbitrate(jobs: Sequence[PodMigrationJob], pod_of: Mapping[str, JSON],
              non_retryable: Callable[[JSON], str | None], retryable: Callable[[JSON], str | None],
              passed: set[str], migrating_of_owner: Callable[[str], int]) -> list[Decision]:
    """One arbitration over the pending jobs, in sort_jobs order. Changes each job's object as upstream writes it
    (the passed-arbitration annotation; phase Failed with ForbiddenMigratePod) and adds passed jobs' UIDs (names
    when they have none) to `passed`, so the jobs arbitrated later count them."""
    out = []
    for job in sort_jobs(jobs, pod_of, migrating_of_owner):
        pod = pod_of.get(job.name)
        why: str | None = None
        if pod is not None:
            pod = copy.deepcopy(pod)
            pod.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION_POD_ARBITRATING] = "true"
            why = non_retryable(pod)
            if why is not None:
                ref = job.pod_ref
                message = f'Pod "{ref.namespace}/{ref.name}" is forbidden to migrate because it does not meet the ' \
                          f'requirements'
                status = job.obj.setdefault("status", {})
                status.update({"phase": PHASE_FAILED, "reason": REASON_FORBIDDEN_MIGRATE_POD, "message": message})
                job.phase = PHASE_FAILED
                out.append(Decision(job, FAILED, why))
                continue
            why = retryable(pod)
            if why is not None:
                out.append(Decision(job, WAITING, why))
                continue
        job.obj.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION_PASSED_ARBITRATION] = "true"
        job.annotations[ANNOTATION_PASSED_ARBITRATION] = "true"
        passed.add(job.ident)
        out.append(Decision(job, PASSED))
    return out
