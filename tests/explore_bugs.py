"""Three undeclared dependencies for ``dagexec.testing.explore``: a shared file, a
module-level cache, a database row. Used by tests/test_explore.py and
benchmarks/explore.py; docs/explore.md shows the same three.

In each, the writer and the reader share one resource (the disk, the rates
API, the database connection: ``capacity``), so a plain run never overlaps
them, and the writer, added first, always goes first: every plain run hides
the bug, on any number of workers. ``explore`` reorders them within the
bounds. Each has a ``setup`` that puts the world back (the old file, an empty
cache, the old row), and a ``fixed`` variant with the missing ``deps=``
declared. Importable by name, so that a child process can
load the file bug's tasks (``isolate="process"``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, NamedTuple

import dagexec


class Bug(NamedTuple):
    graph: dagexec.Graph
    setup: Callable[[], None]
    readers: tuple[Any, ...]  # the tasks that read what the writer writes
    writer: Any
    capacity: dict[str, float]  # the run's resources= (one slot the two share)


# -- 1. a shared file: "load" reads the config that "write_config" writes.


def write_config(path: str) -> str:
    Path(path).write_text("threads = 8\n")
    return "written"


def load_config(path: str, after: object = None) -> int:
    text = Path(path).read_text()
    return int(text.split("=")[1]) if text else 0


def file_bug(directory: Path, *, fixed: bool = False, isolate: str | None = None) -> Bug:
    path = str(directory / "app.cfg")

    def setup() -> None:
        Path(path).write_text("threads = 1\n")

    g = dagexec.Graph()
    options: dict[str, Any] = {"resources": {"disk": 1}}
    if isolate is not None:
        options["isolate"] = isolate
    g.add("write_config", write_config, args=[path], **options)
    deps = {"after": "write_config"} if fixed else {}
    g.add("load", load_config, args=[path], deps=deps, **options)
    g.add("plan", lambda threads: f"{threads} threads", deps=["load"])
    return Bug(g, setup, ("load",), "write_config", {"disk": 1})


# -- 2. a module-level cache: the map "price" reads rates that "load_rates" caches.

_rates: dict[str, float] = {}


def load_rates() -> int:
    _rates.update({"EUR": 1.1, "GBP": 1.3})
    return len(_rates)


def price(amount: tuple[str, float], after: object = None) -> float:
    currency, value = amount
    return value * _rates.get(currency, 1.0)


def cache_bug(*, fixed: bool = False) -> Bug:
    g = dagexec.Graph()
    g.add("load_rates", load_rates, resources={"api": 1})
    g.add("orders", lambda: [("EUR", 10.0), ("GBP", 20.0)], resources={"api": 1})
    g.map("price", price, over="orders", deps=["load_rates"] if fixed else [])
    g.add("total", sum, deps=["price"])
    return Bug(g, _rates.clear, (("price", 0), ("price", 1)), "load_rates", {"api": 1})


# -- 3. a database row: "statement" reads the balance that "deposit" updates.


def deposit(db: str) -> int:
    with closing(sqlite3.connect(db)) as con, con:
        con.execute("UPDATE accounts SET balance = balance + 50 WHERE id = 1")
    return 50


def statement(db: str, after: object = None) -> str:
    with closing(sqlite3.connect(db)) as con, con:
        (balance,) = con.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()
    return f"balance: {balance}"


def database_bug(directory: Path, *, fixed: bool = False) -> Bug:
    db = str(directory / "bank.sqlite")

    def setup() -> None:
        with closing(sqlite3.connect(db)) as con, con:
            con.execute("CREATE TABLE IF NOT EXISTS accounts (id INTEGER PRIMARY KEY, balance INT)")
            con.execute("INSERT OR REPLACE INTO accounts VALUES (1, 100)")

    g = dagexec.Graph()
    g.add("deposit", deposit, args=[db], resources={"db": 1})
    deps = {"after": "deposit"} if fixed else {}
    g.add("statement", statement, args=[db], deps=deps, resources={"db": 1})
    g.add("mail", str.upper, deps=["statement"])
    return Bug(g, setup, ("statement",), "deposit", {"db": 1})
