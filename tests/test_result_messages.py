"""Why a name has no value in a RunResult: the message says which case and the fix."""

from __future__ import annotations

import pytest
from common import LastResult, diamond

import dagexec
from dagexec import Graph, TaskState

# --- why a name has no value in a result -------------------------------------


def test_a_task_that_ran_but_is_no_target_says_so_and_how_to_ask_for_it() -> None:
    result = dagexec.run(diamond(), targets=["norm"], workers=1)
    assert result.status["raw"] is TaskState.DONE
    with pytest.raises(KeyError) as info:
        result["raw"]
    message = str(info.value)
    assert "'raw' is not a target of this run" in message
    assert "it ran" in message
    assert "pass it in targets=[..., 'raw']" in message
    assert "DONE" not in message  # the old message: "has no value: it is DONE"


def test_no_value_messages_for_failed_skipped_cancelled_and_unknown_names() -> None:
    g = Graph()
    g.add("a", lambda: 1)
    g.add("bad", lambda a: 1 / 0, deps=["a"])
    g.add("after", lambda x: x, deps=["bad"])
    g.add("ok", lambda a: a, deps=["a"])
    result = dagexec.run(g, targets=["bad", "after", "ok"], workers=1, on_error="continue")
    with pytest.raises(KeyError, match=r"target 'bad' has no value: it is FAILED: it raised"):
        result["bad"]
    assert result["ok"] == 1
    with pytest.raises(KeyError, match="target 'after' has no value: it is SKIPPED: a task it"):
        result["after"]
    with pytest.raises(KeyError, match="'a' is not a target of this run: it ran"):
        result["a"]
    sinks_only = dagexec.run(g, workers=1, on_error="continue")
    with pytest.raises(KeyError, match="'bad' is not a target of this run, and has no value"):
        sinks_only["bad"]
    with pytest.raises(KeyError, match="'nope' is not a task of this run"):
        result["nope"]
    assert "nope" not in result and "a" not in result and result.get("bad") is None

    stopped = LastResult()
    g2 = Graph()
    g2.add("boom", lambda: 1 / 0)
    g2.add("later", lambda b: b, deps=["boom"])
    g2.add("free", lambda: 1)
    with pytest.raises(ZeroDivisionError):
        dagexec.run(g2, workers=1, callbacks=[stopped])
    assert stopped.result is not None
    cancelled = [n for n, s in stopped.result.status.items() if s is TaskState.CANCELLED]
    assert "later" in cancelled
    with pytest.raises(KeyError, match="target 'later' has no value: it is CANCELLED: the run"):
        stopped.result["later"]
