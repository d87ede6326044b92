"""Messages between a worker thread and its child process: pickle over a pipe, large
buffers through shared memory.

A message is one length-prefixed frame holding ``(meta, data, readonly, sizes,
where)``: ``data`` is the value pickled with protocol 5, its large buffers taken
out of band (``numpy`` arrays, ``bytearray``, and top-level ``bytes`` lifted by
:func:`lift`). Those buffers follow either as raw frames on the same pipe, or, when
they add up to :data:`SHM_MIN` or more and ``/dev/shm`` has room, back to back in
one shared-memory file named by ``where``. The receiver copies each buffer out
once, into ``bytes`` (read-only buffers: a ``bytes`` argument arrives as
``bytes``) or a ``bytearray`` (writable ones: a mutable array stays mutable), and
hands those to ``pickle.loads``. A 50 MB argument so costs one write and one read
of its bytes, about what an in-process ``pickle.dumps`` + ``loads`` costs; through
the pipe alone it measured 2.2x that (64 KiB per kernel round trip).

Shared memory is POSIX shared memory as Linux provides it (files in ``/dev/shm``,
which is what :mod:`multiprocessing.shared_memory` uses there) opened with plain
``os`` calls: 3.11's ``SharedMemory`` starts a resource-tracker process and
registers every segment a child opens, which is not wanted here. The *parent*
names and unlinks every segment, both directions (see
:class:`dagexec._engine.process_pool.ChildSlot`), so no segment outlives a killed
child. Without ``/dev/shm`` (macOS, Windows) everything goes through the pipe.

Imported by the child process too: standard library only, nothing else of dagexec.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
from typing import Any

__all__ = [
    "lift",
    "read_frame",
    "receive",
    "send",
    "unlink_quietly",
    "write_frame",
]

# Buffers at least this large leave the pickle stream (out of band). Lower moves
# more small buffers around one by one; higher copies more into the stream.
OOB_MIN = 64 * 1024
# Out-of-band buffers adding up to this go through shared memory, not the pipe.
# Below it a file create + unlink costs more than the pipe's extra copies.
SHM_MIN = 1024 * 1024
# Kept free in /dev/shm beyond the segment itself, for the rest of the machine.
_SHM_MARGIN = 64 * 1024 * 1024
_SHM_DIR = "/dev/shm"
_LEN = struct.Struct("<Q")
_CHUNK = 1 << 30  # one read/write call moves at most this much (Linux caps ~2 GiB)


_shm_checked: tuple[str, str | None] | None = None  # (_SHM_DIR, the answer for it)


def shm_dir() -> str | None:
    """The shared-memory directory, or None where there is none (looked up once)."""
    global _shm_checked
    checked = _shm_checked
    if checked is None or checked[0] != _SHM_DIR:
        usable = os.path.isdir(_SHM_DIR) and os.access(_SHM_DIR, os.W_OK)
        checked = _shm_checked = (_SHM_DIR, _SHM_DIR if usable else None)
    return checked[1]


def lift(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` with each large ``bytes`` element wrapped so that it goes out of band.

    Pickle keeps ``bytes`` in the stream (copying it in and out again); wrapped in a
    :class:`pickle.PickleBuffer` it travels as a raw buffer and arrives as the
    ``bytes`` the receiver made of it.
    """
    if not any(type(v) is bytes and len(v) >= OOB_MIN for v in values):
        return values
    return tuple(
        pickle.PickleBuffer(v) if type(v) is bytes and len(v) >= OOB_MIN else v for v in values
    )


def dumps(obj: Any) -> tuple[bytes, list[memoryview]]:
    """``obj`` pickled (protocol 5), and its large buffers, taken out of the stream."""
    buffers: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        view = buffer.raw()
        if view.nbytes < OOB_MIN:
            return True  # in band
        buffers.append(view)
        return False

    return pickle.dumps(obj, protocol=5, buffer_callback=out_of_band), buffers


