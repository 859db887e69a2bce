"""agreement.statistics against scikit-learn, SciPy and the krippendorff package, and by hand."""

from types import SimpleNamespace
from typing import cast

import krippendorff
import numpy as np
import pytest
from scipy import stats as scipy_stats
from sklearn.metrics import accuracy_score, cohen_kappa_score, f1_score

from agreement import bootstrap as bs
from agreement import statistics as st
from agreement.tables import Context, pair_tables

SHAPES = [(12, 2), (60, 3), (250, 5), (40, 7)]


def random_matrix(seed: int, items: int, raters: int, *, levels: int = 5, missing: float = 0.25):
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, levels + 1, items)
    data = np.clip(truth[:, None] + rng.integers(-1, 2, (items, raters)), 1, levels).astype(float)
    data[rng.random((items, raters)) < missing] = np.nan
    return data


def paired(seed: int, n: int, *, levels: int = 5):
    rng = np.random.default_rng(seed)
    a = rng.integers(1, levels + 1, n)
    b = np.clip(a + rng.integers(-2, 3, n) * (rng.random(n) < 0.5), 1, levels)
    return a, b


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
@pytest.mark.parametrize("seed,shape", list(enumerate(SHAPES)))
def test_krippendorff_alpha_matches_the_krippendorff_package_with_missing_values(level, seed, shape):
    data = random_matrix(seed, *shape)
    expected = krippendorff.alpha(reliability_data=data.T, level_of_measurement=level)
    assert st.krippendorff_alpha(data, level=level).value == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize("weights", [None, "linear_is_not_offered", "quadratic"])
@pytest.mark.parametrize("seed,n", [(1, 15), (2, 200), (3, 1000)])
def test_cohen_kappa_matches_scikit_learn(weights, seed, n):
    if weights == "linear_is_not_offered":
        weights = None
    a, b = paired(seed, n)
    labels = [1, 2, 3, 4, 5]
    expected = cohen_kappa_score(a, b, labels=labels, weights=weights)
    assert st.cohen_kappa(a, b, labels=labels, weights=weights).value == pytest.approx(expected, abs=1e-10)


def test_cohen_kappa_on_text_labels_matches_scikit_learn():
    rng = np.random.default_rng(7)
    a = rng.choice(["A", "SAME", "B"], 300)
    b = np.where(rng.random(300) < 0.7, a, rng.choice(["A", "SAME", "B"], 300))
    assert st.cohen_kappa(list(a), list(b)).value == pytest.approx(cohen_kappa_score(a, b), abs=1e-10)


@pytest.mark.parametrize("seed,n,continuous", [(4, 30, False), (5, 500, False), (6, 400, True)])
def test_correlations_match_scipy(seed, n, continuous):
    a, b = paired(seed, n)
    x = a + (np.random.default_rng(seed).random(n) * 0.9 if continuous else 0)
    assert st.spearman(x, b).value == pytest.approx(scipy_stats.spearmanr(x, b).statistic, abs=1e-10)
    assert st.pearson(x, b).value == pytest.approx(scipy_stats.pearsonr(x, b).statistic, abs=1e-10)
    assert st.kendall_tau_b(x, b).value == pytest.approx(
        scipy_stats.kendalltau(x, b, variant="b").statistic, abs=1e-10
    )


def test_correlations_skip_pairs_with_a_missing_side_like_scipy_on_the_rest():
    a, b = paired(8, 100)
    x = a.astype(float)
    x[::7] = np.nan
    keep = ~np.isnan(x)
    assert st.spearman(x, b).value == pytest.approx(scipy_stats.spearmanr(x[keep], b[keep]).statistic)


@pytest.mark.parametrize("seed", [9, 10])
def test_f1_per_label_and_accuracy_match_scikit_learn(seed):
    predicted, truth = paired(seed, 300, levels=4)
    labels = [1, 2, 3, 4]
    f1 = st.f1_per_label(predicted, truth, labels=labels)
    expected = f1_score(truth, predicted, labels=labels, average=None)
    assert [f1[label].value for label in labels] == pytest.approx(list(expected), abs=1e-12)
    assert st.accuracy(predicted, truth).value == pytest.approx(accuracy_score(truth, predicted))


