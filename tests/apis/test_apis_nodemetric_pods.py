"""apis/slo/nodemetric: each podsMetric entry's priority class (LoadAware counts koord-prod pods' usage apart)."""

from __future__ import annotations

from apis.slo.nodemetric import node_metric_status


def test_pod_priority_read() -> None:
    st = node_metric_status({"status": {"nodeMetric": {}, "podsMetric": [
        {"namespace": "ns", "name": "a", "priority": "koord-prod", "podUsage": {"resources": {"cpu": "1"}}},
        {"namespace": "ns", "name": "b", "podUsage": {"resources": {"memory": "1Ki"}}}]}})
    assert [(p.key, p.priority, p.usage) for p in st.pods] == [("ns/a", "koord-prod", {"cpu": 1000}),
                                                                ("ns/b", "", {"memory": 1024})]
