"""The executor's front: what a caller touches (Executor, run, submit, RunFuture), the
checks made before any thread starts, queued runs, Ctrl-C, and shutdown."""
