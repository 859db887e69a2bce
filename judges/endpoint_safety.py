"""Which judge endpoints Concord may talk to, checked when a judge is saved and again at every connection.

A judge's base URL comes from a researcher, and the server sends it prompts and an API key. Without these
checks a base URL could reach the cloud metadata service (credentials of the machine itself), carry
`user:password@`, or probe the lab's internal network. Rules:

- only http and https, no user or password in the URL;
- link-local addresses (169.254.0.0/16 with the metadata service, fe80::/10), metadata host names and
  addresses, unspecified, multicast and reserved addresses: always refused;
- loopback and private ranges (127.0.0.0/8, 10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10, ...): only
  when the operator sets CONCORD_JUDGE_ALLOW_PRIVATE=true (vLLM or Ollama in the lab, the demo's model);
- IPv4 written inside IPv6 (::ffff:a.b.c.d, 64:ff9b::a.b.c.d, 6to4, ::a.b.c.d) is judged as the IPv4.

Saving a judge checks the URL and, when the name resolves, every address it resolves to. At call time
`open_socket` resolves the host itself, checks every address and connects to a checked address, so a name
that resolves elsewhere later (DNS rebinding) or a redirect never reaches a refused address. Every
connection to an endpoint is opened there: a chat request's (`CheckedHTTPConnection`, http.client) and the
openai client's (`SafeNetworkBackend`, httpcore).

Inside `bounded`, every such connection ends its work by a deadline, looking up the host included, and
reads a limited number of bytes: an endpoint (or its name servers) that answers a byte now and
then, headers or body, or without end, cannot hold a worker's or the web server's thread or fill its memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import io
import ipaddress
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import httpcore2
from django.conf import settings
from httpcore2._backends.sync import SyncStream  # httpcore's own socket stream, which it does not export

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SCHEMES = {"http", "https"}
METADATA_HOSTS = {
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "metadata.azure.com",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.tencentyun.com",
    "metadata.packet.net",
    "metadata.platformequinix.com",
}
METADATA_ADDRESSES = {
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, ...
    ipaddress.ip_address("169.254.170.2"),  # AWS ECS task credentials
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    ipaddress.ip_address("192.0.0.192"),  # Oracle Cloud
}
NAT64 = ipaddress.ip_network("64:ff9b::/96")
PRIVATE_HINT = "set CONCORD_JUDGE_ALLOW_PRIVATE=true on the server to allow endpoints on the local network"


class UnsafeEndpoint(ValueError):
    """A base URL or address a judge may not use; the message says why, for the page."""


def embedded_ipv4(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4, compatible), else the address."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or (int(address) >> 32 == 0 and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def check_address(address: IPAddress, *, allow_private: bool | None = None) -> None:
    """Raise UnsafeEndpoint for an address a judge may not connect to. The message never names the address
    (it would tell what an internal name resolves to)."""
    if allow_private is None:
        allow_private = settings.CONCORD_JUDGE_ALLOW_PRIVATE
    target = embedded_ipv4(address)
    if target in METADATA_ADDRESSES or address in METADATA_ADDRESSES or target.is_link_local:
        raise UnsafeEndpoint(
            "the endpoint's address is link-local (169.254.x.x, fe80::) or a cloud metadata service, where "
            "a server finds its own credentials"
        )
    if target.is_unspecified or target.is_multicast or (target.is_reserved and not target.is_loopback):
        raise UnsafeEndpoint(
            "the endpoint's address is not a unicast address (0.0.0.0, multicast or reserved)"
        )
    if not target.is_global and not allow_private:
        raise UnsafeEndpoint(f"the endpoint's address is on a loopback or private network ({PRIVATE_HINT})")


def check_host_name(host: str) -> None:
    name = host.rstrip(".").lower()
    if name in METADATA_HOSTS:
        raise UnsafeEndpoint(f"{host} is a cloud metadata service, where a server finds its own credentials")


# A host name is looked up in a thread of its own, so that no caller waits longer than its own time:
# getaddrinfo cannot be interrupted, and a domain whose name servers never answer (a hostile judge URL) held
# the web request or the lane for the resolver's own retries. A lookup left behind ends with those retries;
# no shared pool of lookups, which one hostile judge's lanes could fill for every other run (`_lookup`).
RESOLVE_SECONDS = 5.0  # for a lookup outside an exchange with the endpoint (a judge's URL being saved)


def resolve(host: str, port: int, *, seconds: float | None = None) -> list[IPAddress]:
    """Every address `host` resolves to (an IP literal resolves to itself). Raises TimeoutError when the
    answer takes longer than `seconds` (default RESOLVE_SECONDS), OSError when there is none."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    seconds = RESOLVE_SECONDS if seconds is None else seconds
    try:
        infos = _lookup(host, port).result(timeout=seconds)
    except TimeoutError:
        raise TimeoutError(f"looking up {host} took longer than {seconds:g} s") from None
    # An IPv6 link-local answer may carry a zone ("fe80::1%eth0"); the zone is not part of the address.
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


