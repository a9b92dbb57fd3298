"""QoS enforcement: pure planners (resctrl, CPU QoS, blkio) that emit writes, and the one executor that applies them."""
