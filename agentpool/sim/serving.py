"""Run an aiohttp application on 127.0.0.1 in a background thread.

The simulation kit's servers (API emulator, power simulator) are started and
stopped from ordinary synchronous Python: tests, the benchmark and the demo.
Each gets its own event loop in a daemon thread, so a test's main thread can
keep using blocking clients (the real ``kubernetes`` client) against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web

T = TypeVar("T")


class BackgroundServer:
    """An aiohttp app served from a private loop in a daemon thread.

    Not a context for heavy work: handlers run on that one loop, so they must
    not block. ``stop()`` returns within about ``shutdown_timeout`` even with
    streaming responses (watches) still open, because the app's
    ``on_shutdown`` hooks are expected to end them.
    """

    def __init__(
        self,
        app_factory: Callable[[], web.Application],
        host: str = "127.0.0.1",
        port: int = 0,
        shutdown_timeout: float = 0.5,
    ) -> None:
        self._app_factory = app_factory
        self._host = host
        self._port = port
        self._shutdown_timeout = shutdown_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("server not started")
        return self._loop

    def start(self) -> BackgroundServer:
        if self._thread is not None:
            raise RuntimeError("server already started")
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to start() below
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="sim-server", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]
        return self

    async def _serve(self) -> None:
        self._runner = web.AppRunner(
            self._app_factory(), shutdown_timeout=self._shutdown_timeout, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, reuse_address=True)
        await site.start()
        server = site._server  # the bound socket tells us the port picked for port=0
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run a coroutine on the server's loop from another thread and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, fn: Callable[[], Awaitable[T] | T]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        if self._runner is not None:
            runner = self._runner
            # The loop is stopped below either way; a slow cleanup must not hang stop().
            with contextlib.suppress(TimeoutError, RuntimeError):
                self.call(runner.cleanup(), timeout=self._shutdown_timeout + 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._thread = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
