"""The chat request on the wire (judges.client.chat, sent with http.client on each thread's own connection),
against a real loopback HTTP server that answers as it is told: headers sent, compressed and error answers,
one kept-alive connection per thread, and a new one where the endpoint closed the old."""

import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from judges import batch, client

COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}


class Server:
    """Answers every POST (and GET) with `status`, `headers` and `body`; records each request's headers and
    the client's port (one port per connection)."""

    def __init__(self):
        self.status, self.headers, self.body = 200, {"Content-Type": "application/json"}, b""
        self.drip = 0.0  # seconds between the body's bytes (0: all at once)
        self.head_drip = 0.0  # seconds between the status line's and headers' bytes
        self.close_after = None  # seconds after an answer when the server closes a kept-alive connection
        self.requests: list[dict[str, str]] = []
        self.ports: list[int] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                self.do_GET()

            def do_GET(self):
                server.requests.append(dict(self.headers.items()))
                server.ports.append(self.client_address[1])
                head = [f"HTTP/1.1 {server.status} Answer"]
                head += [f"{name}: {value}" for name, value in server.headers.items()]
                head += [f"Content-Length: {len(server.body)}", "", ""]
                self.dripped("\r\n".join(head).encode("latin-1"), server.head_drip)
                self.dripped(server.body, server.drip)
                if server.close_after is not None:  # as servers do with idle connections, saying nothing
                    self.wfile.flush()
                    time.sleep(server.close_after)
                    self.close_connection = True

            def dripped(self, data: bytes, pause: float) -> None:
                if not pause:
                    self.wfile.write(data)
                    return
                for byte in data:
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:  # the client gave up
                        return
                    time.sleep(pause)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def server():
    server = Server()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def ask(server: Server, timeout: float = 5) -> client.Reply:
    request = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}
    return client.chat(base_url=server.base_url, api_key="sk-test-key-1234", timeout=timeout, request=request)


def test_the_request_carries_host_length_key_and_asks_for_no_compression(server):
    server.body = json.dumps(COMPLETION).encode()
    assert ask(server).content == "4"
    headers = {name.lower(): value for name, value in server.requests[0].items()}
    assert headers["host"] == server.base_url.split("/")[2]
    assert headers["authorization"] == "Bearer sk-test-key-1234"
    assert headers["accept-encoding"] == "identity"
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) > 0


def test_a_gzip_answer_sent_anyway_is_read(server):
    server.headers["Content-Encoding"] = "gzip"
    server.body = gzip.compress(json.dumps(COMPLETION).encode())
    assert ask(server).content == "4"


def test_an_answer_in_a_coding_not_asked_for_is_a_plain_permanent_error(server):
    server.headers["Content-Encoding"] = "br"
    server.body = b"\x0b\x02\x80{}\x03"
    with pytest.raises(client.PermanentError, match="compressed its answer with 'br'"):
        ask(server)


def test_a_rate_limit_answer_gives_its_retry_after_whatever_the_header_case(server):
    server.status, server.headers["RETRY-AFTER-MS"] = 429, "250"
    server.body = json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}).encode()
    with pytest.raises(client.TransientError, match="rate limited \\(429\\): slow down") as raised:
        ask(server)
    assert raised.value.retry_after == 0.25


def test_each_thread_keeps_its_own_connection_alive(server):
    server.body = json.dumps(COMPLETION).encode()
    ask(server)
    ask(server)
    other = threading.Thread(target=ask, args=(server,))
    other.start()
    other.join()
    first, again, from_other = server.ports
    assert first == again != from_other


def test_a_kept_alive_connection_the_endpoint_closed_meanwhile_is_not_used_again(server):
    server.body = json.dumps(COMPLETION).encode()
    server.close_after = 0.05
    ask(server)
    time.sleep(0.3)  # the server has closed it; a request sent on it would be lost
    assert ask(server).content == "4"
    first, second = server.ports
    assert first != second


def test_a_connection_idle_longer_than_the_keepalive_time_is_not_used_again(server, monkeypatch):
    server.body = json.dumps(COMPLETION).encode()
    ask(server)
    monkeypatch.setattr(client, "KEEPALIVE_SECONDS", 0.0)
    ask(server)
    first, second = server.ports
    assert first != second


