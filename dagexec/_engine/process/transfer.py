"""Messages between a worker thread and its child process: pickle over a pipe, large
buffers through shared memory.

A message is one length-prefixed frame: the length of an envelope, the envelope
(``(meta, layout)`` pickled; ``layout`` is None, or ``(readonly, sizes, where)``
when the message has out-of-band buffers) and ``data``, the value pickled with
protocol 5, its large buffers taken out of band (``numpy`` arrays, ``bytearray``,
and top-level ``bytes`` lifted by :func:`lift`). The frame goes in one ``write``
and, up to 64 KiB, comes out of one ``read`` (a :class:`Reader` keeps what a read
brought beyond the frame): a round trip costs each side one write and one read,
each a release of the GIL that another thread may take meanwhile.
Those buffers follow either as raw frames on the same pipe, or, when
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
:class:`dagexec._engine.process.process_pool.ChildSlot`), so no segment outlives a killed
child. Without ``/dev/shm`` (macOS, Windows) everything goes through the pipe.
A message without out-of-band buffers never looks at ``/dev/shm``.

Messages: every ``meta`` is a tuple whose first item is its kind, one of the
constants below; the fields after it are the kind's own. The parent sends
:data:`CALL`; the child answers each call with one final message, :data:`VALUE`
or :data:`ERROR`. A new kind (a log record, say) is one more constant here, a
``send`` in ``child.py`` and one more branch in the parent's wait loop
(``ChildSlot._wait``), which handles kinds that are not final and waits on.

Segment names carry both pids, ``dagexec-<parent>-<child>-<seq>-in|out``: a child
whose parent died unlinks its own (:func:`unlink_segments`), and a later program
sweeps those of parents that are gone (``dagexec._engine.process.lifecycle``).

Imported by the child process too: standard library only, nothing else of dagexec.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "BEGAN",
    "CALL",
    "DROPPED",
    "ERROR",
    "LOG",
    "LOGS",
    "PLACE",
    "SEGMENT_PREFIX",
    "VALUE",
    "VALUE_META",
    "WITHDRAW",
    "EarlyCalls",
    "Reader",
    "dumps",
    "lift",
    "receive",
    "send",
    "shm_dir",
    "unlink_quietly",
    "unlink_segments",
]

# Message kinds, each ``meta[0]`` (see the module doc).
# parent -> child: (CALL, seq, name, attempt, shm dir or None, extra, early); a call
# sent ``early`` (before the one running ends: dagexec._engine.process.early) is
# answered first with BEGAN or DROPPED, then, if it began, as any call.
CALL = "call"
# child -> parent, not final: (BEGAN, seq, time.monotonic() there): the early call
# ``seq`` begins loading now; its deadline counts from that stamp.
BEGAN = "began"
# child -> parent, not final: (DROPPED, seq): the early call ``seq`` was withdrawn
# before it began; it is never run, and no other answer comes for it.
DROPPED = "dropped"
# Or-ed into a seq written on the stops pipe: withdraw that early call if it has not
# begun (the child answers DROPPED), rather than forward a stop to the call running.
WITHDRAW = 1 << 63
VALUE = "value"  # child -> parent, final: (VALUE,); data is (value,) pickled
VALUE_META = (VALUE,)  # the meta a child sends it with (its envelope is made once)
# child -> parent, final: (ERROR, (module, qualname, message, traceback note), why
# it did not pickle or None); data is the exception pickled, or empty if it did not
ERROR = "error"
# parent -> child, before a CALL whenever it changes: (LOGS, (level, logger name or
# None) or None): which logging records the calls must stream back (run(logs=...)).
LOGS = "logs"
# parent -> child, before a CALL whenever it changes (a shared child's new user,
# see dagexec._engine.process.sharing): (PLACE, working directory or None,
# environment as bytes -> bytes): where the calls run from now on.
PLACE = "place"
# child -> parent, not final: (LOG,); data is one record's fields pickled, message
# formatted (dagexec._observation.capture takes it), sent as the call logs it.
LOG = "log"
# Every segment's name starts so, then "<parent pid>-<child pid>-".
SEGMENT_PREFIX = "dagexec-"

# Buffers at least this large leave the pickle stream (out of band). Lower moves
# more small buffers around one by one; higher copies more into the stream.
OOB_MIN = 64 * 1024
# Out-of-band buffers adding up to this go through shared memory, not the pipe.
# Below it a file create + unlink costs more than the pipe's extra copies.
SHM_MIN = 1024 * 1024
# Kept free in /dev/shm beyond the segment itself, for the rest of the machine.
_SHM_MARGIN = 64 * 1024 * 1024
_SHM_DIR = "/dev/shm"
_LEN = struct.Struct("<Q")  # a frame's length
_ENV = struct.Struct("<I")  # a message's envelope length, first in its frame
_HEAD = struct.Struct("<QI")  # both, as a message's frame starts
_READ = 64 * 1024  # what one read asks for: a small frame comes whole
_CHUNK = 1 << 30  # one read/write call moves at most this much (Linux caps ~2 GiB)
_VALUE_ENVELOPE = pickle.dumps((VALUE_META, None), protocol=5)


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
    # A loop here, not any() over a generator: a generator's frame and a call per
    # message, on both sides of every process task's round trip.
    for v in values:
        if type(v) is bytes and len(v) >= OOB_MIN:
            break
    else:
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

    ``shm_path`` is only looked at when the buffers add up to :data:`SHM_MIN`.

    Raises:
        OSError: the pipe is closed (the other side died).
    """
    layout = where = None
    if buffers:  # a message without them (most) never looks at /dev/shm
        sizes = tuple(b.nbytes for b in buffers)
        if shm_path is not None and sum(sizes) >= SHM_MIN and _room(sum(sizes)):
            try:
                _write_file(shm_path, buffers)
                where = shm_path
            except OSError:  # /dev/shm filled up meanwhile: the pipe still works
                unlink_quietly(shm_path)
        layout = (tuple(b.readonly for b in buffers), sizes, where)
    if meta is VALUE_META and layout is None:  # a child's usual answer: pickled once
        envelope = _VALUE_ENVELOPE
    else:
        envelope = pickle.dumps((meta, layout), protocol=5)
    head = _HEAD.pack(_ENV.size + len(envelope) + len(data), len(envelope))
    _write_parts(fd, head + envelope, data)
    if layout is not None and where is None:
        for b in buffers:
            _write_parts(fd, _LEN.pack(b.nbytes), b)
    return where is not None


