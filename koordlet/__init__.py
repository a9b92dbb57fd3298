"""A light node agent that speaks Koordinator's koordlet APIs: NodeMetric, Prometheus, devices and QoS."""

__version__ = "0.1.0"
