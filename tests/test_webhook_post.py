"""One webhook POST against real local servers: https with the URL's name as SNI
and for certificate verification while the connection goes to the checked
address, the response read only to its cap, and what a broken answer becomes."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.platform.settings import Settings
from workers.webhook_post import Poster

Answer = Callable[[bytes], bytes]


def _cert(name: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(hours=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]),
                                        critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A test CA and a server certificate for ``localhost``: (ca, cert, key) files."""
    folder = tmp_path_factory.mktemp("pki")
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mesh test CA")])
    ca = _cert("mesh test CA", ca_key, ca_name, ca_key, ca=True)
    cert = _cert("localhost", key, ca_name, ca_key, ca=False)
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class Server:
    """Answers each request with ``answer(request head)`` (raw bytes); records the
    request heads and the TLS server name each connection asked for."""

    def __init__(self, answer: Answer, tls: ssl.SSLContext | None = None) -> None:
        self.answer, self.tls = answer, tls
        self.heads: list[bytes] = []
        self.server_names: list[str | None] = []
        self.port = 0
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: self.server_names.append(name)

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            self.heads.append(head)
            writer.write(self.answer(head))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()


def poster(ca: Path | None = None, *, max_bytes: int = 1024, allow_private: bool = True
           ) -> Poster:
    p = Poster(Settings(webhook_allow_private=allow_private, webhook_response_max_bytes=max_bytes,
                        webhook_timeout_seconds=5.0))
    if ca is not None:
        p._ssl.load_verify_locations(cafile=str(ca))
    return p


@pytest.fixture
async def tls_server(pki: tuple[Path, Path, Path]) -> AsyncIterator[Server]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(pki[1]), str(pki[2]))
    async with Server(lambda head: b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
                      ctx) as server:
        yield server


async def test_https_names_the_host_for_sni_and_verification(pki, tls_server):
    """``https://localhost`` resolves to 127.0.0.1; the request goes to that checked
    address, but TLS is told (and verifies) the name, and Host carries it."""
    p = poster(pki[0])
    async with p.client() as client:
        outcome = await p.post(client, f"https://localhost:{tls_server.port}/in?a=1",
                               {"webhook-id": "evt_1"}, b'{"seq":1}')
    assert outcome.ok, outcome.error
    assert tls_server.server_names == ["localhost"]
    head = tls_server.heads[0].decode()
    assert head.startswith("POST /in?a=1 HTTP/1.1\r\n")
    assert f"\r\nHost: localhost:{tls_server.port}\r\n" in head
    assert "\r\nwebhook-id: evt_1\r\n" in head


async def test_an_untrusted_certificate_is_a_connect_failure(tls_server):
    p = poster()  # the system's CAs only: the test CA is unknown
    async with p.client() as client:
        outcome = await p.post(client, f"https://localhost:{tls_server.port}/in", {}, b"{}")
    assert outcome.reason == "connect" and "certificate" in (outcome.error or "").lower()


async def test_an_error_answer_is_read_only_to_the_cap():
    body = b"x" * 100_000
    answer = (b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n" % len(body)
              + body)
    async with Server(lambda head: answer) as server:
        p = poster(max_bytes=64)
        async with p.client() as client:
            outcome = await p.post(client, f"http://127.0.0.1:{server.port}/h", {}, b"{}")
    assert outcome.reason == "status"
    assert outcome.error == "HTTP 500: " + "x" * 64


async def test_a_garbage_answer_is_a_connect_failure_not_a_crash():
    async with Server(lambda head: b"NOT HTTP AT ALL\r\n\r\n") as server:
        p = poster()
        async with p.client() as client:
            outcome = await p.post(client, f"http://127.0.0.1:{server.port}/h", {}, b"{}")
    assert outcome.reason == "connect" and outcome.error


async def test_a_redirect_is_a_failure_that_says_so():
    answer = b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n"
    async with Server(lambda head: answer) as server:
        p = poster()
        async with p.client() as client:
            outcome = await p.post(client, f"http://127.0.0.1:{server.port}/h", {}, b"{}")
    assert len(server.heads) == 1
    assert outcome.reason == "status" and "redirects are not followed" in (outcome.error or "")


async def test_a_private_literal_is_refused_before_any_connect():
    async with Server(lambda head: b"HTTP/1.1 204 No Content\r\n\r\n") as server:
        p = poster(allow_private=False)
        async with p.client() as client:
            outcome = await p.post(client, f"http://127.0.0.1:{server.port}/h", {}, b"{}")
    assert outcome.reason == "refused" and "loopback" in (outcome.error or "")
    assert server.heads == []
