"""One run: its scheduler thread's loop (the driver), what each report means, stopping,
attempt timers, the inbox balance and depth, and how the run's outcome is told."""
