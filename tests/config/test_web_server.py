"""The production server's buffer in front of Django (config/web_server.py): a request reaches Django only
whole, at most `slots` at a time, and a body too large or too slow is answered without Django."""

import io

import pytest

from config.web_server import ENVELOPE_BYTES, BufferedApplication


class Recorder:
    """A WSGI application that records the body it read and what it returns."""

    def __init__(self, result=None, error: Exception | None = None) -> None:
        self.bodies: list[bytes] = []
        self.result = result if result is not None else [b"ok"]
        self.error = error

    def __call__(self, environ, start_response):
        self.bodies.append(environ["wsgi.input"].read())
        if self.error:
            raise self.error
        start_response("200 OK", [])
        return self.result


class Trickle(io.RawIOBase):
    """A request body that arrives a few bytes per read, then maybe goes silent (a timeout)."""

    def __init__(self, data: bytes, *, silent_after: int | None = None) -> None:
        self.data, self.sent, self.silent_after = data, 0, silent_after

    def read(self, size: int = -1) -> bytes:
        if self.silent_after is not None and self.sent >= self.silent_after:
            raise TimeoutError("timed out")
        chunk = self.data[self.sent : self.sent + 3]
        self.sent += len(chunk)
        return chunk


def call(app, body: bytes, *, stream=None, length: int | None = None):
    statuses: list[str] = []
    environ = {
        "CONTENT_LENGTH": str(len(body) if length is None else length),
        "wsgi.input": stream or Trickle(body),
    }
    result = app(environ, lambda status, headers: statuses.append(status))
    return statuses, result


def test_django_reads_the_whole_body_after_it_has_arrived_and_the_slot_comes_back_when_sent():
    django = Recorder()
    app = BufferedApplication(django, slots=1, max_body_bytes=10_000)
    statuses, result = call(app, b"username=rita&password=secret")
    assert django.bodies == [b"username=rita&password=secret"] and statuses == ["200 OK"]
    assert app.slots.counter == 0  # held while gunicorn sends the answer
    assert list(result) == [b"ok"]
    result.close()
    assert app.slots.counter == 1


def test_a_body_that_stops_arriving_is_answered_408_without_django():
    django = Recorder()
    app = BufferedApplication(django, slots=1, max_body_bytes=10_000)
    statuses, result = call(app, b"x" * 100, stream=Trickle(b"x" * 100, silent_after=9))
    assert statuses == ["408 Request Timeout"] and django.bodies == []
    assert app.slots.counter == 1


def test_a_body_over_the_upload_limit_is_refused_unread_saying_the_limit():
    django = Recorder()
    limit = 1000
    app = BufferedApplication(django, slots=1, max_body_bytes=limit + ENVELOPE_BYTES)
    stream = Trickle(b"")
    statuses, result = call(app, b"", stream=stream, length=limit + ENVELOPE_BYTES + 1)
    assert statuses == ["413 Request Entity Too Large"] and django.bodies == [] and stream.sent == 0
    assert "larger than the upload limit of 1,000 bytes" in b"".join(result).decode()


def test_the_slot_comes_back_when_django_fails_or_answers_with_a_file():
    failing = BufferedApplication(Recorder(error=RuntimeError("boom")), slots=1, max_body_bytes=100)
    with pytest.raises(RuntimeError):
        call(failing, b"a=1")
    assert failing.slots.counter == 1

    class FileWrapper(list):
        pass

    app = BufferedApplication(Recorder(result=FileWrapper([b"file"])), slots=1, max_body_bytes=100)
    environ = {"CONTENT_LENGTH": "", "wsgi.input": Trickle(b""), "wsgi.file_wrapper": FileWrapper}
    result = app(environ, lambda status, headers: None)
    assert isinstance(result, FileWrapper) and app.slots.counter == 1  # gunicorn sends it with sendfile
