"""Where node reports go: the Kubernetes API in a cluster, the state dir and HTTP when standalone."""
