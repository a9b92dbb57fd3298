"""Kubernetes core vocabulary both programs read: quantities, pod requests and limits, the JSON object shape."""
