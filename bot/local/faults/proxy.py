"""A fault-injecting TCP proxy (for PostgreSQL, in tests): listens on 127.0.0.1, forwards to a
target, and can be switched at runtime to refuse new connections, drop existing ones, hang
(accept and hold every byte) or slow (delay each chunk).

Usage::

    proxy = FaultProxy(target_port=5432)
    await proxy.start()          # proxy.port: point the client here
    proxy.hang()                 # clients now wait for ever on whatever they send
    proxy.heal()                 # held bytes flow again
    await proxy.outage()         # PostgreSQL "stopped": refuse new, reset existing
    await proxy.heal_async()     # listening again, on the same port
    await proxy.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import socket
import struct

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class FaultMode(enum.StrEnum):
    FORWARD = "forward"  # forward everything
    HANG = "hang"  # accept, read, forward nothing until healed
    SLOW = "slow"  # forward each chunk after a delay


class _Link:
    """One client connection and its upstream connection, pumped both ways."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter | None) -> None:
        self.client = client
        self.upstream = upstream
        self.tasks: list[asyncio.Task[None]] = []

    def reset(self) -> None:
        """Close both sides with a TCP RST (SO_LINGER 0), as a crashed server would."""
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    """See the module docstring. Not thread-safe: use from the event loop that started it."""

    def __init__(
        self,
        target_host: str = "127.0.0.1",
        target_port: int = 5432,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self._port = listen_port
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[object]] = set()
        self._mode = FaultMode.FORWARD
        self._delay = 0.0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.accepted = 0  # connections accepted since start, for assertions

    @property
    def port(self) -> int:
        if self._port == 0:
            raise RuntimeError("the proxy is not started")
        return self._port

    @property
    def mode(self) -> FaultMode:
        return self._mode

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def open_connections(self) -> int:
        return len(self._links)

    async def start(self) -> None:
        """Listen (again, on the same port after ``refuse``)."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(
            self._accept, self.listen_host, self._port, reuse_address=True
        )
        self._port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening, reset every connection, and wait until each is wound up."""
        self.refuse()
        self.drop()
        self._flowing.set()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    def refuse(self) -> None:
        """Stop listening: new connections get ECONNREFUSED. Existing ones are untouched."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def drop(self) -> int:
        """Reset every open connection; returns how many."""
        links = list(self._links)
        for link in links:
            link.reset()
        self._links.clear()
        return len(links)

    async def outage(self) -> None:
        """A database that went away: refuse new connections and reset the open ones."""
        self.refuse()
        self.drop()
        await asyncio.sleep(0)

    def hang(self) -> None:
        """Accept connections and read, but forward nothing either way until healed."""
        self._mode = FaultMode.HANG
        self._flowing.clear()

    def slow(self, delay_seconds: float) -> None:
        """Forward each chunk only after ``delay_seconds``."""
        if delay_seconds < 0:
            raise ValueError("delay_seconds must not be negative")
        self._mode = FaultMode.SLOW
        self._delay = delay_seconds
        self._flowing.set()

    def heal(self) -> None:
        """Forward normally again (held bytes go through). Listening resumes via heal_async."""
        self._mode = FaultMode.FORWARD
        self._delay = 0.0
        self._flowing.set()

    async def heal_async(self) -> None:
        """``heal`` and listen again if refusing."""
        self.heal()
        await self.start()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
            handler.add_done_callback(self._handlers.discard)
        link = _Link(writer, None)
        self._links.add(link)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError as exc:
            log.info("fault proxy: target %s:%d: %s", self.target_host, self.target_port, exc)
            link.reset()
            self._links.discard(link)
            return
        link.upstream = up_writer
        link.tasks = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        try:
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in link.tasks:
                task.cancel()
            for side in (writer, up_writer):
                side.close()
            self._links.discard(link)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(_CHUNK):
                await self._flowing.wait()
                if self._mode is FaultMode.SLOW and self._delay > 0:
                    await asyncio.sleep(self._delay)
                writer.write(chunk)
                await writer.drain()