def test_mae_bias_and_within_one_are_the_plain_means():
    x, y = np.array([1.0, 2.0, 5.0, 3.5]), np.array([2.0, 2.0, 3.0, 3.0])
    assert st.mean_absolute_error(x, y).value == pytest.approx((1 + 0 + 2 + 0.5) / 4)
    assert st.bias(x, y).value == pytest.approx((-1 + 0 + 2 + 0.5) / 4)
    assert st.within_one(x, y).value == pytest.approx(3 / 4)


def test_fleiss_kappa_reproduces_the_worked_example_of_fleiss_1971_as_on_wikipedia():
    # 10 subjects, 14 raters each, 5 categories: P-bar 0.378, P_e 0.213, kappa 0.210.
    counts = np.array(
        [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ],
        dtype=float,
    )
    assert st.fleiss_from_counts(counts).value == pytest.approx(0.20993, abs=5e-5)


def test_fleiss_kappa_by_hand_on_three_items():
    # Items: (a, a, a), (a, a, b), (b, b, b). P_i = 1, 1/3, 1; P-bar = 7/9.
    # p_a = 5/9, p_b = 4/9, P_e = 41/81; kappa = (7/9 - 41/81) / (1 - 41/81) = 22/40.
    data = np.array([[1, 1, 1], [1, 1, 2], [2, 2, 2]], dtype=float)
    assert st.fleiss_kappa(data).value == pytest.approx(22 / 40)


def test_pooled_percent_agreement_counts_every_pair_of_raters_on_an_item():
    # Item 1: three pairs, one agrees. Item 2: one pair, agrees. Item 3 has one rating: no pair.
    data = np.array([[1, 1, 2], [3, np.nan, 3], [2, np.nan, np.nan]])
    assert st.percent_agreement(data).value == pytest.approx(2 / 4)


def test_agreement_without_ties_drops_pairs_where_either_side_is_a_tie():
    # Codes: 0 = A, 1 = SAME (tie), 2 = B.
    data = np.array([[0, 0], [0, 1], [2, 2], [2, 0], [1, 1]], dtype=float)
    assert st.percent_agreement(data).value == pytest.approx(3 / 5)  # S1: the tie pair agrees
    assert st.percent_agreement(data, exclude=1).value == pytest.approx(2 / 3)  # S2


# --- Degenerate data ---------------------------------------------------------------------------


def test_all_identical_ratings_leave_kappa_and_alpha_undefined_with_the_reason():
    same = np.full((10, 3), 4.0)
    kappa = st.cohen_kappa([4] * 10, [4] * 10)
    assert kappa.value is None and "all ratings identical" in kappa.why
    alpha = st.krippendorff_alpha(same, level="ordinal")
    assert alpha.value is None and "all ratings identical" in alpha.why
    assert st.percent_agreement(same).value == 1.0


def test_one_rater_or_one_rating_per_item_has_nothing_to_compare():
    one_rater = np.array([[1.0], [2.0], [3.0]])
    assert st.krippendorff_alpha(one_rater).value is None
    assert "two or more ratings" in st.krippendorff_alpha(one_rater).why
    assert st.percent_agreement(one_rater).value is None
    assert st.fleiss_kappa(one_rater).why == "one rating per item: Fleiss' kappa undefined"


def test_no_ratings_at_all_give_reasons_not_errors():
    empty = np.empty((0, 2))
    assert st.krippendorff_alpha(empty).value is None
    assert st.percent_agreement(empty).value is None
    assert st.fleiss_kappa(empty).value is None
    assert st.cohen_kappa([], []).value is None
    assert st.spearman([], []).why.startswith("fewer than two items")
    assert st.mean_absolute_error([], []).value is None


def test_fleiss_kappa_refuses_items_with_different_numbers_of_raters():
    data = np.array([[1, 1, np.nan], [1, 2, 2]])
    result = st.fleiss_kappa(data)
    assert result.value is None and "2 to 3 raters" in result.why


def test_a_constant_rater_makes_correlations_undefined():
    result = st.spearman([3, 3, 3, 3], [1, 2, 3, 4])
    assert result.value is None and "all ratings identical" in result.why


# --- Bootstrap ---------------------------------------------------------------------------------


def _mean_stat(unique, w):
    return st._divide(w @ unique[:, 0].astype(float), w.sum(axis=1))


