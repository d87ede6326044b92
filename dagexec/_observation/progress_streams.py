"""Log lines kept apart from the progress bar: proxies in front of the terminal streams.

For the length of a run on a terminal, :class:`dagexec.ProgressBar` puts a
:class:`LineSafeStream` in ``sys.stdout``/``sys.stderr`` and in the
``logging.StreamHandler`` objects that write to the same terminal. Each write
through a proxy goes to the bar, which erases its line, writes, and redraws
itself below a completed line. This module finds those streams and swaps the
proxies in and out; what a write does is the bar's.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["LineSafeStream", "StreamSwaps"]


class LineSafeStream:
    """Stands in for a terminal stream during a run, so writes do not cut the bar.

    Everything but ``write`` (and ``writelines``) goes to the real stream. Its
    own attributes start with an underscore, so that none hides the stream's.
    """

    def __init__(
        self,
        target: Any,
        write_around: Callable[[Any, str], int],
        close_if_abandoned: Callable[[], None],
    ) -> None:
        self._target = target
        self._write_around = write_around  # the bar's: line off, text on, line back
        self._close_if_abandoned = close_if_abandoned  # the bar's, for a run Ctrl-C left

    def write(self, text: str) -> int:
        return self._write_around(self._target, text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return f"<dagexec progress-safe stream for {self._target!r}>"


class StreamSwaps:
    """The proxies one run put in place, taken out again by :meth:`uninstall`."""

    def __init__(self) -> None:
        self._swapped: list[tuple[Any, str, Any, LineSafeStream]] = []

    def install(self, terminal: Any, proxy_for: Callable[[Any], LineSafeStream]) -> None:
        """Put a proxy in front of ``terminal`` (and stdout, if another tty) wherever used."""
        targets: list[Any] = [terminal]
        if sys.stdout is not None and sys.stdout is not terminal and _is_tty(sys.stdout):
            targets.append(sys.stdout)  # another stream on the same terminal, most likely
        proxies = {id(t): proxy_for(t) for t in targets}
        for owner, attr in ((sys, "stdout"), (sys, "stderr")):
            current = getattr(owner, attr)
            if id(current) in proxies:
                self._swap(owner, attr, current, proxies[id(current)])
        for handler in _stream_handlers():
            current = getattr(handler, "stream", None)
            if id(current) in proxies:
                self._swap(handler, "stream", current, proxies[id(current)])

    def _swap(self, owner: Any, attr: str, original: Any, proxy: LineSafeStream) -> None:
        try:
            setattr(owner, attr, proxy)
        except Exception:  # a handler that refuses: leave it alone
            return
        self._swapped.append((owner, attr, original, proxy))

    def uninstall(self) -> None:
        """Put the original streams back; idempotent."""
        swapped, self._swapped = self._swapped, []
        for owner, attr, original, proxy in reversed(swapped):
            # Only undo what is still ours: someone may have replaced it since.
            if getattr(owner, attr, None) is proxy:
                setattr(owner, attr, original)


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def _stream_handlers() -> list[logging.Handler]:
    """Every handler of the root logger and of every logger made so far."""
    loggers: list[Any] = [logging.getLogger()]
    loggers += list(logging.Logger.manager.loggerDict.values())
    found: dict[int, logging.Handler] = {}
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler):
                found[id(handler)] = handler
    return list(found.values())
