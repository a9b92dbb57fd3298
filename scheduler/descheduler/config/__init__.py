"""`--config`: a DeschedulerConfiguration (descheduler/v1alpha2) decoded strictly, defaulted and validated."""
