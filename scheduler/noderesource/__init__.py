"""The node resources koord-manager's noderesource controller writes (devices, batch, mid), slim for koord-sched."""
