"""The pipe's frame reader at the end of a worker's life."""

from __future__ import annotations

import socket

from agentpool.worker.protocol import Stopped, frame, receive


def test_last_words_survive_a_peer_that_left_our_message_unread() -> None:
    # A worker crashing at start never reads the fence sent with its start; Linux then
    # resets the supervisor's end, and the recv after its last words raised
    # ConnectionResetError: the Stopped message (why it crashed) was lost with it.
    supervisor, worker = socket.socketpair()
    try:
        supervisor.sendall(b"a fence the worker never reads")
        worker.sendall(frame(Stopped("n1", (), "crashed: KeyError: 'spec'")))
        worker.close()
        messages, closed = receive(supervisor.fileno(), bytearray())
        assert closed
        assert messages == [Stopped("n1", (), "crashed: KeyError: 'spec'")]
    finally:
        supervisor.close()
