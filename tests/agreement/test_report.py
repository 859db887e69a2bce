"""agreement.report from the ORM: figures, degenerate evaluations, slices and the query budget."""

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from sklearn.metrics import cohen_kappa_score

from agreement.report import build_report, build_reports_by
from tests.agreement.helpers import make_rated_evaluation, random_table

pytestmark = pytest.mark.django_db


def _block(evaluation, **kwargs):
    return build_report(evaluation=evaluation, resamples=kwargs.pop("resamples", 100), **kwargs).as_json()[
        "rubrics"
    ][0]


def _rater(block, name):
    return next(r for r in block["raters"] if r["rater"] == name)


def test_likert_model_figures_match_scikit_learn_against_each_person_and_the_mean(project):
    rng = np.random.default_rng(5)
    table = random_table(
        rng, items=60, raters=["ann", "bob", "cy", "judge"], labels=list("12345"), missing=0.1
    )
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])

    block = _block(evaluation)
    judge = _rater(block, "judge")

    # Against each person: kappa per person, then weighted by the items each shares with the model.
    kappas, weights = [], []
    for person in ["ann", "bob", "cy"]:
        pairs = [(j, p) for j, p in zip(table["judge"], table[person], strict=True) if j and p]
        j, p = zip(*pairs, strict=True)
        kappas.append(cohen_kappa_score(j, p, labels=list("12345"), weights="quadratic"))
        weights.append(len(pairs))
    assert judge["vs_each_human"]["cohen_kappa"] == pytest.approx(np.average(kappas, weights=weights))
    # Against the people's mean, rounded half up to a scale point for kappa.
    means, model = [], []
    for n in range(60):
        people = [float(table[p][n]) for p in ["ann", "bob", "cy"] if table[p][n]]
        if table["judge"][n] and people:
            means.append(str(int(np.floor(np.mean(people) + 0.5))))
            model.append(table["judge"][n])
    expected = cohen_kappa_score(model, means, labels=list("12345"), weights="quadratic")
    assert judge["vs_majority"]["cohen_kappa"] == pytest.approx(expected)
    assert (
        judge["ci"]["cohen_kappa"][0] <= judge["vs_majority"]["cohen_kappa"] <= judge["ci"]["cohen_kappa"][1]
    )
    assert set(judge["vs_majority"]) >= {"spearman", "kendall_tau_b", "pearson", "within_one", "mae", "bias"}
    assert judge["verdict"]["label"] in {"better", "comparable", "worse", "inconclusive"}


def test_a_fractional_judge_score_is_kept_for_correlations_and_rounded_for_kappa(project):
    table = {
        "ann": [1, 2, 3, 4, 5, 3],
        "bob": [1, 2, 3, 5, 5, 3],
        "judge": ["1.2", "2.4", "2.5", "4.4", "4.6", "3"],
    }
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    judge = _rater(_block(evaluation), "judge")
    # Rounded: 1, 2, 3 (half up), 4, 5, 3 against means rounded 1, 2, 3, 5 (4.5 up), 5, 3.
    assert judge["vs_majority"]["percent_agreement"] == pytest.approx(5 / 6)
    assert judge["vs_majority"]["mae"] == pytest.approx(np.mean([0.2, 0.4, 0.5, 0.1, 0.4, 0]))
    assert judge["vs_majority"]["bias"] == pytest.approx(np.mean([0.2, 0.4, -0.5, -0.1, -0.4, 0]))


def test_categorical_report_has_f1_per_label_and_accuracy(project):
    scale = [{"value": v, "label": v, "description": v} for v in ["yes", "no"]]
    table = {
        "ann": ["yes", "no", "yes", "no"],
        "bob": ["yes", "no", "yes", "yes"],
        "m": ["yes", "yes", "yes", "no"],
    }
    evaluation, _ = make_rated_evaluation(project, kind="categorical", table=table, models=["m"], scale=scale)
    block = _block(evaluation)
    m = _rater(block, "m")
    # Majority: yes, no, yes, (tie: no majority) -> 3 items; model yes, yes, yes.
    assert m["vs_majority"]["items"] == 3 and m["vs_majority"]["items_without_majority"] == 1
    assert m["vs_majority"]["accuracy"] == pytest.approx(2 / 3)
    assert m["vs_majority"]["f1_yes"] == pytest.approx(0.8)
    assert m["vs_majority"]["f1_no"] == pytest.approx(0.0)