@pytest.mark.parametrize("key", ["sk-test-key-1234\n", "sk-test-kéy-1234", "sk-test\x00key-1234"])
def test_a_key_no_header_can_carry_stops_the_call_with_the_reason_and_sends_nothing(server, key):
    request = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}
    with pytest.raises(client.PermanentError, match="API key holds a space, a line break") as raised:
        client.chat(base_url=server.base_url, api_key=key, timeout=5, request=request)
    assert "key-1234" not in raised.value.message
    assert server.requests == []


def test_a_nul_character_in_a_reply_or_error_is_replaced_so_the_text_can_be_stored(server):
    completion = json.loads(json.dumps(COMPLETION))
    completion["choices"][0]["message"]["content"] = "4\u0000 because"
    server.body = json.dumps(completion).encode()
    assert ask(server).content == "4\ufffd because"
    server.status, server.body = 400, json.dumps({"error": {"message": "bad\u0000input"}}).encode()
    with pytest.raises(client.PermanentError) as raised:
        ask(server)
    assert "\x00" not in raised.value.message and "bad\ufffdinput" in raised.value.message


def test_an_answer_over_the_size_limit_is_not_read_into_memory(server, monkeypatch):
    monkeypatch.setattr(client, "MAX_REPLY_BYTES", 1000)
    server.body = json.dumps({**COMPLETION, "padding": "x" * 5000}).encode()
    with pytest.raises(client.PermanentError, match="larger than"):
        ask(server)
    server.headers["Content-Encoding"] = "gzip"  # a small body that inflates past the limit
    server.body = gzip.compress(json.dumps({**COMPLETION, "padding": "x" * 5000}).encode())
    assert len(server.body) < 1000
    with pytest.raises(client.PermanentError, match="larger than"):
        ask(server)


@pytest.mark.parametrize(
    ("claim", "error", "message"),
    [
        ({"Content-Length": "99999999999999"}, client.PermanentError, "larger than 16 MB"),
        ({"Content-Length": "9" * 30}, client.PermanentError, "larger than 16 MB"),
        ({"Transfer-Encoding": "chunked"}, client.TransientError, "timed out after 1 s"),
    ],
)
def test_a_length_the_endpoint_claims_is_never_asked_of_memory_at_once(server, claim, error, message):
    # Sent before the server's own Content-Length, so it is the one read; a chunk of terabytes follows.
    server.headers.update(claim)
    server.body = b"ffffffffffffff\r\n" + json.dumps(COMPLETION).encode()
    with pytest.raises(error, match=message):
        ask(server, timeout=1)


@pytest.mark.parametrize("count", [-5, 10**30, "many", 1e400, 2.5])
def test_an_absurd_token_count_is_clamped_to_what_the_columns_hold(server, count):
    completion = json.loads(json.dumps(COMPLETION))
    completion["usage"] = {"prompt_tokens": count, "completion_tokens": count}
    server.body = json.dumps(completion).encode()
    reply = ask(server)
    assert 0 <= reply.prompt_tokens <= client.MAX_TOKEN_COUNT
    assert reply.completion_tokens == reply.prompt_tokens


@pytest.mark.parametrize(
    ("part", "message"),
    [("drip", "timed out after 1 s: the answer was still arriving"), ("head_drip", "timed out after 1 s$")],
)
def test_an_answer_or_its_headers_dripped_a_byte_at_a_time_time_out_at_the_timeout(server, part, message):
    server.body = json.dumps(COMPLETION).encode()
    setattr(server, part, 0.05)  # each read well within the timeout
    started = time.monotonic()
    with pytest.raises(client.TransientError, match=message):
        ask(server, timeout=1)
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("part", ["head_drip", "drip"])
def test_the_connection_tests_probes_keep_to_the_same_time_and_size_limits(server, monkeypatch, part):
    # The judge's connection test runs in a web request: a slow or endless answer must not hold its thread
    # (a body is read outside the openai client's own error handling: its errors are mapped too).
    model = {"id": "m", "object": "model", "owned_by": "lab"}
    server.body = json.dumps({"object": "list", "data": [model]}).encode()
    listed = client.list_models(base_url=server.base_url, api_key="sk-test-key-1234", timeout=5)
    assert listed == [{"id": "m", "owned_by": "lab"}]
    setattr(server, part, 0.05)
    started = time.monotonic()
    with pytest.raises(client.TransientError, match="timed out after 1 s"):
        client.list_models(base_url=server.base_url, api_key="sk-test-key-1234", timeout=1)
    assert not batch.has_batch_api(base_url=server.base_url, api_key="sk-test-key-1234", timeout=1)
    assert time.monotonic() - started < 4
    setattr(server, part, 0.0)
    monkeypatch.setattr(client, "MAX_REPLY_BYTES", 1000)
    server.body = json.dumps({"object": "list", "data": [{"id": "m" * 5000, "object": "model"}]}).encode()
    with pytest.raises(client.PermanentError, match="larger than"):
        client.list_models(base_url=server.base_url, api_key="sk-test-key-1234", timeout=5)


