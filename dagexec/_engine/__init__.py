"""Threads, queues, clocks and signals: the executor, the scheduler thread and its workers."""
