"""Runtime hooks: what koordlet adds to a pod or container at creation, computed from plain records only."""
