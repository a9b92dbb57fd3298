"""The PodResources proxy (gate PodResourcesProxy): kubelet's PodResourcesLister on koordlet's own socket, with the
devices koord-scheduler allocated added, so Multus and DCGM-exporter see them (docs/podresources.md)."""
