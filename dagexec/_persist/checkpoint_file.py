"""Whether a checkpoint file may be opened: private, ours, a dagexec checkpoint.

Loading a checkpoint unpickles its values, and unpickling runs code named in
the data. So a file that someone else could have written is refused before it
is read: one owned by another user, or writable by group or others, and the
same for its ``-wal``/``-shm`` companions (SQLite replays a ``-wal`` into the
database when it opens it). A file dagexec creates is created ``0600``;
SQLite then gives its ``-wal`` and ``-shm`` the database file's permissions.

A path that is a symbolic link is resolved once, before anything else
(:func:`resolve_link`), and the file is then created, checked and opened at its
target, so SQLite never creates it through the link (with its own mode 0644).
A link is someone's choice of where the values go: one owned by another user,
or one in a shared directory (sticky or world-writable) that is not the user's,
where anyone could have planted it, is refused like another user's file. A
``-wal`` or ``-shm`` that is a link is refused too (SQLite never makes one).

Then what the file *is*, so that each case gets its own message and its own
fix: a file that is not SQLite, a SQLite database of something else (never
written into: we would add our tables to it), a healthy file that is only
read-only (not "damaged"), a directory where SQLite cannot create its ``-wal``.

All functions raise :class:`~dagexec.CheckpointError` naming the file, what is
wrong and what to do. Pure file-system checks plus one read-only query.
"""

from __future__ import annotations

import os
import sqlite3
import stat

from .._core.errors import CheckpointError

__all__ = [
    "check_contents",
    "check_private",
    "create_private",
    "damaged",
    "resolve_link",
]

_COMPANIONS = ("", "-wal", "-shm")


_MAX_LINKS = 40  # as the kernel's limit: a longer chain is a loop


def resolve_link(path: str) -> str:
    """The file ``path`` names, following its symbolic links once; ``path`` if it is none.

    Every link in the chain is checked (see the module docstring) before the
    next is followed; directories on the way are resolved as the system does.

    Raises:
        CheckpointError: a link is another user's, or sits in a shared directory
            that is not the user's, or the chain loops.
    """
    if not os.path.islink(path):
        return path
    current = path
    for _ in range(_MAX_LINKS):
        if not os.path.islink(current):
            return os.path.realpath(current)
        _check_link(path, current)
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    raise CheckpointError(
        f"checkpoint {path!r} is a chain of more than {_MAX_LINKS} symbolic links (a "
        "loop?); give the path of the file itself",
        path=path,
    )


def _check_link(path: str, link: str) -> None:
    """Refuse a link that someone else chose: theirs, or in a shared directory."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return
    me = getuid()
    owner = os.lstat(link).st_uid
    why = ""
    if owner != me:
        why = f"belongs to another user (uid {owner}, you are {me})"
    else:
        directory = os.path.dirname(os.path.abspath(link))
        info = os.stat(directory)
        shared = info.st_mode & (stat.S_ISVTX | stat.S_IWOTH)
        if shared and info.st_uid != me:
            kind = "sticky" if info.st_mode & stat.S_ISVTX else "world-writable"
            why = (
                f"is in {directory!r}, a shared ({kind}) directory of another user "
                f"(uid {info.st_uid}), where anyone could have made it"
            )
    if why:
        raise CheckpointError(
            f"checkpoint {path!r}: the symbolic link {link!r} {why}. A link chooses "
            "where the values are written and read, and loading a checkpoint "
            "unpickles its values, which can run any code: give the path of the "
            "file itself, or a link in a directory of your own",
            path=path,
        )


def create_private(path: str) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (never truncates)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # someone else's or an old one: check_private decides
    except OSError:
        return  # a missing directory: SQLite's own error names it
    os.close(fd)


def check_private(path: str) -> None:
    """Refuse a checkpoint (or its -wal/-shm) that another user could have written.

    POSIX only: Windows reports no owner in ``st_uid`` and every writable file
    as mode 0o666, so there the file's ACL is the user's to keep private.
    """
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return
    for suffix in _COMPANIONS:
        name = path + suffix
        try:
            info = os.lstat(name)  # not through a link: resolve_link ran before
        except FileNotFoundError:
            continue
        except OSError:
            continue  # unreadable: opening it reports why
        if stat.S_ISLNK(info.st_mode):
            raise CheckpointError(
                f"checkpoint {path!r}: {name!r} is a symbolic link, which neither "
                "dagexec nor SQLite makes there: someone chose where it points. "
                "Delete it if you made it, else give another path",
                path=path,
            )
        if info.st_uid != getuid():
            raise CheckpointError(
                f"checkpoint {path!r}: {name!r} belongs to another user (uid "
                f"{info.st_uid}, you are {getuid()}). Loading a checkpoint unpickles "
                "its values, which can run any code, so only your own files are "
                "read: give another path, or delete the file if you trust nobody wrote it",
                path=path,
            )
        if stat.S_ISREG(info.st_mode) and info.st_mode & 0o022:
            raise CheckpointError(
                f"checkpoint {path!r}: {name!r} is writable by "
                f"{_who(info.st_mode)} (mode {stat.filemode(info.st_mode)}). Loading a "
                "checkpoint unpickles its values, which can run any code, so anyone "
                f"who can write it could run code as you: run 'chmod 600 {name}' if "
                "you trust its contents, else delete it",
                path=path,
            )


def _who(mode: int) -> str:
    both = mode & 0o020 and mode & 0o002
    return "group and others" if both else "its group" if mode & 0o020 else "others"


def check_writable(path: str) -> None:
    """Refuse a healthy file we cannot write (each finished task is saved into it)."""
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise CheckpointError(
            f"checkpoint {path!r} is read-only: a checkpointed run saves every finished "
            f"task into it. Make it writable ('chmod u+w {path}'), or copy it and "
            "give the copy",
            path=path,
        )
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(directory) and not os.access(directory, os.W_OK | os.X_OK):
        raise CheckpointError(
            f"checkpoint {path!r}: its directory {directory!r} is not writable, and "
            "SQLite keeps a write-ahead log (-wal) next to the file; give a path in a "
            "writable directory",
            path=path,
        )


def check_contents(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a file that is not SQLite, or is SQLite but not a dagexec checkpoint.

    ``conn`` is open on ``path``; only read from. An empty file (one we just
    created) is a new checkpoint.
    """
    try:
        tables = [
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
    except sqlite3.DatabaseError as exc:
        raise damaged(path, exc) from exc
    if tables and "dagexec_meta" not in tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise CheckpointError(
            f"{path!r} is a SQLite database of something else (tables: {shown}), not a "
            "dagexec checkpoint; nothing was written to it. Give the checkpoint another path",
            path=path,
        )


def damaged(path: str, exc: BaseException) -> CheckpointError:
    """The error for a file SQLite cannot read (not SQLite at all, or damaged)."""
    return CheckpointError(
        f"checkpoint {path!r} cannot be read ({type(exc).__name__}: {exc}): it is not a "
        "dagexec checkpoint, or it is damaged. Delete it to start afresh (what it held "
        "is computed again), restore a copy, or give another path",
        path=path,
    )
