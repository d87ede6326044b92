"""Watching a run: the trace, progress bar, Chrome export, Gantt chart and graph drawings."""