def test_a_host_whose_name_servers_never_answer_keeps_to_the_timeout(monkeypatch):
    """DNS is the edge we do not own: a lookup that hangs (a hostile judge URL's domain) stands in for the
    resolver's own retries. The chat request, the connection test's probes and the form's check of the URL
    each return in their own time, however many lookups are left hanging."""
    from judges import endpoint_safety

    answered = threading.Event()
    resolve = endpoint_safety.socket.getaddrinfo

    def hanging(host, *args, **kwargs):
        if host.endswith(".hangs.test"):
            answered.wait(30)
            raise OSError("no answer")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(endpoint_safety.socket, "getaddrinfo", hanging)
    monkeypatch.setattr(endpoint_safety, "RESOLVE_SECONDS", 0.3)
    base_url = "http://api.hangs.test/v1"
    request = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}
    try:
        started = time.monotonic()
        with pytest.raises(client.TransientError, match="timed out after 1 s"):
            client.chat(base_url=base_url, api_key="sk-test-key-1234", timeout=1, request=request)
        with pytest.raises(client.TransientError, match="timed out after 1 s"):
            client.list_models(base_url=base_url, api_key="sk-test-key-1234", timeout=1)
        assert time.monotonic() - started < 8  # without the bound: 30 s each
        started = time.monotonic()
        for n in range(8):  # saving a judge: a name that does not resolve in time may resolve on the workers
            url = f"https://api{n}.hangs.test/v1"
            assert endpoint_safety.check_base_url(url) == url
        assert time.monotonic() - started < 8 * 0.3 + 5  # 30 s each without the bound
    finally:
        answered.set()


def test_a_client_nobody_asked_for_in_half_an_hour_is_closed_with_its_connections(server):
    import psutil

    def connected() -> int:
        port = server.httpd.server_address[1]
        tcp = psutil.Process().net_connections(kind="tcp")
        return sum(1 for c in tcp if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED")

    server.body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
    client.list_models(base_url=server.base_url, api_key="sk-test-key-1234", timeout=5)
    key = next(key for key in client._clients if key[0] == server.base_url)
    tested = client._clients[key]
    assert connected() == 1  # kept alive for the next request
    client._used[key] -= client.CLIENT_IDLE_SECONDS + 1
    client.get_client(base_url="http://127.0.0.1:9/v1", api_key="another-key", timeout=5)
    assert key not in client._clients and tested.is_closed()
    assert connected() == 0
    assert client.list_models(base_url=server.base_url, api_key="sk-test-key-1234", timeout=5)  # a new one


def test_a_chat_endpoint_nobody_asked_for_in_half_an_hour_is_forgotten_with_its_key(server):
    server.body = json.dumps(COMPLETION).encode()
    assert ask(server).content == "4"
    key = next(key for key in client._endpoints if key[0] == server.base_url)
    assert key[1] == "sk-test-key-1234"
    client._used[key] -= client.CLIENT_IDLE_SECONDS - 60  # asked for 29 minutes ago: kept
    client.get_client(base_url="http://127.0.0.1:9/v1", api_key="another-key", timeout=5)
    assert key in client._endpoints
    client._used[key] -= 120  # 31 minutes ago: the record, and the key in it, are gone
    client.get_client(base_url="http://127.0.0.1:9/v1", api_key="another-key", timeout=5)
    assert key not in client._endpoints and key not in client._used
    assert ask(server).content == "4"  # asked for again: made anew
    assert key in client._endpoints
