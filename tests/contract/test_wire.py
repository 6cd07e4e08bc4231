"""bot.providers.wire over real sockets on 127.0.0.1: what it sends, what it reads, and the
httpx exception each failure becomes, which decides whether ProviderTransport may try
again. A raw asyncio server plays the provider, so every byte and every drop is exact."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from bot.providers.errors import ProviderConnectionError, ProviderTimeout
from bot.providers.http import ClientSettings, Operation, ProviderTransport, RetryMode
from bot.providers.wire import AiohttpTransport
from tests.support.reliability import closed_port

SECRET = "wire-secret-key-4711"
OK_BODY = b'{"ok": true}'


def answer(body: bytes = OK_BODY, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join([*head, *extra]) + "\r\n\r\n").encode() + body


@dataclass
class Provider:
    """Reads each request whole and does what ``reply`` says: bytes to write, or None to
    close the connection without a word."""

    reply: Callable[[int], bytes | None]
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        # The client closing its end (after a timeout, say) ends the connection, as it would
        # a provider's.
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                self.requests.append(head + await reader.readexactly(length))
                out = self.reply(len(self.requests))
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
        writer.close()


@asynccontextmanager
async def provider(reply: Callable[[int], bytes | None]) -> AsyncIterator[Provider]:
    fake = Provider(reply)
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    fake.port = server.sockets[0].getsockname()[1]
    try:
        yield fake
    finally:
        server.close()
        await server.wait_closed()


def transport_to(port: int, **settings: float) -> ProviderTransport:
    return ProviderTransport(
        provider="e2e",
        base_url=f"http://127.0.0.1:{port}/myaccount/api/v1/gpu",
        headers={"Authorization": "Bearer token"},
        auth_params={"apikey": SECRET},
        settings=ClientSettings(attempts=3, wait_initial=0.0, wait_max=0.0, **settings),
        secrets=(SECRET,),
    )


async def scale(transport: ProviderTransport) -> httpx.Response:
    return await transport.request(
        "PUT",
        "distributed_jobs_v2/cluster/101/",
        operation=Operation.CHANGE_CLUSTER,
        mode=RetryMode.UNSAFE_WRITE,
        json={"action": "scale_cluster", "additional_nodes": 1},
    )


async def read(transport: ProviderTransport) -> httpx.Response:
    return await transport.request(
        "GET",
        "distributed_jobs_v2/cluster/101/",
        operation=Operation.GET_CLUSTER,
        mode=RetryMode.READ,
    )


def no_secret_in(error: BaseException) -> None:
    texts = [str(error), repr(error), str(error.__cause__), str(error.__context__)]
    assert not any(SECRET in text or "127.0.0.1" in text for text in texts), texts


# -- an action is never sent twice ---------------------------------------------------------


async def test_an_action_whose_connection_drops_after_it_arrived_is_sent_once() -> None:
    """aiohttp by itself sends a PUT again when the connection drops before the answer; an
    E2E action is a PUT that adds nodes each time it runs."""
    async with provider(lambda _: None) as fake:
        transport = transport_to(fake.port)
        with pytest.raises(ProviderConnectionError) as dropped:
            await scale(transport)
        await transport.aclose()
    assert len(fake.requests) == 1
    assert dropped.value.may_have_applied
    assert "connection failed during the request" in dropped.value.provider_message
    no_secret_in(dropped.value)


async def test_an_action_on_a_kept_connection_that_drops_is_sent_once() -> None:
    """The first call leaves the connection open; the action on it meets the drop."""
    async with provider(lambda n: answer() if n == 1 else None) as fake:
        transport = transport_to(fake.port)
        assert (await read(transport)).json() == {"ok": True}
        with pytest.raises(ProviderConnectionError) as dropped:
            await scale(transport)
        await transport.aclose()
    assert [r.split(b" ")[0] for r in fake.requests] == [b"GET", b"PUT"]
    assert fake.connections == 1 and dropped.value.may_have_applied


async def test_a_read_whose_connection_drops_is_tried_again() -> None:
    async with provider(lambda n: None if n == 1 else answer()) as fake:
        transport = transport_to(fake.port)
        assert (await read(transport)).json() == {"ok": True}
        await transport.aclose()
    assert len(fake.requests) == 2


# -- each failure as httpx names it --------------------------------------------------------


async def test_a_refused_connection_is_a_connect_error_and_nothing_was_sent() -> None:
    wire = AiohttpTransport(connect_timeout=1.0, read_timeout=1.0)
    request = httpx.Request("PUT", f"http://127.0.0.1:{closed_port()}/x?apikey={SECRET}")
    with pytest.raises(httpx.ConnectError) as refused:
        await wire.handle_async_request(request)
    await wire.aclose()
    assert str(refused.value) == "ClientConnectorError"
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


async def test_a_silent_provider_is_a_read_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    wire = AiohttpTransport(connect_timeout=1.0, read_timeout=0.2)
    try:
        with pytest.raises(httpx.ReadTimeout):
            await wire.handle_async_request(httpx.Request("GET", f"http://127.0.0.1:{port}/x"))
    finally:
        await wire.aclose()
        server.close()


async def test_a_reply_that_is_not_http_is_a_protocol_error() -> None:
    async with provider(lambda _: b"SMTP ready\r\n\r\n") as fake:
        wire = AiohttpTransport(connect_timeout=1.0, read_timeout=1.0)
        with pytest.raises(httpx.RemoteProtocolError):
            await wire.handle_async_request(httpx.Request("GET", f"http://127.0.0.1:{fake.port}/"))
        await wire.aclose()


async def test_an_action_with_no_answer_times_out_sent_once() -> None:
    def hold(_: int) -> bytes:
        return b""  # read, then never a byte back

    async with provider(hold) as fake:
        # Long enough for the request to get out on a busy machine (at 0.3 s and a load of
        # 10 the bound could pass before it was sent); the answer never comes anyway.
        transport = transport_to(fake.port, total_timeout=1.5)
        with pytest.raises(ProviderTimeout) as silent:
            await scale(transport)
        await transport.aclose()
    assert len(fake.requests) == 1 and silent.value.may_have_applied


# -- what goes out and what comes back ----------------------------------------------------


async def test_the_request_goes_out_exactly_as_httpx_quoted_it() -> None:
    async with provider(lambda _: answer()) as fake:
        transport = transport_to(fake.port)
        await transport.request(
            "PUT",
            "compute/clusters/a%2Fb/",
            operation=Operation.CHANGE_CLUSTER,
            mode=RetryMode.IDEMPOTENT_WRITE,
            params={"project id": "p&1"},
            json={"num_gpus": 16},
        )
        await transport.aclose()
    [sent] = fake.requests
    head, _, body = sent.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    path = "/myaccount/api/v1/gpu/compute/clusters/a%2Fb/"
    assert lines[0] == f"PUT {path}?apikey={SECRET}&project+id=p%261 HTTP/1.1"
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:])}
    assert headers["authorization"] == "Bearer token"
    assert headers["content-type"] == "application/json"
    assert headers["host"] == f"127.0.0.1:{fake.port}"
    assert headers["user-agent"].startswith("python-httpx/")
    assert "cookie" not in headers and "accept-encoding" not in headers
    assert json.loads(body) == {"num_gpus": 16}


async def test_a_post_without_a_body_names_no_content_type() -> None:
    """A remediation's cancel has no body: it goes out with none and no Content-Type, not
    aiohttp's own "application/octet-stream" for an empty one."""
    async with provider(lambda _: answer()) as fake:
        transport = transport_to(fake.port)
        await transport.request(
            "POST",
            "remediations/r1/cancel",
            operation=Operation.DECIDE_REMEDIATION,
            mode=RetryMode.UNSAFE_WRITE,
        )
        await transport.aclose()
    [sent] = fake.requests
    head, _, body = sent.partition(b"\r\n\r\n")
    headers = {
        k.lower() for k, _, _ in (line.partition(": ") for line in head.decode().split("\r\n")[1:])
    }
    assert "content-type" not in headers and body == b""


