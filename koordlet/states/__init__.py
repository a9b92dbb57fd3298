"""This node's view of the cluster: pods (kubelet, API server or a pods dir), Node, NodeSLO, QoS/priority rules."""
