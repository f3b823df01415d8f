"""A TCP proxy between the agent and kube-apiserver that plays the network's faults.

It stands in for the network path, which cannot be cut or slowed here
without touching the machine's firewall: the agent's kubeconfig names the
proxy, the proxy forwards bytes (TLS included, untouched) to the real server,
and the test switches it between:

- :meth:`FaultProxy.flow`: forward, each chunk from the server held ``delay_s``
  first (a slow server: every answer and every watch event that much late, order
  kept; the TLS handshake too);
- :meth:`FaultProxy.blackhole`: packets dropped. Nothing goes through either way,
  and no FIN or RST either; new connections are still accepted (the listening
  socket's kernel completes the handshake) and get the same silence. A
  connection that lived through a blackhole stays silent for good, also once
  packets flow again: by then its server has given it up, as a real one does
  after its timeouts, so only a client that gives up on it too and connects
  anew gets through;
- :meth:`FaultProxy.refuse`: nothing listens (connection refused), and every
  open connection is reset, as when the server's process is gone.

An asyncio loop in a daemon thread; the switches are thread safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

CHUNK = 65536


class Mode(enum.Enum):
    FLOW = "flow"
    """Forward (after the delay)."""
    BLACKHOLE = "blackhole"
    """Hold every byte; close nothing."""
    REFUSE = "refuse"
    """Not listening; open connections reset."""


@dataclass(eq=False)
class _Connection:
    gate: asyncio.Event
    """Open while its bytes may flow; closed for good once a blackhole caught it."""
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class FaultProxy:
    """``with FaultProxy(port_of_server) as proxy:``; the agent connects to ``proxy.url``."""

    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.upstream_port = upstream_port
        self.port = 0
        self.mode = Mode.FLOW
        self.delay_s = 0.0
        self.accepted = 0
        """Connections accepted so far."""
        self.peak = 0
        """The most connections open at once so far."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fault-proxy", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def start(self) -> FaultProxy:
        self._thread.start()
        self._run(self._listen())
        return self

    def stop(self) -> None:
        self._run(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def flow(self, delay_s: float = 0.0) -> None:
        """Forward new connections and those no blackhole caught, each chunk from the server
        ``delay_s`` late; listen again if refusing."""
        self._run(self._flow(delay_s))

    def blackhole(self) -> None:
        self._run(self._blackhole())

    def refuse(self) -> None:
        self._run(self._refuse())

    # -- in the loop's thread ---------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _flow(self, delay_s: float) -> None:
        self.delay_s = delay_s
        if self._server is None:
            await self._listen()
        self.mode = Mode.FLOW

    async def _blackhole(self) -> None:
        self.mode = Mode.BLACKHOLE
        for connection in self._connections:
            connection.gate.clear()

    async def _refuse(self) -> None:
        self.mode = Mode.REFUSE
        if self._server is not None:
            self._server.close()  # not wait_closed(): it waits for the connections' handlers
            self._server = None
        for connection in list(self._connections):
            for writer in connection.writers:
                writer.transport.abort()  # RST, as a dead peer's kernel answers
            if connection.task is not None:
                connection.task.cancel()  # pumps held at a closed gate would wait for ever
        self._connections.clear()

    async def _shutdown(self) -> None:
        await self._refuse()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode is Mode.REFUSE:
            writer.transport.abort()
            return
        connection = _Connection(asyncio.Event(), [writer], asyncio.current_task())
        if self.mode is Mode.FLOW:
            connection.gate.set()
        self._connections.add(connection)
        self.peak = max(self.peak, len(self._connections))
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
            connection.writers.append(up_writer)
            pumps = [
                asyncio.ensure_future(self._pump(reader, up_writer, connection.gate, False)),
                asyncio.ensure_future(self._pump(up_reader, writer, connection.gate, True)),
            ]
            try:
                await asyncio.gather(*pumps)
            finally:
                for pump in pumps:
                    pump.cancel()
        except (OSError, asyncio.CancelledError):
            pass  # the server is down, or the proxy refused or stopped: reset below
        finally:
            self._connections.discard(connection)
            for w in connection.writers:
                w.transport.abort()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: asyncio.Event,
        delayed: bool,
    ) -> None:
        """Copy one direction: each chunk held until its gate is open and, if ``delayed``,
        until its delay is over."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        def when() -> float:
            return self._loop.time() + (self.delay_s if delayed else 0.0)

        async def read() -> None:
            with contextlib.suppress(OSError):
                while data := await reader.read(CHUNK):
                    queue.put_nowait((when(), data))
            queue.put_nowait((when(), b""))

        reading = asyncio.ensure_future(read())
        try:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - self._loop.time()))
                await gate.wait()
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        finally:
            reading.cancel()
