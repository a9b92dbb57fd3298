"""The MigrationController: PodMigrationJobs, the limits on migrating pods, arbitration and the job lifecycle."""
