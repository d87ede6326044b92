"""The clock of retry waits and attempt deadlines, in one place tests can replace.

The trace and the balancer use ``perf_counter``; waits and timeouts use this one,
read through the module at call time so that a test can drive it by hand
(``monkeypatch.setattr(clock, "now", fake)``).
"""

from __future__ import annotations

from time import monotonic

__all__ = ["now"]

now = monotonic
