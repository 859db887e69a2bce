"""The published inter-annotator figures of ../shared/data, through Concord's ratings import and report.

- PandaLM (README): Cohen's kappa between annotators 1-2 = 0.85, 1-3 = 0.88, 2-3 = 0.86.
- USR PersonaChat (SOURCE.md): mean pairwise Spearman between annotators per quality. Those
  figures pair the annotators by their *position* in each record (first, second, third of the
  three who rated a context), not by name, so the import names raters "position 1..3" here.
"""

import pytest

from agreement.report import build_report
from evaluations.ratings_import import import_ratings
from tests import factories
from tests import shared_data as sd

USR_PUBLISHED = {
    "Understandable": 0.2984,
    "Natural": 0.4842,
    "Maintains Context": 0.6125,
    "Engaging": 0.4138,
    "Uses Knowledge": 0.8115,
    "Overall": 0.6577,
}


def _evaluation(project, name, items, specs):
    versions = sd.make_rubric_versions(project, specs)
    dataset = sd.make_dataset_from_items(project, name, items)
    return factories.make_evaluation(project, dataset, list(versions.values()), name=name, overlap=3)


@pytest.mark.django_db
def test_pandalm_annotator_kappas_match_the_published_085_088_086(project, tmp_path):
    shared = sd.write_pandalm(tmp_path)
    evaluation = _evaluation(project, "PandaLM", sd.pandalm_items(), [sd.pandalm_rubric_spec()])
    import_ratings(evaluation=evaluation, path=shared.ratings_path)

    block = build_report(evaluation=evaluation, resamples=50).as_json()["rubrics"][0]

    kappas = {(p["a"], p["b"]): round(p["cohen_kappa"], 2) for p in block["human_human"]["pairs"]}
    assert kappas == {
        ("annotator1", "annotator2"): 0.85,
        ("annotator1", "annotator3"): 0.88,
        ("annotator2", "annotator3"): 0.86,
    }
    # The majority labels of SOURCE.md (A 422, SAME 105, B 472), and GPT-3.5's 25 unparsed verdicts
    # counted, not scored.
    gpt = next(r for r in block["raters"] if r["rater"] == "gpt-3.5-turbo")
    assert [sum(row) for row in gpt["confusion"]["matrix"]] == [416, 92, 466]  # on the 974 it parsed
    assert gpt["parse_failures"] == 25 and gpt["rated"] == 974
    panda = next(r for r in block["raters"] if r["rater"] == "pandalm-7b")
    assert [sum(row) for row in panda["confusion"]["matrix"]] == [422, 105, 472]
    assert round(panda["vs_majority"]["percent_agreement"], 3) == 0.668  # SOURCE.md's accuracy


def _positional_usr_ratings():
    ratings = sd.usr_ratings()
    # usr_ratings lists the three ratings of each (item, criterion) in the record's annotator order.
    for n, rating in enumerate(ratings):
        rating["rater"] = f"position {n % 3 + 1}"
    return ratings


@pytest.mark.django_db
def test_usr_mean_pairwise_spearman_matches_the_published_figures(project, tmp_path):
    evaluation = _evaluation(project, "USR", sd.usr_items(), sd.usr_rubric_specs())
    path = sd.write_ratings_csv(tmp_path / "usr.csv", _positional_usr_ratings())
    import_ratings(evaluation=evaluation, path=path)

    report = build_report(evaluation=evaluation, resamples=0).as_json()

    figures = {block["rubric"]: round(block["human_human"]["spearman"], 4) for block in report["rubrics"]}
    assert figures == USR_PUBLISHED
