"""Peak prediction over pod and node usage for NodeMetric's prodReclaimableMetric and prodPeakMetric."""
