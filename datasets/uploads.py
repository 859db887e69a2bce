"""Receiving an upload: refuse an over-size file at its first byte over the limit, store the rest on disk."""

import uuid
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest

# Multipart framing and the small form fields ride along with the file.
FRAMING_ALLOWANCE = 64 * 1024


def upload_limit() -> int:
    return settings.CONCORD_MAX_UPLOAD_BYTES


def inline_limit() -> int:
    """Uploads up to this size are imported during the request; larger ones by a Celery worker."""
    return getattr(settings, "CONCORD_INLINE_IMPORT_BYTES", 5 * 1024 * 1024)


def upload_dir() -> Path:
    directory = Path(getattr(settings, "CONCORD_UPLOAD_DIR", Path(settings.VAR_DIR) / "uploads"))
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class SizeLimitHandler(FileUploadHandler):
    """Stops the upload before a file over the limit is stored anywhere.

    A Content-Length over the limit refuses the file before its first byte reaches a handler;
    without one (chunked) the file is dropped as soon as the bytes counted pass the limit. The rest
    of the request body is drained unstored, so the browser still receives the page that explains.
    """

    def __init__(self, request: HttpRequest | None = None, *, limit: int):
        super().__init__(request)
        self.limit = limit
        self.declared_too_large = False
        self.refused = False
        self.received = 0

    def handle_raw_input(
        self,
        input_data: IO[bytes],
        META: dict[str, Any],
        content_length: int,
        boundary: str,
        encoding: str | None = None,
    ) -> None:
        self.declared_too_large = bool(content_length) and content_length > self.limit + FRAMING_ALLOWANCE
        return None

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        super().new_file(*args, **kwargs)
        self.received = 0
        if self.declared_too_large:
            self.refused = True
            raise StopUpload(connection_reset=False)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.refused = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


def store_upload(uploaded: UploadedFile) -> Path:
    """Copy an UploadedFile to the upload directory in chunks; the path it now has."""
    suffix = Path(uploaded.name or "").suffix.lower()[:10]
    target = upload_dir() / f"{uuid.uuid4().hex}{suffix}"
    with open(target, "wb") as out:
        for chunk in uploaded.chunks():
            out.write(chunk)
    return target
