"""Kubernetes core vocabulary both programs read: the JSON object shape, quantities, Go durations, pod requests and
limits, and the one exception tree."""
