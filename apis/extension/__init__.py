"""Koordinator's annotations, labels and resource names (upstream apis/extension), each with one decoder."""