def test_pairwise_report_gives_agreement_with_and_without_ties(project):
    table = {
        "ann": ["A", "B", "SAME", "A", "B"],
        "bob": ["A", "B", "SAME", "B", "SAME"],
        "judge": ["A", "SAME", "SAME", "A", "B"],
    }
    evaluation, _ = make_rated_evaluation(project, kind="pairwise", table=table, models=["judge"])
    block = _block(evaluation)
    hh = block["human_human"]
    assert hh["agreement_with_ties"] == pytest.approx(3 / 5)
    assert hh["agreement_without_ties"] == pytest.approx(2 / 3)  # item 5 dropped (a tie)
    judge = _rater(block, "judge")
    # (judge, person) pairs: A/A A/A, SAME/B SAME/B, SAME/SAME x2, A/A A/B, B/B B/SAME.
    assert judge["vs_each_human"]["agreement_with_ties"] == pytest.approx(6 / 10)
    assert judge["vs_each_human"]["agreement_without_ties"] == pytest.approx(4 / 5)


def test_an_evaluation_without_ratings_gives_reasons_not_errors(project):
    evaluation, _ = make_rated_evaluation(project, kind="likert", table={"ann": [None, None, None]})
    block = _block(evaluation)
    assert block["items"] == 3 and block["raters"] == []
    assert block["human_human"]["krippendorff_alpha"] is None
    assert "nothing to compare" in block["human_human"]["why"]["krippendorff_alpha"]
    assert block["missing"]["items_without_human_rating"] == 3


def test_one_rater_only_has_no_human_human_figures(project):
    evaluation, _ = make_rated_evaluation(
        project, kind="likert", table={"ann": [1, 2, 3], "m": [1, 2, 3]}, models=["m"]
    )
    block = _block(evaluation)
    assert block["human_human"]["cohen_kappa"] is None
    m = _rater(block, "m")
    assert m["vs_majority"]["percent_agreement"] == 1.0
    assert m["verdict"]["label"] == "undefined"


def test_identical_ratings_say_kappa_is_undefined_and_why(project):
    table = {"ann": ["4"] * 5, "bob": ["4"] * 5, "m": ["4"] * 5}
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["m"])
    block = _block(evaluation)
    assert block["human_human"]["cohen_kappa"] is None
    assert "all ratings identical" in block["human_human"]["why"]["cohen_kappa"]
    assert block["human_human"]["percent_agreement"] == 1.0
    m = _rater(block, "m")
    assert (
        m["vs_majority"]["cohen_kappa"] is None
        and "all ratings identical" in m["vs_majority"]["why"]["cohen_kappa"]
    )
    assert m["verdict"]["metric"] == "percent_agreement"


def test_items_with_one_rating_are_counted_and_left_out_of_human_human(project):
    table = {"ann": [1, 2, 3, 4], "bob": [1, 2, None, None]}
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table)
    block = _block(evaluation)
    assert block["human_human"]["items"] == 2
    assert block["missing"]["items_with_one_human_rating"] == 2
    assert block["human_human"]["percent_agreement"] == 1.0


def test_a_model_with_only_parse_failures_counts_them_and_scores_nothing(project):
    table = {"ann": [1, 2, 3], "bob": [1, 3, 3], "m": ["!", "!", "!"]}
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["m"])
    m = _rater(_block(evaluation), "m")
    assert m["parse_failures"] == 3 and m["rated"] == 0 and m["items"] == 0
    assert m["verdict"]["label"] == "undefined"
    assert "percent_agreement" not in m["vs_majority"]


def test_where_restricts_to_items_whose_metadata_matches(project):
    table = {"ann": [1, 2, 3, 4], "bob": [1, 2, 4, 5]}
    metadata = [{"bot": "x"}, {"bot": "x"}, {"bot": "y"}, {"bot": "y", "turn": 3}]
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, metadata=metadata)
    assert _block(evaluation, where={"bot": "x"})["human_human"]["percent_agreement"] == 1.0
    assert _block(evaluation, where={"bot": "y"})["human_human"]["percent_agreement"] == 0.0
    assert _block(evaluation, where={"turn": "3"})["items"] == 1

    by = build_reports_by(evaluation=evaluation, by="bot", resamples=0).as_json()
    assert [(s["value"], s["rubrics"][0]["items"]) for s in by["slices"]] == [("x", 2), ("y", 2)]


