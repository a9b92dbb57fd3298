"""The descheduler's plugins; each imports only scheduler.descheduler.interfaces of the framework."""
