"""Readers stream: the memory they need does not grow with the size of the file."""

import json
import tracemalloc

import pytest

from datasets.readers import EntryStream
from datasets.text_files import detect_encoding

from .helpers import dialog


def peak_while_reading(path, fmt: str) -> tuple[int, int]:
    encoding = detect_encoding(path)
    tracemalloc.start()
    try:
        count = sum(1 for _ in EntryStream(path, encoding, fmt))
        return count, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_reading_memory_does_not_grow_with_the_file(tmp_path, monkeypatch, fmt):
    monkeypatch.setattr("datasets.readers.CHUNK_CHARS", 64 * 1024)
    peaks = []
    for count in (2_000, 16_000):
        path = tmp_path / f"{count}.{fmt}"
        with open(path, "w") as out:
            if fmt == "json":
                out.write("[\n" + ",\n".join(json.dumps(dialog(n)) for n in range(count)) + "\n]\n")
            else:
                out.writelines(json.dumps(dialog(n)) + "\n" for n in range(count))
        read, peak = peak_while_reading(path, fmt)
        assert read == count
        peaks.append(peak)
    small, large = peaks
    # 8x the items (about 2.3 MB instead of 0.3 MB) may not need much more memory than the small file.
    assert large < small * 1.5 + 256 * 1024, peaks
