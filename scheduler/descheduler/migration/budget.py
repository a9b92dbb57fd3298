"""How many pods of a workload may migrate or be unavailable at once, and the expected-replicas rule.

Upstream: pkg/descheduler/controllers/migration/util/util.go (GetMaxUnavailable, GetMaxMigrating, GetLimiterBurst),
arbitrator/filter.go (filterExpectedReplicas).
"""

from __future__ import annotations

from scheduler.descheduler.config.migration_args import IntOrPercent, scaled_int_or_percent


def max_unavailable(replicas: int, value: IntOrPercent | None) -> int:
    """`value` scaled to `replicas` (a percent rounds down); unset: 10% above 10 replicas, 2 from 4 to 10, else 1.
    A result of 0 becomes 1 (v1.6), and the result never exceeds `replicas`. ValueError for a string that is not
    "<int>%"."""
    if value is None:
        value = "10%" if replicas > 10 else 2 if replicas >= 4 else 1
    n = scaled_int_or_percent(value, replicas, False)
    if n == 0:
        n = 1
    return min(n, replicas)


max_migrating = max_unavailable  # upstream GetMaxMigrating is GetMaxUnavailable


def limiter_burst(burst: int) -> int:
    """An object limiter's burst: 0 (or less) reads 1."""
    return burst if burst > 0 else 1


def expected_replicas_refused(replicas: int, migrating: IntOrPercent | None, unavailable: IntOrPercent | None) -> bool:
    """True when a pod of a workload with `replicas` may not migrate at all: one replica, or every replica allowed to
    migrate or to be unavailable at once. ValueError as max_unavailable."""
    return replicas == 1 or replicas == max_migrating(replicas, migrating) \
        or replicas == max_unavailable(replicas, unavailable)
