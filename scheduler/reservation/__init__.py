"""Reservation objects: scheduled like pods, serving their owners (issue #16)."""
