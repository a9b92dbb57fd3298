"""A slim koord-scheduler: places pods from Device CRs and NodeMetrics with upstream's plugin semantics."""
