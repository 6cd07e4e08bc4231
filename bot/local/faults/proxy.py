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
    proxy.lose_commit_answer()   # the next COMMIT reaches the server; its answer never returns
    await proxy.commit_answer_lost.wait()
    await proxy.close()

The proxy reads the PostgreSQL frontend protocol on the client's side of each link (message
type and length, nothing else) so that it can tell a COMMIT apart. It declines TLS itself
(answers ``N`` to an SSLRequest or GSSENCRequest, as a server with ``ssl = off`` does), since
it could not see the protocol inside TLS; clients with ``sslmode=prefer`` (asyncpg's default)
then talk in the clear.
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
_STARTUP_CODES_DECLINED = frozenset({80877103, 80877104})  # SSLRequest, GSSENCRequest
_SIMPLE_QUERY = ord("Q")
_READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


_OPAQUE = -1  # bytes of a stream that is not the PostgreSQL protocol, passed on as they came
_MAX_STARTUP = 10_000  # a start-up message is a few hundred bytes


class _FrontendMessages:
    """Splits what a PostgreSQL client sends into messages: first untyped start-up ones
    (length, then body), then typed ones (a type byte, length, body). A stream that does
    not start like the protocol is passed on opaque (the proxy also carries other TCP)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._started = False
        self._opaque = False

    def feed(self, chunk: bytes) -> list[tuple[int | None, bytes]]:
        """The complete messages ``chunk`` ends: (type, body), type None before start-up."""
        if self._opaque:
            return [(_OPAQUE, chunk)]
        self._buffer += chunk
        messages: list[tuple[int | None, bytes]] = []
        while True:
            header = 4 if not self._started else 5
            if len(self._buffer) < header:
                return messages
            kind: int | None = None if not self._started else self._buffer[0]
            (length,) = struct.unpack_from("!i", self._buffer, header - 4)
            end = header - 4 + length
            if length < 4 or (kind is None and length > _MAX_STARTUP):
                self._opaque = True
                messages.append((_OPAQUE, bytes(self._buffer)))
                self._buffer.clear()
                return messages
            if len(self._buffer) < end:
                return messages
            body = bytes(self._buffer[header:end])
            del self._buffer[:end]
            if kind is None and _startup_code(body) not in _STARTUP_CODES_DECLINED:
                self._started = True  # the StartupMessage (or a CancelRequest) itself
            messages.append((kind, body))


def _startup_code(body: bytes) -> int:
    return struct.unpack_from("!i", body)[0] if len(body) >= 4 else -1


def _is_commit(kind: int | None, body: bytes) -> bool:
    """A simple-protocol query that commits (``COMMIT``, ``COMMIT;``, ``END``…)."""
    if kind != _SIMPLE_QUERY:
        return False
    words = body.rstrip(b"\x00").strip().rstrip(b";").strip().upper().split()
    return bool(words) and words[0] in (b"COMMIT", b"END")


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
        self.losing_answer = False  # a COMMIT went up; what the server says is dropped

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
        self._serving: asyncio.Task[None] | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[object]] = set()
        self._mode = FaultMode.FORWARD
        self._delay = 0.0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.accepted = 0  # connections accepted since start, for assertions
        self._lose_commits = 0
        self.commit_answer_lost = asyncio.Event()
        self.commit_answers_lost = 0  # COMMITs that reached the server and were never answered

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

    def listen_now(self) -> None:
        """Listen again on the same port, synchronously (e.g. from a log handler that saw a
        client refused): a connection made from now on waits in the kernel's backlog until
        the loop serves it."""
        if self._server is not None or (self._serving is not None and not self._serving.done()):
            return
        sock = socket.create_server((self.listen_host, self._port))
        self._port = sock.getsockname()[1]
        self._serving = asyncio.get_running_loop().create_task(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_server(self._accept, sock=sock)

    async def close(self) -> None:
        """Stop listening, reset every connection, and wait until each is wound up."""
        if self._serving is not None:
            await self._serving
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

    def lose_commit_answer(self, count: int = 1) -> None:
        """Arm: the next ``count`` COMMITs are forwarded to the server, and once its answer
        (up to ReadyForQuery) is back at the proxy, that answer is dropped and the link
        reset: the transaction is committed, the client never hears so. Sets
        ``commit_answer_lost`` each time."""
        if count < 1:
            raise ValueError("count must be at least 1")
        self._lose_commits = count
        self.commit_answer_lost.clear()

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
            asyncio.create_task(self._pump_frontend(link, reader, writer, up_writer)),
            asyncio.create_task(self._pump_backend(link, up_reader, writer)),
        ]
        try:
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in link.tasks:
                task.cancel()
            for side in (writer, up_writer):
                side.close()
            self._links.discard(link)

    async def _pump_frontend(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        upstream: asyncio.StreamWriter,
    ) -> None:
        """Client to server, message by message as far as the proxy needs to see them."""
        messages = _FrontendMessages()
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(_CHUNK):
                await self._flow()
                forward = bytearray()
                for kind, body in messages.feed(chunk):
                    if kind is None and _startup_code(body) in _STARTUP_CODES_DECLINED:
                        client.write(b"N")  # no TLS: the protocol stays readable
                        continue
                    forward += _frame(kind, body)
                    if self._lose_commits and _is_commit(kind, body):
                        self._lose_commits -= 1
                        link.losing_answer = True
                if forward:
                    upstream.write(forward)
                    await upstream.drain()
                await client.drain()

    async def _pump_backend(
        self, link: _Link, reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        """Server to client; once a COMMIT's answer is to be lost, it is read to its end
        (ReadyForQuery) and dropped, and the link reset."""
        answer = bytearray()
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(_CHUNK):
                await self._flow()
                if link.losing_answer:
                    answer += chunk
                    if answer[-6:-1] == _READY_FOR_QUERY:
                        self._links.discard(link)
                        link.reset()
                        self.commit_answers_lost += 1
                        self.commit_answer_lost.set()
                        return
                    continue
                client.write(chunk)
                await client.drain()

    async def _flow(self) -> None:
        await self._flowing.wait()
        if self._mode is FaultMode.SLOW and self._delay > 0:
            await asyncio.sleep(self._delay)


def _frame(kind: int | None, body: bytes) -> bytes:
    """A message as the client sent it."""
    if kind == _OPAQUE:
        return body
    length = struct.pack("!i", len(body) + 4)
    return length + body if kind is None else bytes([kind]) + length + body