class EarlyCalls:
    """Which early calls a child begins, as its two threads see them: the main loop
    decides for each early call it reads (:meth:`begin`), the stop listener withdraws one
    not read yet (:meth:`withdraw`), both under one lock, so that the parent hears
    exactly one of BEGAN and DROPPED for each early call."""

    __slots__ = ("decided", "dropped", "guard")

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.decided = 0  # the last early seq the main loop read (seqs only grow)
        self.dropped: set[int] = set()  # withdrawn before the main loop read them

    def begin(self, seq: int) -> bool:
        """The main loop read call ``seq``: False if it was withdrawn (skip it)."""
        with self.guard:
            self.decided = seq
            if seq in self.dropped:
                self.dropped.discard(seq)
                return False
        return True

    def withdraw(self, seq: int) -> bool:
        """The parent withdraws early call ``seq``: True if it had not begun (say
        DROPPED); False if it had (it said BEGAN, and runs as any call)."""
        with self.guard:
            if seq <= self.decided:
                return False
            self.dropped.add(seq)
        return True


class Reader:
    """The reading end of a pipe, read in frames: one ``read`` brings a small frame
    whole, and whatever it brought beyond that frame is kept for the next one."""

    __slots__ = ("fd", "pending")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = b""  # read already, not yet handed out

    def has_frame(self) -> bool:
        """True if a whole frame is here already: reading it does not wait."""
        pending = self.pending
        if len(pending) < _LEN.size:
            return False
        size: int = _LEN.unpack_from(pending)[0]
        return len(pending) >= _LEN.size + size

    def frame(self) -> memoryview:
        """The payload of the next frame (a view of what was read).

        Raises:
            EOFError: the pipe closed before a whole frame came.
        """
        buf = self.pending
        while len(buf) < _LEN.size:
            chunk = os.read(self.fd, _READ)
            if not chunk:
                raise EOFError("the other side of the pipe closed")
            buf = buf + chunk if buf else chunk
        end = _LEN.size + _LEN.unpack_from(buf)[0]
        if len(buf) >= end:
            self.pending = buf[end:] if len(buf) > end else b""
            return memoryview(buf)[_LEN.size : end]
        # Longer than what came: read the rest straight into the payload, and no
        # further (what follows may be the next frame's, of any size).
        payload = bytearray(end - _LEN.size)
        have = len(buf) - _LEN.size
        payload[:have] = memoryview(buf)[_LEN.size :]
        self.pending = b""
        _read_pipe(self.fd, memoryview(payload)[have:])
        return memoryview(payload)


def receive(reader: Reader, *, unlink: bool = False) -> tuple[Any, memoryview, list[Any]]:
    """Read one message: its meta, its pickle stream and its buffers, ready for loads.

    With ``unlink``, the shared-memory file the buffers came in is removed once read
    (the parent does that for its child's replies).

    Raises:
        EOFError: the pipe closed (the other side died or closed it).
    """
    frame = reader.frame()
    split = _ENV.size + _ENV.unpack_from(frame)[0]
    meta, layout = pickle.loads(frame[_ENV.size : split])
    data = frame[split:]
    if layout is None:
        return meta, data, []
    readonly, sizes, where = layout
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
            raw = reader.frame()
            buffers.append(bytes(raw) if ro else _writable(raw))
    return meta, data, buffers


def _writable(view: memoryview) -> bytearray:
    """The bytearray ``view`` shows, whole, or a copy of it."""
    whole = view.obj
    return whole if isinstance(whole, bytearray) and len(whole) == view.nbytes else bytearray(view)


def unlink_quietly(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def unlink_segments(chosen: Callable[[str], bool]) -> int:
    """Unlink every shared-memory segment whose name ``chosen`` says yes to; how many."""
    try:
        names = os.listdir(_SHM_DIR)
    except OSError:
        return 0
    gone = 0
    for name in names:
        if chosen(name):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(_SHM_DIR, name))
                gone += 1
    return gone


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


def _write_parts(fd: int, head: bytes, body: bytes | memoryview) -> None:
    """Write ``head`` then ``body``: one ``writev`` unless it stops short (a signal,
    or more than :data:`_CHUNK` at once)."""
    if type(body) is bytes:  # most messages: no views to make
        total = len(head) + len(body)
        written = os.writev(fd, (head, body)) if total <= _CHUNK else 0
        if written == total:
            return
        view = memoryview(body)
    else:
        view = memoryview(body).cast("B")
        written = os.writev(fd, (head, view)) if len(head) + view.nbytes <= _CHUNK else 0
        if written == len(head) + view.nbytes:
            return
    if written < len(head):
        _write_all(fd, head[written:])
        written = len(head)
    _write_all(fd, view[written - len(head) :])


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
