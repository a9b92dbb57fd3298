"""The pending queue of `koord-sched run`: which pods a cycle tries (queueing hints), in which order (fair queuing)."""
