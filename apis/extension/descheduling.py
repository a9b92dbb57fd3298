"""Descheduling wire names: Koordinator's pod and PodMigrationJob keys, and the descheduler annotations it honours.

Upstream: apis/extension/descheduling.go (eviction cost, soft eviction), pkg/descheduler/controllers/migration
(evict reason/trigger, job-created-by, arbitration keys, evict policy), kubernetes-sigs/descheduler (the evict and
prefer-no-eviction annotations).
"""

from __future__ import annotations

from collections.abc import Mapping

from apis.core.podmeta import go_int32

ANNOTATION_EVICTION_COST = "scheduling.koordinator.sh/eviction-cost"  # int32; MaxInt32 = never evict
ANNOTATION_SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"
ANNOTATION_EVICT_REASON = "koordinator.sh/evict-reason"
ANNOTATION_EVICT_TRIGGER = "koordinator.sh/evict-trigger"
ANNOTATION_JOB_CREATED_BY = "koordinator.sh/job-created-by"
ANNOTATION_PASSED_ARBITRATION = "descheduler.koordinator.sh/passed-arbitration"
ANNOTATION_POD_ARBITRATING = "descheduler.koordinator.sh/pod-arbitrating"  # in memory only, never written
LABEL_EVICT_POLICY = "koordinator.sh/evict-policy"
ANNOTATION_DESCHEDULER_EVICT = "descheduler.alpha.kubernetes.io/evict"  # any value: bypass the filters
ANNOTATION_PREFER_NO_EVICTION = "descheduler.alpha.kubernetes.io/prefer-no-eviction"
EVICTION_COST_NEVER = 2**31 - 1


def eviction_cost(annotations: Mapping[str, object]) -> int:
    """GetEvictionCost: the annotation's int32, 0 when absent or invalid."""
    return go_int32(annotations.get(ANNOTATION_EVICTION_COST)) or 0
