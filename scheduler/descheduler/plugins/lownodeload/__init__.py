"""LowNodeLoad: evict pods from nodes whose measured load is above the high thresholds to nodes below the low ones
(upstream pkg/descheduler/framework/plugins/loadaware)."""