def test_bootstrap_is_reproducible_with_a_fixed_seed_and_contains_the_estimate():
    rows = np.random.default_rng(3).integers(0, 5, (2000, 1))
    point, ci = bs.bootstrap(rows, _mean_stat, resamples=500, seed=11)
    again = bs.bootstrap(rows, _mean_stat, resamples=500, seed=11)[1]
    assert ci is not None and again is not None
    assert np.array_equal(ci, again)
    assert ci[0][0] < point[0] < ci[0][1]
    assert point[0] == pytest.approx(rows.mean())


def assert_spread_of_resampling_items(rows: np.ndarray) -> None:
    """The bootstrap's 95% interval of the mean is that of resampling the items naively."""
    _, ci = bs.bootstrap(rows, _mean_stat, resamples=2000, seed=1)
    assert ci is not None
    rng = np.random.default_rng(2)
    n = rows.shape[0]
    naive = np.array([rows[rng.integers(0, n, n), 0].mean() for _ in range(2000)])
    expected = np.percentile(naive, [2.5, 97.5])
    width = expected[1] - expected[0]
    assert ci[0] == pytest.approx(expected, abs=0.1 * width)


def test_pattern_bootstrap_has_the_spread_of_resampling_items():
    rows = np.random.default_rng(4).integers(0, 5, (3000, 1))
    assert_spread_of_resampling_items(rows)


def test_bootstrap_of_no_items_has_no_interval():
    point, ci = bs.bootstrap(np.empty((0, 1), dtype=int), _mean_stat)
    assert ci is None and np.isnan(point[0])


def test_poisson_bootstrap_of_distinct_items_has_the_spread_of_resampling_items():
    # Every item its own row: the Poisson bootstrap path, not the multinomial over patterns.
    rows = np.random.default_rng(5).permutation(3000)[:, None] % 997
    _, counts = st.unique_rows(rows)
    assert counts.shape[0] * 4 >= rows.shape[0]
    assert_spread_of_resampling_items(rows)


def test_poisson_bootstrap_of_thousands_of_patterns_has_the_spread_of_resampling_items():
    # 4,500 patterns over 20,000 items (about 4 each): too many for one binomial per pattern and resample.
    rows = np.random.default_rng(6).permutation(20_000)[:, None] % 4_500
    _, counts = st.unique_rows(rows)
    assert counts.shape[0] * 4 < rows.shape[0] and counts.shape[0] >= 4096
    weights = bs._resample_weights(np.random.default_rng(0), counts, rows.shape[0], 50)
    assert weights.dtype == np.float32  # the Poisson path (the multinomial's are float64, exactly n)
    assert_spread_of_resampling_items(rows)


def test_unique_rows_are_numpys_in_lexicographic_order_by_a_sort_or_a_table():
    rng = np.random.default_rng(12)
    # 24 people's value codes (-1 missing): more columns than one int64 packs, so the distinct keys are
    # renumbered on the way; then keys over a range small enough for a table (a pattern, a flag, a code).
    wide = np.where(rng.random((5000, 24)) < 0.8, -1, rng.integers(0, 9, (5000, 24)))
    narrow = np.stack(
        [rng.integers(0, 900, 5000), rng.integers(0, 2, 5000), rng.integers(-1, 5, 5000)], axis=1
    )
    for rows in [wide, narrow, narrow[:, :1], np.full((7, 2), 3)]:
        got = st.unique_rows(rows, return_inverse=True)
        unique, inverse, counts = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
        for a, b in zip(got, (unique, counts, inverse.reshape(-1)), strict=True):
            assert np.array_equal(a, b)
        assert all(np.array_equal(a, b) for a, b in zip(st.unique_rows(rows), (unique, counts), strict=True))


def test_unique_ids_are_numpys_with_and_without_a_table_over_their_range():
    rng = np.random.default_rng(13)
    for ids in [rng.integers(500, 900, 1000), rng.integers(0, 10**9, 1000), np.zeros(0, dtype=np.int64)]:
        got, expected = st.unique_ids(ids, return_inverse=True), np.unique(ids, return_inverse=True)
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
        assert np.array_equal(st.unique_ids(ids), np.unique(ids))


def test_uniform16_gives_the_numbers_of_integers_over_the_whole_range():
    for count in [4, 20_000, 15]:  # whole 64-bit outputs, and a count that is not
        got = bs._uniform16(np.random.default_rng(9), count)
        expected = np.random.default_rng(9).integers(0, 65536, size=count, dtype=np.uint16)
        assert got.shape == (count,) and np.array_equal(got, expected)


