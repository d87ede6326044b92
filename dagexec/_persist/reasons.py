"""What :func:`dagexec.explain` says about one task: a :class:`Reason`, or a map's
:class:`MapItems`; kept apart so that the walk that finds them
(:mod:`dagexec._persist.forecast`) and the function that returns them share them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CODE_CHANGED",
    "CONSTANT_CHANGED",
    "DAMAGED",
    "KINDS",
    "NOT_CHECKPOINTED",
    "NOT_STORED",
    "UPSTREAM_CHANGED",
    "MapItems",
    "Reason",
]

# Reason kinds, in precedence order.
NOT_CHECKPOINTED = "not checkpointed"
CODE_CHANGED = "code changed"
CONSTANT_CHANGED = "constant changed"
UPSTREAM_CHANGED = "upstream changed"
NOT_STORED = "not stored"
DAMAGED = "damaged"
KINDS = (NOT_CHECKPOINTED, CODE_CHANGED, CONSTANT_CHANGED, UPSTREAM_CHANGED, NOT_STORED, DAMAGED)


@dataclass(frozen=True)
class Reason:
    """Why one task would run: ``kind`` (one of :data:`KINDS`) and a sentence."""

    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class MapItems:
    """What a run would do with one map's items, as far as the file tells.

    ``total``: how many items (None: the list it maps over is made during the
    run); ``load``: how many would load instead of running (0: every item
    runs; None: decided during the run, by each item's element).
    """

    total: int | None
    load: int | None

    @property
    def run(self) -> int | None:
        """How many items would run; None unless both counts are known."""
        if self.total is None or self.load is None:
            return None
        return self.total - self.load
