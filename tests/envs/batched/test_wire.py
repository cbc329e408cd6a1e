"""Wire (framed pipe messages) and Waiter (bounded waits on pipes and sentinels)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from tdrl.envs.batched._waiter import Waiter
from tdrl.envs.batched._wire import Wire, frame


@pytest.fixture
def pipe():
    a, b = multiprocessing.Pipe()
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("size", [1, 5, 4095, 4096, 70_000, 1_000_000])
def test_wire_and_connection_read_each_others_frames(pipe, size):
    a, b = pipe
    payload = os.urandom(size)
    # a large message fills the pipe: the reader must run beside the writer
    ctx = multiprocessing.get_context("fork")
    echo = ctx.Process(target=_echo, args=(b,))
    echo.start()
    try:
        Wire(a).send(payload)
        assert Wire(a).recv() == payload
        Wire(a).send_frame(frame(payload[::-1]))
        assert Wire(a).recv() == payload[::-1]
    finally:
        Wire(a).send(b"quit")
        echo.join(10)
    assert echo.exitcode == 0


def _echo(conn) -> None:
    while (msg := conn.recv_bytes()) != b"quit":
        conn.send_bytes(msg)


def test_one_byte_messages_stay_whole_and_in_order(pipe):
    a, b = pipe
    for code in (b"k", b"1", b"0"):
        b.send_bytes(code)
    b.send_bytes(b"v" + bytes(100))
    wire = Wire(a)
    assert [wire.recv() for _ in range(4)] == [b"k", b"1", b"0", b"v" + bytes(100)]


def test_a_closed_pipe_raises_eof_before_or_within_a_message(pipe):
    a, b = pipe
    os.write(b.fileno(), frame(b"abcdef")[:6])  # the header and two bytes, then the end
    b.close()
    with pytest.raises(EOFError):
        Wire(a).recv()
    with pytest.raises(EOFError):
        Wire(a).recv()


def test_sending_to_a_closed_pipe_raises_oserror(pipe):
    a, b = pipe
    b.close()
    with pytest.raises(OSError):
        Wire(a).send(b"s")


def test_an_empty_message_is_refused(pipe):
    # a reader takes the header and one byte at once: that byte must belong to the message
    a, b = pipe
    with pytest.raises(ValueError, match="payload is empty"):
        Wire(a).send(b"")
    b.send_bytes(b"k")
    b.send_bytes(b"1")
    wire = Wire(a)
    assert [wire.recv(), wire.recv()] == [b"k", b"1"]  # queued messages are read apart


def test_frame_matches_the_connection_format():
    a, b = multiprocessing.Pipe()
    a.send_bytes(b"hello")
    assert os.read(b.fileno(), 100) == frame(b"hello")
    a.close()
    b.close()


def test_waiter_for_one_worker_ignores_the_others_but_not_a_death():
    (a0, b0), (a1, b1), (s_read, s_write) = (multiprocessing.Pipe() for _ in range(3))
    waiter = Waiter([a0.fileno(), a1.fileno()], [s_read.fileno()])
    b1.send_bytes(b"k")  # worker 1 answered, worker 0 not yet
    assert waiter.wait_for(0, 0.05) == []
    assert waiter.wait_for(1, 0.05) == [a1.fileno()]
    assert waiter.wait(0.05) == [a1.fileno()]
    s_write.close()  # a "sentinel" becomes readable: every wait wakes up
    assert waiter.wait_for(0, 1.0) == [s_read.fileno()]
    waiter.forget(s_read.fileno())
    assert waiter.wait_for(0, 0.05) == []
    b0.send_bytes(b"k")
    assert waiter.wait_for(0, 1.0) == [a0.fileno()]
    for conn in (a0, b0, a1, b1, s_read):
        conn.close()