def test_poisson_draws_a_slice_at_a_time_are_one_lookup_of_the_whole_draw():
    # Over several slices (the last one partial) and as bytes or float32: each weight is the table's entry
    # for the uniform a single draw of the whole size gives in that place.
    for table in (bs._poisson_table(3), bs._poisson_bytes(1)):
        out = np.empty((7, 30_001), dtype=table.dtype)
        bs._draw_poisson(np.random.default_rng(4), table, out)
        expected = table[np.random.default_rng(4).integers(0, 65536, size=out.size, dtype=np.uint16)]
        assert np.array_equal(out.reshape(-1), expected)


def test_poisson_weights_are_their_counts_poisson_draws_in_row_order():
    # Rows seen once, twice and 40 times (beyond the byte tables), interleaved: each row keeps its own draws.
    counts = np.tile([1, 2, 40], 2000)
    weights = bs._resample_weights(np.random.default_rng(1), counts, int(counts.sum()), 400)
    assert weights.shape == (400, counts.shape[0]) and weights.dtype == np.float32
    for count in (1, 2, 40):
        drawn = weights[:, counts == count]
        assert drawn.mean() == pytest.approx(count, rel=0.01)
        assert drawn.var() == pytest.approx(count, rel=0.03)
    # The same rows ordered by count (as the bootstrap orders them): each row the same draws.
    order = np.argsort(counts, kind="stable")
    in_order = bs._resample_weights(np.random.default_rng(1), counts[order], int(counts.sum()), 400)
    assert np.array_equal(in_order, weights[:, order])


def test_kappa_of_a_batch_of_tables_matches_scikit_learn_table_by_table():
    rng = np.random.default_rng(8)
    pairs = [(rng.integers(0, 4, 80), rng.integers(0, 4, 80)) for _ in range(6)]
    # (L, L, pairs, weightings): each pair's table under unit weights and under a doubled first half.
    tables = np.zeros((4, 4, len(pairs), 2))
    for p, (a, b) in enumerate(pairs):
        np.add.at(tables[:, :, p, 0], (a, b), 1.0)
        np.add.at(tables[:, :, p, 1], (a, b), np.where(np.arange(80) < 40, 2.0, 1.0))
    kappa = st.kappa_from_tables(tables, weights="quadratic")
    for p, (a, b) in enumerate(pairs):
        assert kappa[p, 0] == pytest.approx(cohen_kappa_score(a, b, labels=range(4), weights="quadratic"))
        doubled = np.concatenate([np.arange(40), np.arange(80)])
        expected = cohen_kappa_score(a[doubled], b[doubled], labels=range(4), weights="quadratic")
        assert kappa[p, 1] == pytest.approx(expected)


def test_item_resamples_are_reproducible_and_the_same_for_every_group_of_items():
    shared = bs.ItemResamples(items=500, resamples=30, seed=3, budget=5000)  # chunks of 10 resamples
    members = np.array([3, 7, 100, 499])
    everything = np.concatenate(list(shared.of(np.arange(500))), axis=0)
    some = np.concatenate(list(shared.of(members)), axis=0)
    assert everything.shape == (30, 500) and some.shape == (30, 4)
    assert np.array_equal(some, everything[:, members])  # the same resamples, whichever items ask
    # Drawn again from the seed when not kept: the same weights.
    again = bs.ItemResamples(items=500, resamples=30, seed=3, budget=5000, keep=0)
    assert np.array_equal(np.concatenate(list(again.of(np.arange(500))), axis=0), everything)
    assert shared.chunk is None
    with pytest.raises(ValueError):
        shared.weights(members)
    # Poisson(1) counts per item and resample.
    assert everything.mean() == pytest.approx(1.0, abs=0.05)
    assert everything.var() == pytest.approx(1.0, abs=0.08)


