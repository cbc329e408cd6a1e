"""Wire: framed byte messages over a multiprocessing pipe, a single system call per short one.

The frames are those of ``multiprocessing.connection.Connection.send_bytes`` (a 4-byte
big-endian length, then the payload; ``-1`` then an 8-byte length for payloads over 2 GiB), so
either end may use the ``Connection`` methods or a ``Wire`` on the same pipe. A ``Wire`` writes a
frame with one ``os.write`` and reads a one-byte message (the step commands and their replies)
with one ``os.read``, where ``recv_bytes`` makes two reads and a few Python calls around each:
with one message each way per worker and step of a batched env, and every call several times
slower inside a step loop than alone, that is a measurable share of the step.
Pipes that are not plain file descriptors (Windows) go through the ``Connection`` methods.
"""

from __future__ import annotations

import os
import struct
from multiprocessing import connection
from typing import Any

__all__ = ["Wire", "frame"]

_SIZE = struct.Struct("!i")
_BIG_SIZE = struct.Struct("!Q")
_MAX_SMALL = 0x7FFFFFFF


def frame(payload: bytes) -> bytes:
    """``payload`` with its length header, ready for :meth:`Wire.send_frame`.

    Payloads are never empty: a reader takes the header and one byte in one read, which must not
    reach into the next message.

    Examples:
        >>> frame(b"m")
        b'\\x00\\x00\\x00\\x01m'
    """
    n = len(payload)
    if n == 0:
        raise ValueError(
            "frame: the payload is empty (got 0 bytes; expected at least one). Every message "
            "of the pool's protocol starts with a code byte."
        )
    if n > _MAX_SMALL:
        return _SIZE.pack(-1) + _BIG_SIZE.pack(n) + payload
    return _SIZE.pack(n) + payload


class Wire:
    """One end of a pipe, sending and receiving whole framed messages.

    Args:
        conn: a ``multiprocessing`` connection (kept: its ``poll`` and ``close`` still serve).

    Examples:
        >>> import multiprocessing
        >>> a, b = multiprocessing.Pipe()
        >>> Wire(a).send(b"step"); b.recv_bytes()
        b'step'
        >>> b.send_bytes(b"k"); Wire(a).recv()
        b'k'
    """

    __slots__ = ("conn", "fd")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.fd: int = conn.fileno() if type(conn) is connection.Connection else -1

    def send(self, payload: bytes) -> None:
        """Sends one message (raises ``OSError`` when the other end is gone)."""
        data = frame(payload)  # refuses an empty payload on either path
        if self.fd < 0:
            self.conn.send_bytes(payload)
        else:
            self.send_frame(data)

    def send_frame(self, data: bytes) -> None:
        """Sends a message already framed by :func:`frame`."""
        if self.fd < 0:
            self.conn.send_bytes(_payload(data))
            return
        fd, write = self.fd, os.write
        n = write(fd, data)
        while n < len(data):  # a blocking pipe writes everything unless a signal cut it short
            data = data[n:]
            n = write(fd, data)

    def recv(self) -> bytes:
        """Receives one message (raises ``EOFError`` when the other end closed the pipe)."""
        if self.fd < 0:
            return bytes(self.conn.recv_bytes())
        return self.finish(os.read(self.fd, 5))  # a one-byte message, whole

    def finish(self, data: bytes) -> bytes:
        """The message whose first bytes (at most one frame's) were read as ``data``."""
        if len(data) < 4:
            data += self._read(4 - len(data))
        (size,) = _SIZE.unpack_from(data)
        body = data[4:]
        if size == -1:
            body += self._read(8 - len(body)) if len(body) < 8 else b""
            (size,) = _BIG_SIZE.unpack_from(body)
            body = body[8:]
        if len(body) < size:
            body += self._read(size - len(body))
        return body

    def _read(self, n: int) -> bytes:
        chunks = []
        while n > 0:
            chunk = os.read(self.fd, n)
            if not chunk:
                raise EOFError("the other end of the pipe closed it during a message")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def _payload(data: bytes) -> bytes:
    """The payload of a framed message (for pipes written through their ``Connection``)."""
    (size,) = _SIZE.unpack_from(data)
    return data[12:] if size == -1 else data[4:]
