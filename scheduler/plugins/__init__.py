"""Koordinator scheduler plugins: LoadAwareScheduling, NodeResourcesFitPlus, ScarceResourceAvoidance."""