_lookups: dict[tuple[str, int], Future[list[tuple[Any, ...]]]] = {}  # in flight
_lookups_lock = threading.Lock()


def _lookup(host: str, port: int) -> Future[list[tuple[Any, ...]]]:
    """The lookup of `host` in flight, started in a thread of its own if there is none: whoever asks for the
    same name meanwhile waits for that one answer, so saving the URL of a domain whose name servers never
    answer again and again leaves one lookup behind, not one thread per save. Nothing is kept once it is
    answered: the next connection looks the name up anew."""
    key = (host, port)
    with _lookups_lock:
        lookup = _lookups.get(key)
        if lookup is not None:
            return lookup
        lookup = _lookups[key] = Future()

    def look_up() -> None:
        try:
            answer = partial(lookup.set_result, socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as error:  # handed to whoever waits
            answer = partial(lookup.set_exception, error)
        with _lookups_lock:
            del _lookups[key]
        answer()

    threading.Thread(target=look_up, name="resolve", daemon=True).start()
    return lookup


def check_addresses(host: str, port: int, *, seconds: float | None = None) -> list[IPAddress]:
    """Resolve `host` (within `seconds`) and check every address; returns them. Raises UnsafeEndpoint,
    TimeoutError (no answer in time) or OSError (no answer)."""
    check_host_name(host)
    addresses = resolve(host, port, seconds=seconds)
    if not addresses:
        raise OSError(f"{host} resolves to no address")
    for address in addresses:
        check_address(address)
    return addresses


def check_base_url(url: str, *, resolve_now: bool = True) -> str:
    """The URL (stripped) when a judge may use it; UnsafeEndpoint with the reason otherwise. With
    `resolve_now`, a host name that resolves is checked on each of its addresses too (one that does not
    resolve here may still resolve on the workers; it is checked again at every connection)."""
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise UnsafeEndpoint(f"the base URL is malformed: {error}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise UnsafeEndpoint("the base URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UnsafeEndpoint("the base URL must not contain a user name or password (user:password@)")
    host = parts.hostname
    if not host:
        raise UnsafeEndpoint("the base URL has no host name")
    check_host_name(host)
    if resolve_now:
        # A name that does not resolve here (in RESOLVE_SECONDS) may resolve on the workers: the connection
        # checks it again.
        with contextlib.suppress(OSError, UnicodeError):
            check_addresses(host, port or (443 if parts.scheme.lower() == "https" else 80))
    return url


class AnswerTooLarge(Exception):
    """An endpoint sent more than `bounded` allows (`limit` bytes)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


@dataclasses.dataclass
class _Bounds:
    """The innermost `bounded` block's deadline and byte limit, and the bytes read within it so far."""

    deadline: float
    limit: int
    read: int = 0


_bounds = threading.local()  # `current`: this thread's innermost _Bounds, or None outside `bounded`


@contextlib.contextmanager
def bounded(*, seconds: float, max_bytes: int) -> Iterator[None]:
    """Within this block, what this thread's endpoint connections do (connecting, TLS, sending, each read)
    ends `seconds` from now (httpcore.ConnectTimeout, WriteTimeout or ReadTimeout), and more than
    `max_bytes` read raises AnswerTooLarge: each read's own timeout alone let an endpoint that sends a byte
    now and then keep a request going for as long as it liked. A block inside another keeps to its own
    bounds, then the outer's again."""
    outer = getattr(_bounds, "current", None)
    _bounds.current = _Bounds(time.monotonic() + seconds, max_bytes)
    try:
        yield
    finally:
        _bounds.current = outer


def _time_left(timeout: float | None, expired: type[Exception]) -> float | None:
    """`timeout` shortened to what is left of the thread's `bounded` deadline, if one is set."""
    current = getattr(_bounds, "current", None)
    if current is None:
        return timeout
    left = current.deadline - time.monotonic()
    if left <= 0:
        raise expired("the request's time is up")
    return left if timeout is None else min(timeout, left)


def _count_read(size: int) -> None:
    """Add `size` bytes read to the thread's `bounded` block; AnswerTooLarge past its limit."""
    current = getattr(_bounds, "current", None)
    if current is not None:
        current.read += size
        if current.read > current.limit:
            raise AnswerTooLarge(current.limit)


def open_socket(host: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to an address of `host` that `check_address` allows (the host is resolved here and
    every address it resolves to checked first), within `timeout` and the thread's `bounded` deadline.
    Raises UnsafeEndpoint, TimeoutError (looking up or connecting took too long) or OSError."""
    seconds = _time_left(timeout, TimeoutError)
    try:
        addresses = check_addresses(host, port, seconds=seconds)
    except TimeoutError:
        raise TimeoutError("looking up the endpoint's host took too long") from None
    except UnicodeError:
        raise OSError("could not resolve the endpoint's host") from None
    last_error: OSError | None = None
    for address in addresses:
        try:
            sock = socket.create_connection((str(address), port), _time_left(timeout, TimeoutError))
        except TimeoutError:
            raise
        except OSError as error:
            last_error = error
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a request goes out in one segment
        return sock
    assert last_error is not None
    raise last_error


class BoundedStream(httpcore2.NetworkStream):
    """A connection that keeps to its thread's `bounded` deadline and byte limit, for any request."""

    def __init__(self, stream: httpcore2.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._stream.read(max_bytes, _time_left(timeout, httpcore2.ReadTimeout))
        _count_read(len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _time_left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        timeout = _time_left(timeout, httpcore2.ConnectTimeout)
        return BoundedStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class SafeNetworkBackend(httpcore2.SyncBackend):
    """httpcore's connections (the openai client's: models, files, batches) through `open_socket`, so they
    go only to addresses `check_address` allows (TLS still verifies the host name, which httpcore takes from
    the URL, not from the address connected to), and keep to `bounded`."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        try:
            sock = open_socket(host, port, timeout)
        except UnsafeEndpoint as error:
            # A connect error to every HTTP layer above (each maps it to its own); the reason rides along.
            raise httpcore2.ConnectError(str(error)) from error
        except TimeoutError as error:
            raise httpcore2.ConnectTimeout(str(error)) from error
        except OSError as error:
            raise httpcore2.ConnectError(str(error)) from error
        for option in socket_options or ():
            sock.setsockopt(*option)
        return BoundedStream(SyncStream(sock))


class BoundedSocket:
    """A connection for http.client that keeps to its thread's `bounded` deadline and byte limit, as
    `BoundedStream` does for httpcore: each send and read waits at most for what is left of the deadline
    (else `timeout`), and every byte read counts."""

    def __init__(self, sock: socket.socket, timeout: float | None) -> None:
        self._sock = sock
        self._timeout = timeout
        self._readers = 0  # responses still reading: the socket closes after the last, as a socket's does
        self._closing = False

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(_time_left(self._timeout, TimeoutError))
        self._sock.sendall(data)

    def recv_into(self, buffer: Any) -> int:
        self._sock.settimeout(_time_left(self._timeout, TimeoutError))
        size = self._sock.recv_into(buffer)
        _count_read(size)
        return size

    def makefile(self, mode: str) -> io.BufferedReader:
        """What http.client reads a response from."""
        self._readers += 1
        return io.BufferedReader(_Reader(self))

    def reader_closed(self) -> None:
        self._readers -= 1
        if self._closing and not self._readers:
            self._sock.close()

    def idle(self) -> bool:
        """Nothing arrived since the last answer was read: neither the end of the connection (the endpoint
        closed it while it was kept alive) nor bytes nobody asked for. Otherwise it is not used again."""
        if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
            return False
        poll = select.poll()
        poll.register(self._sock, select.POLLIN)
        return not poll.poll(0)

    def close(self) -> None:
        """Close the connection once no response reads from it (http.client closes a connection the
        endpoint will close as soon as the answer's headers are in, and reads the body after)."""
        self._closing = True
        if not self._readers:
            self._sock.close()


class _Reader(io.RawIOBase):
    def __init__(self, sock: BoundedSocket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._sock.reader_closed()
        super().close()


class CheckedHTTPConnection(http.client.HTTPConnection):
    """http.client's connection (HTTP or HTTPS) through `open_socket`, as a `BoundedSocket`: only to
    addresses `check_address` allows, TLS verified against the host name with `tls`, within the
    thread's `bounded` deadline and byte limit."""

    def __init__(self, host: str, port: int, *, timeout: float, tls: ssl.SSLContext | None) -> None:
        super().__init__(host, port, timeout=timeout)
        self._tls = tls
        self.answered_at = 0.0  # when its last answer was read in full (monotonic)

    def connect(self) -> None:
        sock = open_socket(self.host, self.port, self.timeout)
        try:
            if self._tls is not None:
                sock.settimeout(_time_left(self.timeout, TimeoutError))
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock = BoundedSocket(sock, self.timeout)

    def reusable(self, idle_seconds: float) -> bool:
        """Whether its kept-alive connection (or none yet) may carry the next request: its last answer was
        read at most `idle_seconds` ago and nothing arrived since."""
        sock = self.sock
        if sock is None:
            return True
        fresh = time.monotonic() - self.answered_at <= idle_seconds
        return fresh and isinstance(sock, BoundedSocket) and sock.idle()


def cause_of[E: BaseException](error: BaseException | None, kind: type[E]) -> E | None:
    """The exception of type `kind` somewhere in an exception's chain (the HTTP layers wrap it), if any."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, kind):
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None