def test_the_report_reads_each_rubrics_ratings_in_one_query(project, django_assert_max_num_queries):
    table = random_table(
        np.random.default_rng(1), items=40, raters=["a", "b", "c", "m1", "m2"], labels=list("12345")
    )
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["m1", "m2"])
    with CaptureQueriesContext(connection) as queries:
        build_report(evaluation=evaluation, resamples=10)
    rating_reads = [q["sql"] for q in queries.captured_queries if 'FROM "evaluations_rating"' in q["sql"]]
    # The ratings once, after one count of each rubric's raters and items for the report's cost.
    assert len(rating_reads) == 2 and "COUNT(DISTINCT" in rating_reads[0]
    assert len(queries.captured_queries) <= 9


def test_values_off_the_scale_are_counted_or_shown_never_dropped(project):
    likert, _ = make_rated_evaluation(
        project, kind="likert", table={"ann": ["1", "lots", "3"], "bob": [1, 2, 3]}
    )
    block = _block(likert)
    assert block["ratings"]["invalid"] == 1 and block["ratings"]["human"] == 5

    scale = [{"value": v, "label": v, "description": v} for v in ["yes", "no"]]
    table = {"ann": ["yes", "maybe", "no"], "bob": ["yes", "maybe", "yes"]}
    categorical, _ = make_rated_evaluation(project, kind="categorical", table=table, scale=scale)
    block = _block(categorical)
    assert block["labels"] == ["yes", "no", "maybe"]
    assert block["distribution"]["human"] == [3, 1, 2]


def test_the_verdict_interval_brackets_its_difference(project):
    rng = np.random.default_rng(11)
    table = random_table(rng, items=120, raters=["a", "b", "c", "m"], labels=["A", "SAME", "B"], missing=0.0)
    evaluation, _ = make_rated_evaluation(project, kind="pairwise", table=table, models=["m"])
    verdict = _rater(_block(evaluation, resamples=300), "m")["verdict"]
    low, high = verdict["difference_ci"]
    assert low <= verdict["difference"] <= high
    assert verdict["difference"] == pytest.approx(verdict["model"] - verdict["humans"], abs=1e-5)
    within = low >= -0.1 and high <= 0.1
    expected = "better" if low > 0 else "worse" if high < 0 else "comparable" if within else "inconclusive"
    assert verdict["label"] == expected


def test_human_figures_ignore_a_fractional_judge_and_match_the_krippendorff_package(project):
    import krippendorff

    rng = np.random.default_rng(21)
    table = random_table(rng, items=50, raters=["a", "b", "c"], labels=list("12345"), missing=0.2)
    table["judge"] = [f"{v:.2f}" for v in rng.uniform(1, 5, 50)]
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    hh = _block(evaluation)["human_human"]
    data = np.array([[np.nan if v is None else float(v) for v in table[r]] for r in ["a", "b", "c"]])
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal")
    assert hh["krippendorff_alpha"] == pytest.approx(expected)
    assert hh["ci"]["krippendorff_alpha"][0] <= expected <= hh["ci"]["krippendorff_alpha"][1]


def test_a_pool_of_people_gives_the_same_intervals_with_the_shared_people_tables_as_without(
    project, monkeypatch
):
    # Eight people, three per item: nearly every item its own pattern, so the report's shared Poisson
    # resamples are used; the model misses some items (parse failures) and some have one person only.
    from agreement import against_people, people

    rng = np.random.default_rng(4)
    names = [f"p{k}" for k in range(8)]
    table = random_table(rng, items=300, raters=[*names, "m"], labels=list("12345"), missing=0.0)
    chosen = np.argsort(rng.random((300, 8)), axis=1)[:, :3]
    for k, name in enumerate(names):
        table[name] = [v if (chosen[n] == k).any() else None for n, v in enumerate(table[name])]
    for n in range(0, 300, 15):
        table["m"][n] = "!"
        table[names[chosen[n + 1, 0]]][n + 1] = None
        table[names[chosen[n + 1, 1]]][n + 1] = None
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["m"])

    real, used = people.shares_people_tables, []

    def recorded(ctx):
        used.append(real(ctx))
        return used[-1]

    monkeypatch.setattr(people, "shares_people_tables", recorded)
    shared = _block(evaluation, resamples=200)
    assert any(used)
    monkeypatch.setattr(people, "shares_people_tables", lambda ctx: False)
    monkeypatch.setattr(against_people, "shares_people_tables", lambda ctx: False)
    summed = _block(evaluation, resamples=200)

    assert shared == summed
    assert _rater(shared, "m")["verdict"]["difference_ci"] is not None
    assert shared["human_human"]["ci"]["cohen_kappa"] is not None


