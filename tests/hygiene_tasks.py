"""Process tasks for tests/test_shared_child_hygiene.py: each changes or reports
what a shared child could carry from one user to the next (imported by name in
the child, so they live in a module of their own)."""

from __future__ import annotations

import os
import sys
import time


def move_child(directory: str, variable: str, path_entry: str) -> int:
    """Change this child's directory, environment and ``sys.path``, as a careless task may."""
    os.chdir(directory)
    os.environ[variable] = "set by a task"
    sys.path.insert(0, path_entry)
    return os.getpid()


def where(variable: str, path_entry: str) -> tuple[int, str, str | None, bool]:
    """This child's pid, directory, ``variable`` and whether ``path_entry`` is on its path."""
    return os.getpid(), os.getcwd(), os.environ.get(variable), path_entry in sys.path


def local_hour() -> tuple[int, int]:
    """The child's pid and the local hour of the epoch (0 in UTC, 9 in Tokyo)."""
    return os.getpid(), time.localtime(0).tm_hour


def say(text: str) -> int:
    """Print ``text`` on the child's standard output."""
    print(text)
    return os.getpid()


def cwd_length() -> int:
    return len(os.getcwd())