def send(fd: int, meta: Any, data: bytes, buffers: list[memoryview], shm_path: str | None) -> bool:
    """Write one message; True if its buffers went through ``shm_path``.

    Raises:
        OSError: the pipe is closed (the other side died).
    """
    sizes = tuple(b.nbytes for b in buffers)
    where = None
    if shm_path is not None and sum(sizes) >= SHM_MIN and _room(sum(sizes)):
        try:
            _write_file(shm_path, buffers)
            where = shm_path
        except OSError:  # /dev/shm filled up meanwhile: the pipe still works
            unlink_quietly(shm_path)
    readonly = tuple(b.readonly for b in buffers)
    write_frame(fd, pickle.dumps((meta, data, readonly, sizes, where), protocol=5))
    if where is None:
        for b in buffers:
            write_frame(fd, b)
    return where is not None


def receive(fd: int, *, unlink: bool = False) -> tuple[Any, bytes, list[Any]]:
    """Read one message: its meta, its pickle stream and its buffers, ready for loads.

    With ``unlink``, the shared-memory file the buffers came in is removed once read
    (the parent does that for its child's replies).

    Raises:
        EOFError: the pipe closed (the other side died or closed it).
    """
    meta, data, readonly, sizes, where = pickle.loads(read_frame(fd))
    buffers: list[Any] = []
    if where is not None:
        file = os.open(where, os.O_RDONLY)
        try:
            offset = 0
            for size, ro in zip(sizes, readonly, strict=True):
                chunk = os.pread(file, size, offset) if ro and size <= _CHUNK else b""
                if len(chunk) == size:  # bytes straight from the file: one copy
                    buffers.append(chunk)
                else:
                    buffer = bytearray(size)
                    _read_exact(file, memoryview(buffer), offset)
                    buffers.append(bytes(buffer) if ro else buffer)
                offset += size
        finally:
            os.close(file)
            if unlink:
                unlink_quietly(where)
    else:
        for ro in readonly:
            raw = read_frame(fd)
            buffers.append(bytes(raw) if ro else raw)
    return meta, data, buffers


def write_frame(fd: int, payload: bytes | memoryview) -> None:
    """Write ``payload`` with its length in front, whole."""
    size = len(payload) if isinstance(payload, bytes) else payload.nbytes
    if size < 65536:
        _write_all(fd, _LEN.pack(size) + bytes(payload))
        return
    _write_all(fd, _LEN.pack(size))
    _write_all(fd, payload)


def read_frame(fd: int) -> bytearray:
    """Read one frame written by :func:`write_frame`.

    Raises:
        EOFError: the pipe closed before a whole frame came.
    """
    head = bytearray(8)
    _read_pipe(fd, memoryview(head))
    payload = bytearray(_LEN.unpack(head)[0])
    _read_pipe(fd, memoryview(payload))
    return payload


def unlink_quietly(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _room(size: int) -> bool:
    try:
        st = os.statvfs(_SHM_DIR)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= size + _SHM_MARGIN


def _write_file(path: str, buffers: list[memoryview]) -> None:
    file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for b in buffers:
            _write_all(file, b)
    finally:
        os.close(file)


def _write_all(fd: int, payload: bytes | memoryview) -> None:
    view = memoryview(payload).cast("B")
    while view:
        written = os.write(fd, view[:_CHUNK])
        view = view[written:]


def _read_pipe(fd: int, view: memoryview) -> None:
    while view:
        got = os.readv(fd, [view[:_CHUNK]])
        if not got:
            raise EOFError("the other side of the pipe closed")
        view = view[got:]


def _read_exact(fd: int, view: memoryview, offset: int) -> None:
    while view:
        got = os.preadv(fd, [view[:_CHUNK]], offset)
        if not got:
            raise EOFError("shared-memory segment shorter than announced")
        view = view[got:]
        offset += got
