"""How the production web server (gunicorn, config/gunicorn.conf.py) holds connections, so that slow clients
cannot starve it.

Each connection is a gevent greenlet, which costs a few kilobytes while a client dawdles, instead of one of a
few threads. A connection has WEB_HEADER_TIMEOUT seconds to send each request's line and headers, and may stay
silent at most WEB_READ_TIMEOUT seconds while it sends a body or reads a response. Django then runs on a
request only once its whole body is here (on disk past 1 MiB), and at most WEB_THREADS requests at a time per
process: that bounds database connections and memory as the thread pool did, while the waiting for clients
happens outside that bound.
"""

import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gevent.lock import BoundedSemaphore
from gunicorn.workers.base_async import AsyncWorker
from gunicorn.workers.ggevent import GeventWorker

# The multipart envelope around an upload of the largest accepted size.
ENVELOPE_BYTES = 1024 * 1024
IN_MEMORY_BYTES = 1024 * 1024
CHUNK_BYTES = 64 * 1024


class TimeoutGeventWorker(GeventWorker):
    """gunicorn's gevent worker with an inactivity timeout on every client socket (reads and writes);
    gunicorn's own sets none, so a body sent a byte a minute would hold its greenlet for ever."""

    read_timeout: float = 30.0

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        client.settimeout(self.read_timeout)
        # GeventWorker.handle only makes the socket blocking again (no timeout); skip to the request loop.
        AsyncWorker.handle(self, listener, client, addr)


def plain_response(start_response: Callable, status: str, text: str) -> list[bytes]:
    body = text.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    )
    return [body]


class BufferedApplication:
    """A WSGI application that reads a request's whole body before it gives the request to `app`, and lets
    at most `slots` requests into `app` at once (released when the response has been sent)."""

    def __init__(self, app: Callable, *, slots: int, max_body_bytes: int) -> None:
        self.app = app
        self.slots = BoundedSemaphore(slots)
        self.max_body_bytes = max_body_bytes

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        length = environ.get("CONTENT_LENGTH") or ""
        # Django reads no body without a Content-Length (it ignores chunked bodies), so neither do we.
        if length.isdigit() and int(length) > 0:
            if int(length) > self.max_body_bytes:
                return plain_response(
                    start_response,
                    "413 Request Entity Too Large",
                    f"The request ({int(length):,} bytes) is larger than the upload limit of "
                    f"{self.max_body_bytes - ENVELOPE_BYTES:,} bytes; it was refused before being stored. "
                    "Import a file this large with `manage.py import_dataset`, or split it.",
                )
            try:
                environ["wsgi.input"] = self.read_body(environ["wsgi.input"], int(length))
            except TimeoutError:
                return plain_response(
                    start_response, "408 Request Timeout", "The request body stopped arriving."
                )
        self.slots.acquire()
        try:
            result = self.app(environ, start_response)
        except BaseException:
            self.slots.release()
            raise
        if isinstance(result, environ.get("wsgi.file_wrapper") or ()):
            # A file (a static file, a download) is sent by gunicorn with sendfile and needs no slot for it.
            self.slots.release()
            return result
        return ReleasingIterable(result, self.slots.release)

    @staticmethod
    def read_body(stream: Any, length: int) -> tempfile.SpooledTemporaryFile:
        body = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY_BYTES)  # noqa: SIM115 - Django reads it later
        remaining = length
        while remaining > 0:
            chunk = stream.read(min(CHUNK_BYTES, remaining))
            if not chunk:
                break  # the client went away; Django reads the short body and fails as it would have
            body.write(chunk)
            remaining -= len(chunk)
        body.seek(0)
        return body


class ReleasingIterable:
    """The application's response, which gives its slot back once gunicorn has sent it and closed it."""

    def __init__(self, result: Iterable[bytes], release: Callable[[], object]) -> None:
        self.result = result
        self.release = release

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.result)

    def close(self) -> None:
        try:
            close = getattr(self.result, "close", None)
            if close is not None:
                close()
        finally:
            self.release()


def buffered_django(slots: int) -> BufferedApplication:
    """Django's WSGI application behind the buffer: gunicorn's `wsgi_app` (config/gunicorn.conf.py)."""
    from django.conf import settings

    from config.wsgi import application

    return BufferedApplication(
        application, slots=slots, max_body_bytes=settings.CONCORD_MAX_UPLOAD_BYTES + ENVELOPE_BYTES
    )
