"""The simulated model's Batch API: OpenAI's files and batches endpoints, as strict as OpenAI's.

Shapes follow OpenAI's API reference (Files: upload, retrieve, content; Batches: create, retrieve, list,
cancel; the batch object with its statuses, request_counts, output and error files; the request input
and output line objects) and its Batch guide (JSONL of {custom_id, method, url, body}, one model and one
endpoint per file, unique custom_ids, at most 50,000 requests and 200 MB, a 24 h completion window, 50% of
the synchronous price). A malformed upload fails the way OpenAI's does: at upload when the file itself is
refused (purpose, extension, size), else in "validating", which ends the batch "failed" with one entry
per bad line in `errors.data` (code, message, param, line).

Each request line is answered by the same code as a live chat completion (`FakeLLM._completions`): the
server's latency, faults and provider profile apply, and a line that gets an error goes to the error file
with its status code and error body. `FakeConfig.batch_expire_after` makes a batch expire after that many
requests (the rest go to the error file as `batch_expired`, the answered ones stay in the output file);
cancel stops it the same way (`batch_cancelled`), with the partial output kept.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fake_llm import FakeLLM

MAX_REQUESTS = 50_000
MAX_FILE_BYTES = 200 * 1024 * 1024
COMPLETION_WINDOWS = ("24h",)
ENDPOINTS = ("/v1/chat/completions",)
WINDOW_SECONDS = 24 * 3600
MAX_METADATA_PAIRS = 16
VALIDATING_SECONDS = 0.05
OPEN = ("validating", "in_progress", "finalizing", "cancelling")
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
CANCELLED_MESSAGE = "The batch was cancelled before this request executed."

Response = tuple[int, dict[str, str], Any]


def error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> Response:
    return (
        status,
        {},
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}},
    )


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int = field(default_factory=lambda: int(time.time()))

    def as_json(self) -> dict:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass
class Batch:
    id: str
    input_file_id: str
    endpoint: str
    metadata: dict | None
    status: str = "validating"
    created_at: int = field(default_factory=lambda: int(time.time()))
    times: dict[str, int] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    total: int = 0
    completed: int = 0
    failed: int = 0
    output: list[dict] = field(default_factory=list)
    error_lines: list[dict] = field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)

    def as_json(self) -> dict:
        stamp = {name: self.times.get(name) for name in _STAMPS}
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.created_at + WINDOW_SECONDS,
            **stamp,
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "metadata": self.metadata,
        }

    def move(self, status: str) -> None:
        self.status = status
        self.times[f"{status}_at"] = int(time.time())


_STAMPS = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


class FakeBatches:
    """Files and batches of one simulated server, in memory."""

    def __init__(self, server: FakeLLM):
        self.server = server
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, Batch] = {}
        self._tasks: set[asyncio.Task] = set()

    async def route(
        self, method: str, path: str, headers: dict[str, str], body: bytes, query: str
    ) -> Response | None:
        """The response for a files or batches request, or None for any other path."""
        if path == "/v1/files" and method == "POST":
            return self.upload(headers, body)
        if match := re.fullmatch(r"/v1/files/([^/]+)(/content)?", path):
            if method != "GET":
                return None
            stored = self.files.get(match.group(1))
            if stored is None:
                return error(404, f"No such File object: {match.group(1)}", param="id")
            return (
                (200, {"Content-Type": "application/octet-stream"}, stored.content)
                if match.group(2)
                else (
                    200,
                    {},
                    stored.as_json(),
                )
            )
        if path == "/v1/batches":
            if method == "POST":
                return self.create(body)
            if method == "GET":
                return self.listing(query)
            return None
        if match := re.fullmatch(r"/v1/batches/([^/]+)(/cancel)?", path):
            batch = self.batches.get(match.group(1))
            if batch is None:
                return error(404, f"No batch found with id '{match.group(1)}'.", param="batch_id")
            if match.group(2) and method == "POST":
                return self.cancel(batch)
            if not match.group(2) and method == "GET":
                return 200, {}, batch.as_json()
        return None

    # -- files ---------------------------------------------------------------------------------
    def upload(self, headers: dict[str, str], body: bytes) -> Response:
        content_type = headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            return error(400, "The request must be multipart/form-data with 'file' and 'purpose'.")
        if len(body) > MAX_FILE_BYTES + 64 * 1024:
            return error(413, "File is too large. The maximum size for batch files is 200 MB.", param="file")
        fields, upload = _multipart(content_type, body)
        purpose = fields.get("purpose")
        if upload is None:
            return error(
                400, "Missing required parameter: 'file'.", param="file", code="missing_required_parameter"
            )
        filename, content = upload
        if purpose is None:
            return error(400, "Missing required parameter: 'purpose'.", param="purpose")
        if purpose != "batch":
            return error(
                400, f"Invalid value for 'purpose': {purpose!r} is not supported here.", param="purpose"
            )
        if not filename.endswith(".jsonl"):
            return error(400, "Invalid file format for Batch API. Must be .jsonl", param="file")
        if len(content) > MAX_FILE_BYTES:
            return error(400, "File is too large. The maximum size for batch files is 200 MB.", param="file")
        stored = StoredFile(
            id=f"file-{uuid.uuid4().hex[:24]}", filename=filename, purpose=purpose, content=content
        )
        self.files[stored.id] = stored
        return 200, {}, stored.as_json()

    def _stored(self, lines: list[dict]) -> str:
        content = "".join(json.dumps(line) + "\n" for line in lines).encode()
        stored = StoredFile(
            id=f"file-{uuid.uuid4().hex[:24]}",
            filename="batch_output.jsonl",
            purpose="batch_output",
            content=content,
        )
        self.files[stored.id] = stored
        return stored.id

    # -- batches -------------------------------------------------------------------------------
    def create(self, body: bytes) -> Response:
        try:
            request = json.loads(body)
        except ValueError:
            return error(400, "We could not parse the JSON body of your request.")
        if not isinstance(request, dict):
            return error(400, "The body must be a JSON object.")
        for name in ("input_file_id", "endpoint", "completion_window"):
            if name not in request:
                return error(
                    400,
                    f"Missing required parameter: '{name}'.",
                    param=name,
                    code="missing_required_parameter",
                )
        if request["completion_window"] not in COMPLETION_WINDOWS:
            return error(
                400,
                f"Invalid value: '{request['completion_window']}'. Supported values are: '24h'.",
                param="completion_window",
                code="invalid_value",
            )
        if request["endpoint"] not in ENDPOINTS:
            return error(
                400,
                f"Invalid value: '{request['endpoint']}'. Supported: /v1/chat/completions.",
                param="endpoint",
                code="invalid_value",
            )
        metadata = request.get("metadata")
        if metadata is not None and (
            not isinstance(metadata, dict)
            or len(metadata) > MAX_METADATA_PAIRS
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
        ):
            return error(400, "metadata: at most 16 string keys with string values.", param="metadata")
        stored = self.files.get(str(request["input_file_id"]))
        if stored is None:
            return error(404, f"No such File object: {request['input_file_id']}", param="input_file_id")
        if stored.purpose != "batch":
            return error(
                400, f"File {stored.id} was not uploaded with purpose 'batch'.", param="input_file_id"
            )
        batch = Batch(
            id=f"batch_{uuid.uuid4().hex[:24]}",
            input_file_id=stored.id,
            endpoint=request["endpoint"],
            metadata=metadata,
        )
        self.batches[batch.id] = batch
        task = asyncio.get_running_loop().create_task(self._process(batch, stored.content))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return 200, {}, batch.as_json()

    def listing(self, query: str) -> Response:
        options = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        try:
            limit = int(options.get("limit", 20))
        except ValueError:
            return error(400, "limit must be an integer.", param="limit")
        if not 1 <= limit <= 100:
            return error(400, "limit must be between 1 and 100.", param="limit")
        newest = sorted(self.batches.values(), key=lambda b: b.created_at, reverse=True)
        after = options.get("after")
        if after in self.batches:
            newest = newest[[b.id for b in newest].index(after) + 1 :]
        page = newest[:limit]
        return (
            200,
            {},
            {
                "object": "list",
                "data": [b.as_json() for b in page],
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
                "has_more": len(newest) > limit,
            },
        )

    def cancel(self, batch: Batch) -> Response:
        if batch.status not in ("validating", "in_progress", "finalizing", "cancelling"):
            return error(400, f"Cannot cancel a batch with status '{batch.status}'.")
        if batch.status != "cancelling":
            batch.move("cancelling")
            batch.cancel.set()
        return 200, {}, batch.as_json()

    # -- processing ----------------------------------------------------------------------------
    async def _process(self, batch: Batch, content: bytes) -> None:
        await asyncio.sleep(VALIDATING_SECONDS)
        lines, errors = validate(content, batch.endpoint)
        if batch.cancel.is_set():
            return self._finish(batch, [], "cancelled")
        if errors:
            batch.errors = errors
            batch.move("failed")
            return
        batch.total = len(lines)
        batch.move("in_progress")
        config = self.server.config
        gate = asyncio.Semaphore(max(1, config.batch_concurrency))
        answered = 0
        unanswered: list[dict] = []

        async def one(line: dict) -> None:
            nonlocal answered
            async with gate:
                stop = batch.cancel.is_set() or (
                    config.batch_expire_after and answered >= config.batch_expire_after
                )
                if stop:
                    unanswered.append(line)
                    return
                answered += 1
                await self._answer(batch, line)

        await asyncio.gather(*(one(line) for line in lines))
        if batch.cancel.is_set():
            return self._finish(batch, unanswered, "cancelled")
        return self._finish(batch, unanswered, "expired" if unanswered else "completed")

    async def _answer(self, batch: Batch, line: dict) -> None:
        body = json.dumps(line["body"]).encode()
        status, _headers, payload = await self.server._completions({}, body)
        request_id = f"req_{uuid.uuid4().hex[:24]}"
        if isinstance(payload, bytes):  # the malformed-reply fault: the batch records a server error
            status, payload = 500, {"error": {"message": "The server had an error.", "type": "server_error"}}
        entry = {
            "id": f"batch_req_{uuid.uuid4().hex[:24]}",
            "custom_id": line["custom_id"],
            "response": {"status_code": status, "request_id": request_id, "body": payload},
            "error": None,
        }
        if status == 200:
            batch.output.append(entry)
            batch.completed += 1
        else:
            batch.error_lines.append(entry)
            batch.failed += 1

    def _finish(self, batch: Batch, unanswered: list[dict], status: str) -> None:
        batch.move("finalizing")
        code, message = (
            ("batch_cancelled", CANCELLED_MESSAGE)
            if status == "cancelled"
            else ("batch_expired", EXPIRED_MESSAGE)
        )
        for line in unanswered:
            batch.error_lines.append(
                {
                    "id": f"batch_req_{uuid.uuid4().hex[:24]}",
                    "custom_id": line["custom_id"],
                    "response": None,
                    "error": {"code": code, "message": message},
                }
            )
            batch.failed += 1
        if batch.output:
            batch.output_file_id = self._stored(batch.output)
        if batch.error_lines:
            batch.error_file_id = self._stored(batch.error_lines)
        batch.move(status)


def validate(content: bytes, endpoint: str) -> tuple[list[dict], list[dict]]:
    """(the request lines, errors as in a failed batch's errors.data): every line one JSON object with a
    unique string custom_id, method POST, the batch's url and a body with the one model of the file."""
    errors: list[dict] = []
    lines: list[dict] = []
    seen: set[str] = set()
    model: str | None = None

    def bad(number: int, code: str, message: str, param: str | None = None) -> None:
        errors.append({"code": code, "message": message, "param": param, "line": number})

    text = content.decode("utf-8", errors="replace")
    raw_lines = text.splitlines()
    if not any(line.strip() for line in raw_lines):
        return [], [
            {"code": "empty_file", "message": "The batch input file is empty.", "param": None, "line": None}
        ]
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            bad(number, "invalid_json_line", "This line is not parseable as valid JSON.")
            continue
        if not isinstance(line, dict):
            bad(number, "invalid_json_line", "This line is not a JSON object.")
            continue
        missing = [name for name in ("custom_id", "method", "url", "body") if name not in line]
        if missing:
            bad(
                number,
                "missing_required_parameter",
                f"Missing required parameter: '{missing[0]}'.",
                missing[0],
            )
            continue
        custom_id, body = line["custom_id"], line["body"]
        if not isinstance(custom_id, str) or not custom_id:
            bad(number, "invalid_custom_id", "custom_id must be a non-empty string.", "custom_id")
        elif custom_id in seen:
            bad(
                number,
                "duplicate_custom_id",
                "The custom_id for this request is a duplicate of another request's custom_id.",
                "custom_id",
            )
        seen.add(str(custom_id))
        if line["method"] != "POST":
            bad(number, "invalid_method", "The method for this request must be POST.", "method")
        if line["url"] != endpoint:
            bad(
                number,
                "invalid_url",
                f"The url for this request does not match the batch endpoint {endpoint}.",
                "url",
            )
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            bad(number, "invalid_request", "The body must be a JSON object with a model.", "body")
            continue
        model = model or body["model"]
        if body["model"] != model:
            bad(
                number,
                "mismatched_model",
                f"The model '{body['model']}' of this request differs from '{model}' of the first request: "
                "a batch's requests must all use the same model.",
                "body.model",
            )
        lines.append(line)
    if len(lines) > MAX_REQUESTS:
        errors.append(
            {
                "code": "too_many_requests",
                "message": f"The batch has {len(lines)} requests; the maximum is {MAX_REQUESTS}.",
                "param": None,
                "line": None,
            }
        )
    return lines, errors


def _multipart(content_type: str, body: bytes) -> tuple[dict[str, str], tuple[str, bytes] | None]:
    """(the form's text fields, (filename, content) of its `file` field) from a multipart/form-data body."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, str] = {}
    upload = None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        payload = payload if isinstance(payload, bytes) else b""
        if name == "file":
            upload = (part.get_filename() or "", payload)
        elif isinstance(name, str):
            fields[name] = payload.decode()
    return fields, upload