def test_the_groups_in_threads_give_the_same_report_as_one_after_another(project, monkeypatch):
    # A pool of people and two models: every group takes the report's shared resamples, in chunks of
    # 20 (each thread must see its own current chunk), and the verdicts read the people's tables.
    import functools

    from agreement import bootstrap as bs
    from agreement import report

    rng = np.random.default_rng(8)
    names = [f"p{k}" for k in range(8)]
    table = random_table(rng, items=300, raters=[*names, "m1", "m2"], labels=list("12345"), missing=0.0)
    chosen = np.argsort(rng.random((300, 8)), axis=1)[:, :3]
    for k, name in enumerate(names):
        table[name] = [v if (chosen[n] == k).any() else None for n, v in enumerate(table[name])]
    for n in range(0, 300, 10):
        table["m2"][n] = "!"
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["m1", "m2"])
    monkeypatch.setattr(bs, "ItemResamples", functools.partial(bs.ItemResamples, budget=300 * 20))

    monkeypatch.setattr(report, "GROUP_THREADS", 1)
    one_after_another = _block(evaluation, resamples=200)
    monkeypatch.setattr(report, "GROUP_THREADS", 3)
    for _ in range(3):
        assert _block(evaluation, resamples=200) == one_after_another
    assert _rater(one_after_another, "m2")["verdict"]["difference_ci"] is not None


def _assert_close(got, expected, path=""):
    """The same JSON, numbers within 1e-12 (figures summed in another order)."""
    if isinstance(expected, dict):
        assert list(got) == list(expected), path
        for key in expected:
            _assert_close(got[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), path
        for n, (a, b) in enumerate(zip(got, expected, strict=True)):
            _assert_close(a, b, f"{path}[{n}]")
    elif isinstance(expected, float) and not isinstance(got, bool):
        assert got == pytest.approx(expected, abs=1e-12), path
    else:
        assert got == expected, path


@pytest.mark.parametrize("kind", ["likert", "pairwise", "categorical"])
def test_every_pairs_figures_from_one_stack_of_tables_are_those_of_each_pair_alone(
    project, monkeypatch, kind
):
    from agreement import tables

    rng = np.random.default_rng(11)
    labels = list("12345") if kind == "likert" else ["A", "SAME", "B"]
    names = [f"p{k}" for k in range(6)]
    table = random_table(rng, items=120, raters=[*names, "m"], labels=labels, missing=0.0)
    chosen = np.argsort(rng.random((120, 6)), axis=1)[:, :3]
    for k, name in enumerate(names):
        table[name] = [v if (chosen[n] == k).any() else None for n, v in enumerate(table[name])]
    table["p5"] = [None] * 120  # a person who rated nothing: no pairs
    table["p4"] = [labels[0] if v is not None else None for v in table["p4"]]  # always the same label
    if kind == "likert":  # a fractional judge: its own values in the per-person tables
        table["m"] = [f"{float(v) + rng.choice([0, 0.25, 0.5]):g}" for v in table["m"]]
    scale = [{"value": v, "label": v, "description": v} for v in labels] if kind == "categorical" else None
    evaluation, _ = make_rated_evaluation(project, kind=kind, table=table, models=["m"], scale=scale)
    batched = _block(evaluation, resamples=0)
    monkeypatch.setattr(tables, "PAIR_CELLS_BUDGET", -1)  # two_raters pair by pair
    one_by_one = _block(evaluation, resamples=0)

    _assert_close(batched, one_by_one)
    assert len(batched["human_human"]["pairs"]) == 10  # p0-p4 rated items together, p5 none
    constant = next(p for p in batched["human_human"]["pairs"] if p["b"] == "p4")
    assert constant["cohen_kappa"] == pytest.approx(0.0)  # one side constant: no better than chance
    if kind == "likert":
        assert constant["spearman"] is None and "identical for one rater" in constant["why"]["spearman"]


def test_the_groups_in_threads_share_one_set_of_resamples(project, monkeypatch):
    # The people's group and both models' ask for the report's shared resamples at once: one set is made
    # (made slowly here, so that the others ask while it is being made), not one per thread.
    import time

    from agreement import bootstrap as bs
    from agreement import report

    made = []
    resamples = bs.ItemResamples

    def slow_resamples(**kwargs):
        made.append(kwargs)
        time.sleep(0.2)
        return resamples(**kwargs)

    rng = np.random.default_rng(9)
    people = [f"p{k}" for k in range(6)]  # six people on every item: nearly every item is its own row
    table = random_table(rng, items=120, raters=[*people, "m1", "m2"], labels=list("12345"), missing=0.0)
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["m1", "m2"])
    monkeypatch.setattr(bs, "ItemResamples", slow_resamples)
    monkeypatch.setattr(report, "GROUP_THREADS", 3)
    block = _block(evaluation, resamples=50)
    assert block["human_human"]["ci"]["cohen_kappa"] is not None
    assert len(made) == 1


