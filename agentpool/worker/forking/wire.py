"""The fork server's wire format, shared by both ends (and importing nothing heavy).

Once it has preloaded, the server sends one ready message: :data:`READY` (the
length of what follows), then its preload report (UTF-8 lines: what was
warmed, frozen or made immortal, and what was skipped and why). After that,
a request is a header (the length of what follows, and the request's
deadline) carrying two descriptors (the worker's end of its pipe, the write
end of its status pipe), then the pickled worker arguments; the reply is the
new worker's pid, or :data:`TOO_LATE` when the server got to the request only
after its deadline and forked nothing. When a worker exits, the fork server
writes its exit code to its status pipe.
"""

from __future__ import annotations

import socket
import struct

HEADER = struct.Struct("!Id")
"""Length of the pickled request that follows, and its deadline on ``CLOCK_MONOTONIC``
(every process of the host shares it); the descriptors ride on the header."""
REPLY = struct.Struct("!q")
"""The new worker's pid, minus the errno of a failed fork, or :data:`TOO_LATE`."""
TOO_LATE = 0
"""The reply to a request the server came to after its deadline: nothing was forked."""
STATUS = struct.Struct("!i")
"""A child's exit code as its status pipe carries it (negative: killed by that signal)."""
READY = struct.Struct("!I")
"""Length of the preload report that follows, in the server's first message."""
MAX_REQUEST = 1 << 20


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes; ``EOFError`` if the peer closed first."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("peer closed its socket")
        data += chunk
    return bytes(data)