async def test_a_compressed_reply_is_decoded_once() -> None:
    packed = gzip.compress(OK_BODY)
    async with provider(lambda _: answer(packed, "Content-Encoding: gzip")) as fake:
        transport = transport_to(fake.port)
        response = await read(transport)
        await transport.aclose()
    assert response.json() == {"ok": True}


async def test_calls_share_one_connection_and_a_closed_transport_opens_anew() -> None:
    async with provider(lambda _: answer()) as fake:
        transport = transport_to(fake.port)
        for _ in range(3):
            assert (await read(transport)).status_code == 200
        assert fake.connections == 1
        await transport.aclose()
        assert (await read(transport)).status_code == 200
        await transport.aclose()
    assert fake.connections == 2 and len(fake.requests) == 4


async def test_closing_lets_a_call_in_flight_finish() -> None:
    """A restart closes the transports while a click's decision may still be on its way:
    the decision completes rather than being cut off mid-request."""
    arrived = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        arrived.set()
        await asyncio.sleep(0.3)
        writer.write(answer())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    wire = AiohttpTransport(connect_timeout=1.0, read_timeout=5.0)
    try:
        call = asyncio.ensure_future(
            wire.handle_async_request(httpx.Request("POST", f"http://127.0.0.1:{port}/approve"))
        )
        await arrived.wait()
        await wire.aclose()
        assert call.done() and (await call).status_code == 200
    finally:
        server.close()


