"""The CoreClient: what a driver or worker process owns (its tasks, leases and generators, the objects it owns and borrows, its actor handles, lineage) and its links to the head and its node."""
