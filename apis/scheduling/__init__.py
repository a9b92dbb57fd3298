"""Koordinator's scheduling objects: Reservation, Device, ElasticQuota, gangs (upstream apis/scheduling)."""
