"""The alt-test figures printed by the paper's own notebook, through import_ratings + agreement --json.

Calderon, Reichart & Dror (ACL 2025), github.com/nitaytech/AltTest: winning rate and advantage
probability of six LLMs on MT-Bench (accuracy, epsilon 0.2), SummEval (negative RMSE, 0.2) and
CEBaB stars (negative RMSE, 0.1), to the 2 decimals the notebook prints (published_figures.json).
"""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from tests import alttest_data as ad
from tests import factories
from tests import shared_data as sd

pytestmark = pytest.mark.django_db


def _evaluation_with_paper_ratings(project, name: str, tmp_path):
    versions = sd.make_rubric_versions(project, [ad.rubric_spec(name)])
    dataset = sd.make_dataset_from_items(project, name, ad.items(name))
    evaluation = factories.make_evaluation(project, dataset, list(versions.values()), name=name, overlap=3)
    call_command(
        "import_ratings", str(ad.write_ratings(tmp_path, name)), "--evaluation", name, stdout=StringIO()
    )
    return evaluation


def _agreement_json(name: str, epsilon: float) -> dict:
    out = StringIO()
    call_command(
        "agreement", "--evaluation", name, "--json", "--epsilon", str(epsilon), "--resamples", "0", stdout=out
    )
    return json.loads(out.getvalue())


@pytest.mark.parametrize("name", ad.SETS)
def test_alt_test_reproduces_the_papers_notebook(project, tmp_path, name):
    published = {
        key.split("/", 1)[1]: v for key, v in ad.published_figures().items() if key.startswith(name + "/")
    }
    epsilon = next(iter(published.values()))["epsilon"]
    _evaluation_with_paper_ratings(project, name, tmp_path)

    (block,) = _agreement_json(name, epsilon)["rubrics"]

    figures = {
        r["rater"]: {
            "winning_rate": round(r["alt_test"]["winning_rate"], 2),
            "advantage_probability": round(r["alt_test"]["advantage_probability"], 2),
            "metric": r["alt_test"]["metric"],
            "epsilon": r["alt_test"]["epsilon"],
        }
        for r in block["raters"]
    }
    assert figures == published
    for rater in block["raters"]:
        assert rater["alt_test"]["passed"] == (rater["alt_test"]["winning_rate"] >= 0.5)
        assert rater["alt_test"]["left_out"] == []