async def test_closing_waits_for_a_silent_call_no_longer_than_its_read_timeout() -> None:
    async with provider(lambda _: b"") as fake:
        wire = AiohttpTransport(connect_timeout=1.0, read_timeout=0.3)
        call = asyncio.ensure_future(
            wire.handle_async_request(httpx.Request("GET", f"http://127.0.0.1:{fake.port}/"))
        )
        await poll(lambda: len(fake.requests) == 1)
        await wire.aclose()
        with pytest.raises(httpx.ReadTimeout):
            await call


async def poll(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


def self_signed(where: Path) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1 (``where`` gets
    ``cert.pem``)."""
    key, cert = where / "key.pem", where / "cert.pem"
    subprocess.run(  # noqa: S603 (fixed arguments)
        ["/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    return tls


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "SSL_CERT_FILE"])
async def test_tls_is_verified_as_httpx_verified_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    """certifi's roots: a self-signed certificate is a connect error, nothing sent (a change
    can be refused as not applied); one named by SSL_CERT_FILE (a TLS-inspecting proxy's,
    say) is trusted."""
    tls = self_signed(tmp_path)
    if trusted:
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    else:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    plain = Provider(lambda _: answer())
    server = await asyncio.start_server(plain.serve, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    wire = AiohttpTransport(connect_timeout=2.0, read_timeout=2.0)
    request = httpx.Request("PUT", f"https://127.0.0.1:{port}/x")
    try:
        if trusted:
            assert (await wire.handle_async_request(request)).status_code == 200
            assert len(plain.requests) == 1
        else:
            with pytest.raises(httpx.ConnectError) as untrusted:
                await wire.handle_async_request(request)
            assert str(untrusted.value) == "ClientConnectorCertificateError"
            assert plain.requests == []
    finally:
        await wire.aclose()
        server.close()


async def test_a_call_that_gets_no_connection_in_time_was_never_sent() -> None:
    """Every connection is busy (here the only one, with a provider that does not answer):
    the next call is a connect timeout, which the retry rules know was never sent, not a
    "no answer" that might have been applied."""
    async with provider(lambda _: b"") as fake:
        wire = AiohttpTransport(connect_timeout=0.2, read_timeout=5.0, max_connections=1)
        url = f"http://127.0.0.1:{fake.port}/"
        first = asyncio.ensure_future(wire.handle_async_request(httpx.Request("PUT", url)))
        await poll(lambda: len(fake.requests) == 1)
        async with asyncio.timeout(3):  # without a pool bound: waits for the first, forever
            with pytest.raises(httpx.ConnectTimeout):
                await wire.handle_async_request(httpx.Request("PUT", url))
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await wire.aclose()
    assert len(fake.requests) == 1


async def test_a_proxy_named_in_the_environment_is_used_as_httpx_used_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with provider(lambda _: answer()) as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        wire = AiohttpTransport(connect_timeout=2.0, read_timeout=2.0)
        request = httpx.Request("GET", "http://provider.invalid/v1/compute/clusters")
        assert (await wire.handle_async_request(request)).status_code == 200
        await wire.aclose()
    [sent] = proxy.requests
    assert sent.startswith(b"GET http://provider.invalid/v1/compute/clusters HTTP/1.1\r\n")


async def test_a_host_named_in_no_proxy_is_reached_directly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with provider(lambda _: answer()) as proxy, provider(lambda _: answer()) as direct:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        wire = AiohttpTransport(connect_timeout=2.0, read_timeout=2.0)
        request = httpx.Request("GET", f"http://127.0.0.1:{direct.port}/v1/compute/clusters")
        assert (await wire.handle_async_request(request)).status_code == 200
        await wire.aclose()
    assert proxy.requests == [] and len(direct.requests) == 1