def test_shared_poisson_bootstrap_has_the_spread_of_resampling_items():
    rows = np.random.default_rng(5).permutation(3000)[:, None]  # every item its own row
    shared = bs.ItemResamples(items=4000, resamples=2000, seed=1)
    members = np.arange(500, 3500)  # the group's items among the report's
    point, ci = bs.bootstrap(rows, _mean_stat, resamples=2000, seed=1, shared=shared, members=members)
    assert ci is not None and point[0] == pytest.approx(rows.mean())
    # Exactly the figures of the shared weights of these items.
    weights = np.concatenate(list(shared.of(members)), axis=0)
    assert np.array_equal(ci, bs.percentile_intervals(_mean_stat(rows, weights)[:, None]))
    rng = np.random.default_rng(2)
    naive = np.array([rows[rng.integers(0, 3000, 3000), 0].mean() for _ in range(2000)])
    expected = np.percentile(naive, [2.5, 97.5])
    width = expected[1] - expected[0]
    assert ci[0] == pytest.approx(expected, abs=0.1 * width)


@pytest.mark.parametrize("seed,continuous", [(21, False), (22, True)])
def test_figures_of_a_stack_of_pair_tables_match_scipy_pair_by_pair(seed, continuous):
    rng = np.random.default_rng(seed)
    x_levels = np.sort(rng.choice(np.arange(1, 40) / (4.0 if continuous else 8.0), 9, replace=False))
    y_levels = np.arange(1.0, 6.0)
    pairs = []
    for n in [60, 7, 300, 2, 45]:
        xi = rng.integers(0, 9, n)
        pairs.append((xi, np.clip(xi // 2 + rng.integers(-1, 2, n), 0, 4)))
    tables = np.zeros((len(pairs), 9, 5))
    for k, (xi, yi) in enumerate(pairs):
        np.add.at(tables[k], (xi, yi), 1.0)
    got = st.table_figures(tables, x_levels, y_levels)
    for k, (xi, yi) in enumerate(pairs):
        x, y = x_levels[xi], y_levels[yi]
        assert got["spearman"][k] == pytest.approx(scipy_stats.spearmanr(x, y).statistic, abs=1e-12)
        assert got["pearson"][k] == pytest.approx(scipy_stats.pearsonr(x, y).statistic, abs=1e-12)
        tau = scipy_stats.kendalltau(x, y, variant="b").statistic
        assert got["kendall_tau_b"][k] == pytest.approx(tau, abs=1e-12)
        assert got["mae"][k] == pytest.approx(np.abs(x - y).mean(), abs=1e-12)
        assert got["bias"][k] == pytest.approx((x - y).mean(), abs=1e-12)
        assert got["within_one"][k] == (np.abs(x - y) <= 1.0).mean()
        assert got["n"][k] == x.shape[0]


def test_figures_of_pair_tables_are_undefined_for_a_constant_rater_or_no_items():
    tables = np.zeros((3, 2, 2))
    tables[0, 0, :] = [3, 4]  # x constant
    tables[2, :, :] = [[2, 1], [0, 3]]  # a real pair
    got = st.table_figures(tables, np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    for key in ("spearman", "pearson", "kendall_tau_b"):
        assert np.isnan(got[key][0]) and np.isnan(got[key][1]) and np.isfinite(got[key][2])
    assert got["x_levels"].tolist() == [1, 0, 2] and got["n"].tolist() == [7, 0, 6]


@pytest.mark.parametrize("seed", range(4))
def test_pair_tables_are_each_pairs_weighted_confusion_counts(seed):
    # Random ratings (-1 missing), some ordered pairs of columns, some rows left out, weights per resample:
    # every table against the counts pair by pair.
    rng = np.random.default_rng(seed)
    rows, columns, levels = 300, 6, 4
    codes = np.where(rng.random((rows, columns)) < 0.4, -1, rng.integers(0, levels, (rows, columns)))
    pairs = [(0, 1), (1, 0), (2, 5), (4, 3), (5, 0)]
    only = rng.random(rows) < 0.8
    w = rng.poisson(1.0, (7, rows)).astype(np.float32)
    ctx = cast(Context, SimpleNamespace(levels=levels, plans={}))  # all that pair_tables reads of one
    tables = pair_tables(ctx, codes, w, pairs, anchor=codes, only=only)
    assert tables.shape == (levels, levels, len(pairs), 7)
    for n, (a, b) in enumerate(pairs):
        both = (codes[:, a] >= 0) & (codes[:, b] >= 0) & only
        expected = np.zeros((levels, levels, 7))
        for r in np.flatnonzero(both):
            expected[codes[r, a], codes[r, b]] += w[:, r]
        assert np.array_equal(tables[:, :, n], expected)
    assert np.array_equal(pair_tables(ctx, codes, w, pairs, anchor=codes, only=only), tables)  # from the plan
