"""One run as a state machine: which task is ready, running, ended; which value is alive.

Pure: no threads, queues, clocks or logging. It reports through events, so it can
be driven step by step by a thread-free test and by the engine alike.
"""
