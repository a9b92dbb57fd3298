"""koord-descheduler: Koordinator's descheduler (LowNodeLoad, DefaultEvictor, the MigrationController) restated."""
