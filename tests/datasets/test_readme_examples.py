"""The README's dataset examples (one per format) import, and all four give the same item; its rubric spec
example imports."""

import re
from pathlib import Path

import pytest
from django.conf import settings

from datasets.models import Item
from datasets.services import import_dataset
from rubrics.parsing import parse_json_spec

README = (Path(settings.BASE_DIR) / "README.md").read_text(encoding="utf-8")
SECTION = README[
    README.index("## Datasets: the fields Concord reads") : README.index("## Rubrics: the JSON spec")
]


@pytest.mark.django_db
def test_each_readme_dataset_example_imports_the_same_item(project, tmp_path):
    blocks = re.findall(r"```(json|csv)\n(.*?)```", SECTION, re.S)
    assert [lang for lang, _ in blocks] == ["json", "json", "csv", "csv"]
    seen = []
    for n, (lang, text) in enumerate(blocks):
        path = tmp_path / f"example{n}.{'jsonl' if lang == 'json' else 'csv'}"
        path.write_text(text, encoding="utf-8")
        import_dataset(project=project, name=f"example {n}", path=path)
        item = Item.objects.get(dataset__name=f"example {n}")
        seen.append((item.external_id, item.context, item.response, item.baseline, item.metadata))
    long_csv = seen.pop(2)
    assert seen == [seen[0]] * 3
    assert long_csv == (*seen[0][:3], None, seen[0][4])  # a long CSV has no baseline column
    assert seen[0][0] == "d-17" and seen[0][3] == {"speaker": "BOT", "text": "No."}


def test_the_readme_rubric_spec_imports():
    spec = re.search(r"## Rubrics: the JSON spec.*?```json\n(.*?)```", README, re.S)
    assert spec is not None
    assert parse_json_spec(spec.group(1)).name == "Warmth"
