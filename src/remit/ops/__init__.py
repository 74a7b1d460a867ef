"""Operating an app: the worker and its registry, the DBOS runtime, the reconciler, schedules, pause, retries and deploy checks."""
