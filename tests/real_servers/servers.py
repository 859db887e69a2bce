"""Start and stop the real servers on free loopback ports, and a recording proxy in front of one.

The proxy is a plain pass-through: it forwards each request unchanged and returns the server's answer
unchanged (status, body, content type), keeping a copy of both bodies, so a test can compare what Concord
stored with what the server really said.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.real_servers.build import litellm_command, llama_server_dir

LOOPBACK = "127.0.0.1"
HOP_HEADERS = ("host", "connection", "accept-encoding")  # the proxy's own connection, and no gzip to read


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """A server process started here, with its log (read it when a test fails)."""

    name: str
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def start(name: str, command: list[str], *, port: int, ready_path: str, logs: Path, env: dict) -> Server:
    """Start `command` in its own process group and wait until GET `ready_path` answers 200."""
    log = logs / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    server = Server(name, process, port, log)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{port}{ready_path}", timeout=2) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"{name} did not answer {ready_path} within 120 s:\n{server.log_tail()}")


def start_llama_server(model: Path, *, logs: Path, name: str = "llama-server", args: tuple = ()) -> Server:
    """llama-server on the model with its defaults (4 slots sharing one KV cache of the model's context)
    unless `args` says otherwise (`--ctx-size`, `--parallel`)."""
    home = llama_server_dir()
    binary = home / "llama-server"
    if not binary.exists():
        raise RuntimeError(
            f"{binary} is not built: run `python3 tests/real_servers/build.py` (bin/test runs it first)"
        )
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": str(home)}
    # Served as `tiny` (as labs name theirs with --alias): /v1/models lists the model's file path otherwise,
    # and a judge's model name would match no listed model (its owned_by "llamacpp" would go unread).
    command = [
        str(binary),
        "--model",
        str(model),
        "--alias",
        "tiny",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        *args,
    ]
    return start(name, command, port=port, ready_path="/health", logs=logs, env=env)


def start_litellm(upstream: str, *, master_key: str, logs: Path) -> Server:
    """LiteLLM's proxy in front of `upstream` (an OpenAI-compatible base URL) as model `tiny`, with a master
    key (it refuses to start without one), no database and no call to the outside (its model price map is
    the one it ships)."""
    command = litellm_command()
    if not command.exists():
        raise RuntimeError(f"{command} is not installed: run `python3 tests/real_servers/build.py`")
    config = logs / "litellm.yaml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "model_list": [
                    {
                        "model_name": "tiny",
                        "litellm_params": {"model": "openai/tiny", "api_base": upstream, "api_key": "none"},
                    }
                ],
                "litellm_settings": {"telemetry": False},
            }
        )
    )
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(logs),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_MASTER_KEY": master_key,
        "NO_PROXY": "*",
    }
    arguments = [str(command), "--config", str(config), "--host", LOOPBACK, "--port", str(port)]
    return start("litellm", arguments, port=port, ready_path="/health/liveliness", logs=logs, env=env)


@dataclass
class Exchange:
    method: str
    path: str
    request: Any
    status: int
    response: Any
    headers: dict[str, str]


class RecordingProxy:
    """A loopback HTTP proxy in front of `upstream` (host:port) that records every exchange."""

    def __init__(self, upstream_port: int) -> None:
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                upstream = http.client.HTTPConnection(LOOPBACK, upstream_port, timeout=300)
                try:
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    answer = upstream.getresponse()
                    content = answer.read()
                    answer_headers = {k.lower(): v for k, v in answer.getheaders()}
                finally:
                    upstream.close()
                proxy._record(self.command, self.path, body, answer.status, content, answer_headers)
                self.send_response(answer.status)
                for key, value in answer_headers.items():
                    if key not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    def _record(
        self, method: str, path: str, body: bytes, status: int, content: bytes, headers: dict
    ) -> None:
        exchange = Exchange(method, path, _json(body), status, _json(content), headers)
        with self._lock:
            self.exchanges.append(exchange)

    def take(self) -> list[Exchange]:
        """The exchanges recorded since the last take."""
        with self._lock:
            taken, self.exchanges = self.exchanges, []
        return taken

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _json(content: bytes) -> Any:
    try:
        return json.loads(content) if content else None
    except ValueError:
        return content.decode(errors="replace")