@pytest.mark.parametrize("kind, labels", [("likert", list("12345")), ("pairwise", ["A", "SAME", "B"])])
def test_the_reports_few_disagreements_are_the_first_of_a_plain_ranking(project, kind, labels):
    """The report sorts only the items as far as its last one (many tie there); it still picks those of
    the whole ranking (furthest first, then more people, then the item), shown furthest first."""
    rng = np.random.default_rng(11)
    people = ["ann", "bob", "cy", "dee"]
    table = random_table(rng, items=80, raters=[*people, "judge"], labels=labels, missing=0.3)
    evaluation, _ = make_rated_evaluation(project, kind=kind, table=table, models=["judge"])
    items = list(evaluation.dataset.items.order_by("position").values_list("pk", flat=True))
    ranking = []
    for n, item in enumerate(items):
        given = [table[p][n] for p in people if table[p][n] is not None]
        model = table["judge"][n]
        if model is None or not given:
            continue
        if kind == "likert":
            distance = abs(float(model) - np.mean([float(v) for v in given]))
        else:
            distance = sum(v != model for v in given) / len(given)
        if distance > 0:
            ranking.append((-round(distance, 9), -len(given), item))
    ranking.sort()
    for limit in (1, 7, 200):
        block = _block(evaluation, resamples=0, disagreements=limit)
        shown = sorted((d, item) for d, _, item in ranking[:limit])
        assert [e["item_id"] for e in block["disagreements"]] == [item for _, item in shown]


def test_a_judge_whose_interval_reaches_far_either_side_of_zero_is_inconclusive_not_as_good_as_people(
    project,
):
    """Seen in a browser: a judge at chance level on twelve items (kappa -0.06 against the people's 0.66)
    was called 'as well as people, within uncertainty' because the difference's interval held 0."""
    labels = ["A", "SAME", "B"]
    seen = set()
    for seed in range(8):  # small studies with a judge at chance: the interval is wide
        rng = np.random.default_rng(seed)
        people = [labels[c] for c in rng.integers(0, 3, 12)]
        other = [labels[rng.integers(0, 3)] if rng.random() < 0.5 else v for v in people]
        table = {"a": people, "b": other, "m": [labels[c] for c in rng.integers(0, 3, 12)]}
        evaluation, _ = make_rated_evaluation(project, kind="pairwise", table=table, models=["m"])
        verdict = _rater(_block(evaluation, resamples=300), "m")["verdict"]
        low, high = verdict["difference_ci"]
        assert verdict["label"] != "comparable"  # never, with so wide an interval
        if low <= 0 <= high:
            assert verdict["label"] == "inconclusive" and "beyond ±0.1" in verdict["text"]
        seen.add(verdict["label"])
    assert "inconclusive" in seen

    many = 3000  # a judge like the people on many items: the interval is narrow around 0
    rng = np.random.default_rng(6)
    truth = [labels[c] for c in rng.integers(0, 3, many)]
    table = {
        name: [labels[rng.integers(0, 3)] if rng.random() < 0.2 else v for v in truth]
        for name in ("a", "b", "m")
    }
    evaluation, _ = make_rated_evaluation(project, kind="pairwise", table=table, models=["m"])
    verdict = _rater(_block(evaluation, resamples=300), "m")["verdict"]
    low, high = verdict["difference_ci"]
    assert -0.1 <= low <= 0 <= high <= 0.1 and verdict["label"] == "comparable"
