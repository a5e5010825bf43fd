"""The worker process: its main loop running tasks and actor calls, concurrency groups, compiled-graph execution, and its output forwarding."""
