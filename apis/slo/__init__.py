"""NodeSLO and slo-controller-config as frozen, merged, typed configuration (upstream apis/slo/v1alpha1)."""
