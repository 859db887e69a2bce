"""Every upload is opened by one set of encoding rules (datasets.readers): datasets, ratings and rubrics
refuse the same bytes with the same sentence, and read a UTF-8 BOM alike."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils.datastructures import MultiValueDict

from datasets.services import import_dataset
from evaluations.ratings_import import RatingsImportError, import_ratings
from rubrics.forms import RubricImportForm
from tests import factories

from .helpers import dialog

LATIN_1 = "Jürgen".encode("latin-1")
NOT_UTF8 = "the file is not UTF-8: it looks like Latin-1 (ISO-8859-1) (byte 0xFC on line 2)"
UTF16 = "the file is encoded as UTF-16 (little-endian, with BOM), not UTF-8. Save it as UTF-8"
BINARY = "this is a binary file (a PDF document), not text"


def dataset_refusal(project, path) -> str:
    result = import_dataset(project=project, name="D", path=path)
    assert not result.ok
    return str(result.errors[0])


def ratings_refusal(project, path) -> str:
    dataset = factories.make_dataset(project, items=1, name="Chats")
    evaluation = factories.make_evaluation(project, dataset, [factories.make_rubric(project=project)])
    with pytest.raises(RatingsImportError) as caught:
        import_ratings(evaluation=evaluation, path=path)
    return caught.value.messages[0]


def rubric_form(name: str, content: bytes) -> RubricImportForm:
    return RubricImportForm(data={}, files=MultiValueDict({"file": [SimpleUploadedFile(name, content)]}))


def rubric_refusal(_project, path) -> str:
    form = rubric_form(path.name, path.read_bytes())
    assert not form.is_valid()
    return str(form.non_field_errors()[0])


@pytest.mark.parametrize("refusal", [dataset_refusal, ratings_refusal, rubric_refusal])
@pytest.mark.parametrize(
    ("content", "sentence"),
    [
        (b"first line\nsecond " + LATIN_1 + b"\n", NOT_UTF8),
        ("one line of text\n".encode("utf-16"), UTF16),
        (b"%PDF-1.7\n" + bytes(range(256)), BINARY),
    ],
)
def test_every_upload_refuses_the_same_bytes_with_the_same_sentence(
    project, tmp_path, refusal, content, sentence
):
    path = tmp_path / "upload.txt"
    path.write_bytes(content)
    assert sentence in refusal(project, path)


def test_a_utf8_bom_is_read_and_dropped_by_every_upload(project, tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(dialog(0)).encode() + b"\n")
    assert import_dataset(project=project, name="D", path=path).ok
    spec = {
        "name": "Polite",
        "kind": "likert",
        "scale": [{"value": 1}, {"value": 2}],
        "prompt_template": "{{Dialog}}",
    }
    form = rubric_form("spec.json", b"\xef\xbb\xbf" + json.dumps(spec).encode())
    assert form.is_valid() and form.cleaned_data["source"].startswith("{")
