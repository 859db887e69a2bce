"""Agreement statistics as pure functions over NumPy arrays: no ORM, no Django.

Two layers:

- Public point functions (`krippendorff_alpha`, `cohen_kappa`, `spearman`, ...) take plain
  arrays and return a `Stat`: a value, or None with the reason it is undefined. They are what
  the tests compare with scikit-learn, SciPy and the krippendorff package.
- Weighted kernels (`w_*`) compute the same figures from *unique rows* of a code matrix and a
  matrix of row weights, shape (B, P): B weightings of P distinct rows. The point estimate is
  one weighting (each row's count); a bootstrap resample over items is another (how often
  each distinct row was drawn). `agreement.bootstrap` uses this so 1,000 resamples of 100k items cost
  about as much as 1,000 resamples of the few hundred distinct rating patterns they hold.

Multi-rater data is a 2-D array shaped (items, raters) with NaN (floats) or -1 (codes) for a
missing rating. Categories are integer codes 0..L-1 in scale order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse

ALL_IDENTICAL = "all ratings identical"


@dataclass(frozen=True)
class Stat:
    """A figure, or None and why it is undefined."""

    value: float | None
    why: str = ""

    @classmethod
    def of(cls, value: float, why: str) -> Stat:
        if value is None or not np.isfinite(value):
            return cls(None, why)
        return cls(float(value))


# --- Encoding helpers ------------------------------------------------------------------------


def encode(labels: Sequence, *, order: Sequence | None = None) -> tuple[np.ndarray, list]:
    """Labels as integer codes in `order` (labels missing from it appended, sorted); None/NaN -> -1."""
    known = list(order) if order is not None else []
    seen = {label for label in labels if not _is_missing(label)}
    extra = sorted(seen - set(known), key=str)
    levels = known + extra
    index = {label: n for n, label in enumerate(levels)}
    codes = np.array([-1 if _is_missing(label) else index[label] for label in labels], dtype=np.int64)
    return codes, levels


def _is_missing(label: object) -> bool:
    return label is None or (isinstance(label, float) and np.isnan(label))


def category_counts(codes: np.ndarray, levels: int) -> np.ndarray:
    """(items, raters) codes with -1 missing -> (items, levels) counts of each category per item."""
    codes = np.asarray(codes)
    if codes.shape[0] == 0 or levels == 0:
        return np.zeros((codes.shape[0], levels), dtype=np.float64)
    rows, cols = np.nonzero(codes >= 0)
    flat = np.bincount(rows * levels + codes[rows, cols], minlength=codes.shape[0] * levels)
    return flat.reshape(codes.shape[0], levels).astype(np.float64)


def _codes_of_matrix(data: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """A float (items, raters) matrix with NaN -> codes into its sorted unique values, and the values."""
    data = np.asarray(data, dtype=np.float64)
    present = ~np.isnan(data)
    levels = np.unique(data[present])
    codes = np.full(data.shape, -1, dtype=np.int64)
    codes[present] = np.searchsorted(levels, data[present])
    return codes, levels


def _ones(n: int) -> np.ndarray:
    return np.ones((1, n), dtype=np.float64)


def _first(values: np.ndarray) -> float:
    return float(values[0])


def grouped_sums(w: np.ndarray, groups: np.ndarray, width: int) -> np.ndarray:
    """(B, width): per weighting, the summed weights of the rows in each group (ids 0..width-1, -1: none)."""
    if groups.shape[0] == 0:
        return np.zeros((w.shape[0], width))
    member = np.nonzero(groups >= 0)[0]
    if w.shape[0] == 1:
        return np.bincount(groups[member], weights=w[0, member], minlength=width)[None, :]
    onehot = sparse.csc_array(
        (np.ones(member.shape[0], dtype=w.dtype), (groups[member], member)), shape=(width, groups.shape[0])
    )
    # (width, P) @ (P, B): contiguous when the weights are column-major, as the bootstrap draws them.
    return np.asarray(onehot @ w.T, dtype=np.float64).T


def _wsum(w: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """w @ columns in the weights' precision (float32 resamples: whole counts, summed exactly), as float64."""
    return np.asarray(w @ np.asarray(columns, dtype=w.dtype), dtype=np.float64)


def _divide(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


# --- Weighted kernels: rows (P, ...) and weights (B, P) -> (B,) ---------------------------------


def w_confusion(x: np.ndarray, y: np.ndarray, w: np.ndarray, levels: int) -> np.ndarray:
    """(B, L, L) weighted counts of (x, y) code pairs; rows where either is -1 are left out."""
    flat = grouped_sums(w, np.where((x >= 0) & (y >= 0), x * levels + y, -1), levels * levels)
    return flat.reshape(w.shape[0], levels, levels)


def kappa_from_confusion(confusion: np.ndarray, *, weights: str | None = None) -> np.ndarray:
    """Cohen's kappa for each (L, L) table in a (B, L, L) stack; NaN where chance disagreement is 0."""
    return kappa_from_tables(np.moveaxis(confusion, 0, -1), weights=weights)


def kappa_from_tables(tables: np.ndarray, *, weights: str | None = None) -> np.ndarray:
    """Cohen's kappa of (L, L, ...) tables: cells first, any batch shape after (e.g. pairs x resamples).

    With whole counts every sum is exact, so the order in which they are added does not matter.
    """
    return kappa_and_totals(tables, weights=weights)[0]


def kappa_and_totals(tables: np.ndarray, *, weights: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`kappa_from_tables` and each table's total, from the same passes over the tables."""
    levels = tables.shape[0]
    i, j = np.indices((levels, levels))
    disagreement = (i - j) ** 2.0 if weights == "quadratic" else (i != j).astype(np.float64)
    rows, cols = tables.sum(axis=1), tables.sum(axis=0)
    total = rows.sum(axis=0)
    observed_d = np.tensordot(disagreement, tables, axes=([0, 1], [0, 1]))
    # sum_ij rows_i cols_j d_ij / total, without forming the table of expected counts.
    expected_d = (np.tensordot(disagreement, cols, axes=(1, 0)) * rows).sum(axis=0) / np.where(
        total > 0, total, 1.0
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = 1.0 - observed_d / expected_d
    return np.where((expected_d > 1e-12) & (total > 0), kappa, np.nan), total


def w_alpha(counts: np.ndarray, w: np.ndarray, *, level: str, values: np.ndarray | None = None) -> np.ndarray:
    """Krippendorff's alpha from per-item category counts (P, L): coincidences, then 1 - Do/De."""
    levels = counts.shape[1]
    coincidence = _wsum(w, alpha_contributions(counts)).reshape(w.shape[0], levels, levels)
    return alpha_from_coincidence(coincidence, level=level, values=values)


def alpha_contributions(counts: np.ndarray) -> np.ndarray:
    """(P, L * L): each item's share of the coincidence matrix, o_ck = n_c (n_k - [c == k]) / (m - 1)."""
    m = counts.sum(axis=1)
    pairable = m >= 2
    scale = np.where(pairable, 1.0 / np.where(pairable, m - 1, 1.0), 0.0)
    levels = counts.shape[1]
    contrib = (counts[:, :, None] * counts[:, None, :]).reshape(-1, levels * levels)
    contrib -= (counts[:, :, None] * np.eye(levels)[None]).reshape(-1, levels * levels)
    contrib *= scale[:, None]
    return contrib


def alpha_from_coincidence(
    coincidence: np.ndarray, *, level: str, values: np.ndarray | None = None
) -> np.ndarray:
    """Krippendorff's alpha of each (L, L) coincidence matrix in a (B, L, L) stack."""
    n_c = coincidence.sum(axis=2)
    n = n_c.sum(axis=1)
    delta = _alpha_delta(n_c, level=level, values=values)
    observed = (coincidence * delta).sum(axis=(1, 2))
    expected = (n_c[:, :, None] * n_c[:, None, :] * delta).sum(axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 - (n - 1) * observed / expected
    return np.where((expected > 1e-12) & (n > 1), alpha, np.nan)


def _alpha_delta(n_c: np.ndarray, *, level: str, values: np.ndarray | None) -> np.ndarray:
    batch, levels = n_c.shape
    i, j = np.indices((levels, levels))
    if level == "nominal":
        return np.broadcast_to((i != j).astype(np.float64), (batch, levels, levels))
    if level == "interval":
        v = np.arange(levels, dtype=np.float64) if values is None else np.asarray(values, dtype=np.float64)
        return np.broadcast_to((v[:, None] - v[None, :]) ** 2, (batch, levels, levels))
    if level == "ordinal":
        cum = np.cumsum(n_c, axis=1)
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        between = cum[:, hi] - cum[:, lo] + n_c[:, lo]
        return (between - (n_c[:, i] + n_c[:, j]) / 2.0) ** 2
    raise ValueError(f"unknown level of measurement {level!r}: use nominal, ordinal or interval")


def w_pair_agreement(counts: np.ndarray, w: np.ndarray, *, exclude: int | None = None) -> tuple:
    """Pooled agreement over every pair of ratings on an item: (B,) agreeing pairs and (B,) pairs."""
    sums = _wsum(w, pair_agreement_columns(counts, exclude=exclude))
    return sums[:, 0], sums[:, 1]


def pair_agreement_columns(counts: np.ndarray, *, exclude: int | None = None) -> np.ndarray:
    """(P, 2): each item's agreeing pairs of ratings and pairs of ratings (leaving out label `exclude`)."""
    if exclude is not None:
        counts = counts.copy()
        counts[:, exclude] = 0
    m = counts.sum(axis=1)
    return np.stack([(counts * (counts - 1)).sum(axis=1) / 2.0, m * (m - 1) / 2.0], axis=1)


def w_fleiss(counts: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Fleiss' kappa from per-item counts where every item has the same number of ratings m."""
    m = counts.sum(axis=1)
    per_item = m[0]
    p_i = ((counts**2).sum(axis=1) - per_item) / (per_item * (per_item - 1))
    total = w.sum(axis=1)
    p_bar = _divide(w @ p_i, total)
    p_j = (w @ counts) / (total * per_item)[:, None]
    p_e = (p_j**2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = (p_bar - p_e) / (1.0 - p_e)
    return np.where(1.0 - p_e > 1e-12, kappa, np.nan)


def w_mean(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted mean of x over rows where it is finite."""
    present = np.isfinite(x)
    return _divide(_wsum(w, np.where(present, x, 0.0)), _wsum(w, present))


def w_moments(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, np.ndarray]:
    """Weighted count, means, variances and covariance of x and y over rows where both are finite."""
    both = np.isfinite(x) & np.isfinite(y)
    x, y = np.where(both, x, 0.0), np.where(both, y, 0.0)
    wb = w * both[None, :]
    count = wb.sum(axis=1)
    mx, my = _divide(wb @ x, count), _divide(wb @ y, count)
    return {
        "count": count,
        "mean_x": mx,
        "mean_y": my,
        "var_x": _divide(wb @ (x * x), count) - mx**2,
        "var_y": _divide(wb @ (y * y), count) - my**2,
        "cov": _divide(wb @ (x * y), count) - mx * my,
    }


def w_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    mo = w_moments(x, y, w)
    den = np.sqrt(np.clip(mo["var_x"], 0, None) * np.clip(mo["var_y"], 0, None))
    scale = np.maximum(np.abs(mo["mean_x"]), 1.0) * np.maximum(np.abs(mo["mean_y"]), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = mo["cov"] / den
    return np.where(den > 1e-12 * scale, np.clip(r, -1.0, 1.0), np.nan)


def _w_level_ranks(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each row's level, (B, L) weight of each level, (B, L) midrank of each level minus the weighted
    mean rank) of x's distinct values under each weighting (ties share the mean of their ranks)."""
    levels, index = np.unique(x, return_inverse=True)
    per_level = grouped_sums(w, index, levels.shape[0])
    midrank = np.cumsum(per_level, axis=1) - (per_level - 1.0) / 2.0
    mean = _divide((per_level * midrank).sum(axis=1), per_level.sum(axis=1))
    return index, per_level, midrank - mean[:, None]


def w_spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Spearman's rho: Pearson's r of the midranks, ranks taken under each weighting. The ranks' spreads
    come from the (B, L) sums of each distinct value; only their co-movement needs every row."""
    both = np.isfinite(x) & np.isfinite(y)
    if not both.all():
        x, y, w = x[both], y[both], w[:, both]
    if x.shape[0] == 0:
        return np.full(w.shape[0], np.nan)
    ix, wx, dx = _w_level_ranks(x, w)
    iy, wy, dy = _w_level_ranks(y, w)
    cov = (w * np.take(dx, ix, axis=1) * np.take(dy, iy, axis=1)).sum(axis=1)
    den = np.sqrt((wx * dx * dx).sum(axis=1) * (wy * dy * dy).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = cov / den
    return np.where(den > 1e-9, np.clip(r, -1.0, 1.0), np.nan)


def w_kendall_tau_b(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> float:
    """Kendall's tau-b for one weighting (counts), from the contingency table of distinct values."""
    both = np.isfinite(x) & np.isfinite(y)
    x, y, weights = x[both], y[both], np.asarray(weights, dtype=np.float64)[both]
    ux, ix = np.unique(x, return_inverse=True)
    uy, iy = np.unique(y, return_inverse=True)
    if ux.shape[0] * uy.shape[0] > 4_000_000:
        return _kendall_by_sorting(
            np.repeat(x, weights.astype(np.int64)), np.repeat(y, weights.astype(np.int64))
        )
    table = np.zeros((ux.shape[0], uy.shape[0]))
    np.add.at(table, (ix, iy), weights)
    # above[i, j] = total weight strictly greater in both x and y; below_right: greater x, smaller y.
    suffix = table[::-1, ::-1].cumsum(0).cumsum(1)[::-1, ::-1]
    above = np.zeros_like(table)
    above[:-1, :-1] = suffix[1:, 1:]
    col_suffix = table[::-1, :].cumsum(0)[::-1, :]
    greater_x = np.zeros_like(table)
    greater_x[:-1, :] = col_suffix[1:, :]
    greater_x_smaller_y = np.zeros_like(table)
    greater_x_smaller_y[:, 1:] = greater_x.cumsum(1)[:, :-1]
    concordant = (table * above).sum()
    discordant = (table * greater_x_smaller_y).sum()
    n = table.sum()
    n0 = n * (n - 1) / 2.0
    n1 = (table.sum(1) * (table.sum(1) - 1) / 2.0).sum()
    n2 = (table.sum(0) * (table.sum(0) - 1) / 2.0).sum()
    den = np.sqrt((n0 - n1) * (n0 - n2))
    return float((concordant - discordant) / den) if den > 0 else float("nan")


def table_figures(tables: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Spearman, Kendall tau-b, Pearson, within-one, MAE and bias (x minus y) of K pairs of raters at once.

    `tables` (K, V, W): how many items each pair rated (x[v], y[w]); whole counts. The same figures as
    `_numeric_from_distinct` on each table's cells: Pearson from moments, Spearman from the midranks of
    the margins, Kendall's tau-b from concordant and discordant counts (exact sums of whole counts).
    Undefined figures are NaN; "n" (items), "x_levels" and "y_levels" (distinct values given) say why.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rows, cols = tables.sum(axis=2), tables.sum(axis=1)
    n = rows.sum(axis=1)
    safe_n = np.where(n > 0, n, 1.0)
    difference = x[:, None] - y[None, :]
    out = {"n": n, "x_levels": (rows > 0).sum(axis=1), "y_levels": (cols > 0).sum(axis=1)}
    # Pearson, as w_pearson: centred by the means, on raw sums over the cells.
    mx, my = rows @ x / safe_n, cols @ y / safe_n
    var_x = rows @ (x * x) / safe_n - mx**2
    var_y = cols @ (y * y) / safe_n - my**2
    cov = np.einsum("kvw,v,w->k", tables, x, y) / safe_n - mx * my
    den = np.sqrt(np.clip(var_x, 0, None) * np.clip(var_y, 0, None))
    scale = np.maximum(np.abs(mx), 1.0) * np.maximum(np.abs(my), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["pearson"] = np.where(den > 1e-12 * scale, np.clip(cov / den, -1.0, 1.0), np.nan)
    # Spearman, as w_spearman: each value's midrank among the pair's items, then Pearson of the ranks.
    rank_x = np.cumsum(rows, axis=1) - (rows - 1.0) / 2.0
    rank_y = np.cumsum(cols, axis=1) - (cols - 1.0) / 2.0
    dx = rank_x - ((rows * rank_x).sum(axis=1) / safe_n)[:, None]
    dy = rank_y - ((cols * rank_y).sum(axis=1) / safe_n)[:, None]
    cov = np.einsum("kvw,kv,kw->k", tables, dx, dy)
    den = np.sqrt((rows * dx * dx).sum(axis=1) * (cols * dy * dy).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        out["spearman"] = np.where(den > 1e-9, np.clip(cov / den, -1.0, 1.0), np.nan)
    out["kendall_tau_b"] = _table_kendall(tables, rows, cols, n)
    out["within_one"] = (tables * (np.abs(difference) <= 1.0 + 1e-9)).sum(axis=(1, 2)) / safe_n
    out["mae"] = (tables * np.abs(difference)).sum(axis=(1, 2)) / safe_n
    out["bias"] = (tables * difference).sum(axis=(1, 2)) / safe_n
    return out


def _table_kendall(tables: np.ndarray, rows: np.ndarray, cols: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of (K, V, W) tables with values in increasing order, as w_kendall_tau_b."""
    # above[k, i, j]: items strictly greater in both values; greater x and smaller y below it.
    suffix = tables[:, ::-1, ::-1].cumsum(axis=1).cumsum(axis=2)[:, ::-1, ::-1]
    above = np.zeros_like(tables)
    above[:, :-1, :-1] = suffix[:, 1:, 1:]
    col_suffix = tables[:, ::-1, :].cumsum(axis=1)[:, ::-1, :]
    greater_x = np.zeros_like(tables)
    greater_x[:, :-1, :] = col_suffix[:, 1:, :]
    greater_x_smaller_y = np.zeros_like(tables)
    greater_x_smaller_y[:, :, 1:] = greater_x.cumsum(axis=2)[:, :, :-1]
    concordant = (tables * above).sum(axis=(1, 2))
    discordant = (tables * greater_x_smaller_y).sum(axis=(1, 2))
    n0 = n * (n - 1) / 2.0
    n1 = (rows * (rows - 1) / 2.0).sum(axis=1)
    n2 = (cols * (cols - 1) / 2.0).sum(axis=1)
    den = np.sqrt((n0 - n1) * (n0 - n2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, (concordant - discordant) / np.where(den > 0, den, 1.0), np.nan)


def _kendall_by_sorting(x: np.ndarray, y: np.ndarray) -> float:
    # Only for two near-continuous raters, where the contingency table would be too large.
    from scipy.stats import kendalltau

    return float(kendalltau(x, y, variant="b").statistic)


# --- Public point functions ------------------------------------------------------------------


def krippendorff_alpha(data: ArrayLike, *, level: str = "nominal") -> Stat:
    """Krippendorff's alpha of an (items, raters) float matrix with NaN for missing ratings."""
    codes, values = _codes_of_matrix(data)
    counts = category_counts(codes, values.shape[0])
    if (counts.sum(axis=1) >= 2).sum() == 0:
        return Stat(None, "no item has two or more ratings: alpha undefined")
    if values.shape[0] < 2:
        return Stat(None, f"{ALL_IDENTICAL}: alpha undefined")
    value = w_alpha(counts, _ones(counts.shape[0]), level=level, values=values)
    return Stat.of(_first(value), f"{ALL_IDENTICAL}: alpha undefined")


def percent_agreement(data: ArrayLike, *, exclude: float | None = None) -> Stat:
    """Share of agreeing pairs among every pair of raters that rated the same item (pooled).

    With `exclude` (e.g. the tie label), pairs where either side gave it are dropped first:
    MT-Bench's agreement without ties (S2). Without it, agreement with ties (S1).
    """
    codes, values = _codes_of_matrix(data)
    counts = category_counts(codes, values.shape[0])
    drop = None
    if exclude is not None and exclude in values:
        drop = int(np.searchsorted(values, exclude))
    agree, pairs = w_pair_agreement(counts, _ones(counts.shape[0]), exclude=drop)
    if pairs[0] == 0:
        return Stat(
            None, "no item has two ratings to compare" + (" without ties" if exclude is not None else "")
        )
    return Stat(float(agree[0] / pairs[0]))


def fleiss_kappa(data: ArrayLike) -> Stat:
    """Fleiss' kappa over items with ratings, defined only if all of them have the same number of raters."""
    codes, values = _codes_of_matrix(data)
    counts = category_counts(codes, values.shape[0])
    counts = counts[counts.sum(axis=1) > 0]
    return fleiss_from_counts(counts)


def fleiss_from_counts(counts: np.ndarray) -> Stat:
    m = counts.sum(axis=1)
    if m.shape[0] == 0:
        return Stat(None, "no ratings: Fleiss' kappa undefined")
    if m.min() != m.max():
        return Stat(
            None, f"items have {int(m.min())} to {int(m.max())} raters: Fleiss' kappa needs the same number"
        )
    if m[0] < 2:
        return Stat(None, "one rating per item: Fleiss' kappa undefined")
    value = w_fleiss(counts, _ones(counts.shape[0]))
    return Stat.of(_first(value), f"{ALL_IDENTICAL}: Fleiss' kappa undefined")


def _paired_codes(
    a: Iterable[Any], b: Iterable[Any], labels: Sequence[Any] | None
) -> tuple[np.ndarray, np.ndarray, int]:
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"the two raters have {len(a)} and {len(b)} ratings: they must be paired")
    keep = [n for n in range(len(a)) if not (_is_missing(a[n]) or _is_missing(b[n]))]
    a, b = [a[n] for n in keep], [b[n] for n in keep]
    order = list(labels) if labels is not None else sorted(set(a) | set(b), key=_sort_key)
    _, levels = encode(a + b, order=order)
    index = {label: n for n, label in enumerate(levels)}
    return (
        np.array([index[v] for v in a], dtype=np.int64),
        np.array([index[v] for v in b], dtype=np.int64),
        len(levels),
    )


def _sort_key(label: Any) -> tuple[int, Any, str]:
    return (0, label, "") if isinstance(label, int | float) else (1, 0, str(label))


def cohen_kappa(
    a: Iterable[Any], b: Iterable[Any], *, labels: Sequence[Any] | None = None, weights: str | None = None
) -> Stat:
    """Cohen's kappa of two raters' paired labels; weights=None or "quadratic" (on label positions)."""
    x, y, levels = _paired_codes(a, b, labels)
    if x.shape[0] == 0:
        return Stat(None, "no items rated by both: kappa undefined")
    value = kappa_from_confusion(w_confusion(x, y, _ones(x.shape[0]), levels), weights=weights)
    return Stat.of(_first(value), f"{ALL_IDENTICAL}: kappa undefined")


def _floats(x: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"the two raters have {x.shape[0]} and {y.shape[0]} ratings: they must be paired")
    both = np.isfinite(x) & np.isfinite(y)
    return x[both], y[both]


def _correlation(name: str, kernel: Callable[..., np.ndarray], x: ArrayLike, y: ArrayLike) -> Stat:
    x, y = _floats(x, y)
    if x.shape[0] < 2:
        return Stat(None, f"fewer than two items rated by both: {name} undefined")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return Stat(None, f"{ALL_IDENTICAL} for one rater: {name} undefined")
    ux, uy, counts = distinct_pairs(x, y)
    return Stat.of(_first(kernel(ux, uy, counts[None, :])), f"{name} undefined")


def numeric_figures(x: ArrayLike, y: ArrayLike) -> dict[str, Stat]:
    """Spearman, Kendall tau-b, Pearson, within-one, MAE and bias of paired numbers, x minus y for bias.

    The same as calling each function, but the pairs are reduced to distinct (x, y) values once.
    """
    x, y = _floats(x, y)
    if x.shape[0] == 0:
        return _numeric_from_distinct(x, y, np.zeros(0))
    return _numeric_from_distinct(*distinct_pairs(x, y))


def numeric_figures_from_codes(
    a: np.ndarray, a_levels: np.ndarray, b: np.ndarray, b_levels: np.ndarray
) -> dict[str, Stat]:
    """numeric_figures of a_levels[a] and b_levels[b], counting distinct code pairs with one bincount."""
    size_a, size_b = a_levels.shape[0], b_levels.shape[0]
    if a.shape[0] == 0 or size_a * size_b > 1_000_000:
        return numeric_figures(a_levels[a], b_levels[b])
    counts = np.bincount(a * size_b + b, minlength=size_a * size_b).astype(np.float64)
    cells = np.nonzero(counts)[0]
    return _numeric_from_distinct(a_levels[cells // size_b], b_levels[cells % size_b], counts[cells])


def _numeric_from_distinct(ux: np.ndarray, uy: np.ndarray, counts: np.ndarray) -> dict[str, Stat]:
    names = {"spearman": "Spearman's rho", "kendall_tau_b": "Kendall's tau-b", "pearson": "Pearson's r"}
    n = counts.sum()
    if n == 0:
        empty = "no items rated by both"
        out = {key: Stat(None, f"{empty}: {name} undefined") for key, name in names.items()}
        return out | {key: Stat(None, f"{empty}: {key} undefined") for key in ("within_one", "mae", "bias")}
    w = counts[None, :]
    out = {}
    for key, name in names.items():
        if n < 2:
            out[key] = Stat(None, f"fewer than two items rated by both: {name} undefined")
        elif np.ptp(ux) == 0 or np.ptp(uy) == 0:
            out[key] = Stat(None, f"{ALL_IDENTICAL} for one rater: {name} undefined")
        elif key == "kendall_tau_b":
            out[key] = Stat.of(w_kendall_tau_b(ux, uy, counts), f"{name} undefined")
        else:
            kernel = w_spearman if key == "spearman" else w_pearson
            out[key] = Stat.of(_first(kernel(ux, uy, w)), f"{name} undefined")
    difference = ux - uy
    out["within_one"] = Stat(_first(w_mean((np.abs(difference) <= 1.0 + 1e-9).astype(np.float64), w)))
    out["mae"] = Stat(_first(w_mean(np.abs(difference), w)))
    out["bias"] = Stat(_first(w_mean(difference, w)))
    return out


def distinct_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (x, y) pairs and their counts: every weighted kernel gives the same answer on them."""
    lx, ix = np.unique(x, return_inverse=True)
    ly, iy = np.unique(y, return_inverse=True)
    pairs, counts = unique_rows(np.stack([ix, iy], axis=1))
    return lx[pairs[:, 0]], ly[pairs[:, 1]], counts.astype(np.float64)


def pearson(x: ArrayLike, y: ArrayLike) -> Stat:
    return _correlation("Pearson's r", w_pearson, x, y)


def spearman(x: ArrayLike, y: ArrayLike) -> Stat:
    return _correlation("Spearman's rho", w_spearman, x, y)


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> Stat:
    return _correlation("Kendall's tau-b", lambda a, b, w: np.array([w_kendall_tau_b(a, b, w[0])]), x, y)


def _mean_of(name: str, values: np.ndarray) -> Stat:
    if values.shape[0] == 0:
        return Stat(None, f"no items rated by both: {name} undefined")
    return Stat(float(values.mean()))


def mean_absolute_error(x: ArrayLike, y: ArrayLike) -> Stat:
    x, y = _floats(x, y)
    return _mean_of("mean absolute error", np.abs(x - y))


def bias(x: ArrayLike, y: ArrayLike) -> Stat:
    """Mean of x minus mean of y over paired ratings (model minus people when x is the model)."""
    x, y = _floats(x, y)
    return _mean_of("bias", x - y)


def within_one(x: ArrayLike, y: ArrayLike) -> Stat:
    x, y = _floats(x, y)
    return _mean_of("within-one agreement", (np.abs(x - y) <= 1.0 + 1e-9).astype(np.float64))


def accuracy(predicted: Iterable[Any], truth: Iterable[Any]) -> Stat:
    x, y, _ = _paired_codes(predicted, truth, None)
    return _mean_of("accuracy", (x == y).astype(np.float64))


def f1_from_confusion(confusion: np.ndarray) -> np.ndarray:
    """(B, L) F1 of each label from (B, L, L) tables of (predicted, truth); NaN for a label never used."""
    tp = np.diagonal(confusion, axis1=1, axis2=2)
    predicted, truth = confusion.sum(axis=2), confusion.sum(axis=1)
    return _divide(2.0 * tp, predicted + truth)


def f1_per_label(
    predicted: Iterable[Any], truth: Iterable[Any], *, labels: Sequence[Any] | None = None
) -> dict[Any, Stat]:
    """{label: Stat} F1 of each label, with `predicted` as the model and `truth` as the people."""
    x, y, levels = _paired_codes(predicted, truth, labels)
    order = list(labels) if labels is not None else sorted(set(predicted) | set(truth), key=_sort_key)
    f1 = f1_from_confusion(w_confusion(x, y, _ones(x.shape[0]), levels))[0]
    return {
        label: Stat.of(f1[n], f"label {label!r} never given by either: F1 undefined")
        for n, label in enumerate(order)
    }


def unique_ids(ids: np.ndarray, *, return_inverse: bool = False) -> Any:
    """np.unique of integer ids (database keys), and each one's index if asked: the same arrays, from a
    table over the ids' range when it is at most 4x their count instead of a sort (the 100k items of
    500k ratings: ~5 instead of ~60 ms)."""
    ids = np.asarray(ids, dtype=np.int64)
    low = int(ids.min()) if ids.shape[0] else 0
    span = int(ids.max()) - low + 1 if ids.shape[0] else 0
    if not 0 < span <= 4 * ids.shape[0]:
        return np.unique(ids, return_inverse=True) if return_inverse else np.unique(ids)
    present, _, inverse = _by_table(ids - low, span, return_inverse=return_inverse)
    return (present + low, inverse) if return_inverse else present + low


def unique_rows(rows: np.ndarray, *, return_inverse: bool = False) -> tuple:
    """Distinct rows of an integer matrix and how often each occurs (and each row's index, if asked), in
    lexicographic order: np.unique(rows, axis=0)'s arrays.

    Packs each row into one int64 (mixed radix over each column's range), renumbering the distinct
    keys whenever the next column would overflow it: far faster than sorting rows as records. When the
    keys span at most 4x the rows, a table over their range finds them without sorting (the pattern,
    flag and code rows of a report's 100k items: ~3 instead of ~18 ms).
    """
    rows = np.asarray(rows, dtype=np.int64)
    n = rows.shape[0]
    if rows.shape[1] == 0 or n == 0:
        result = (rows[:1], np.array([n] if n else [], dtype=np.int64), np.zeros(n, dtype=np.int64))
        return result if return_inverse else result[:2]
    packed = _packed_rows(rows)
    low = int(packed.min())
    span = int(packed.max()) - low + 1
    if span <= 4 * n:
        key = packed - low
        present, counts, inverse = _by_table(key, span, return_inverse=return_inverse)
        at = np.empty(span, dtype=np.intp)
        at[key] = np.arange(n)  # some row with each key: they are all the same row
        unique = rows[at[present]]
    else:
        _, first, inverse, counts = np.unique(
            packed, return_index=True, return_inverse=True, return_counts=True
        )
        unique = rows[first]
    return (unique, counts, inverse) if return_inverse else (unique, counts)


def _by_table(key: np.ndarray, span: int, *, return_inverse: bool) -> tuple:
    """(the distinct keys, how often each occurs, each key's index among them or None) of keys in
    [0, span), from a table over that range: np.unique's arrays without a sort."""
    seen = np.bincount(key, minlength=span)
    present = np.flatnonzero(seen)
    inverse = (np.cumsum(seen > 0) - 1)[key] if return_inverse else None
    return present, seen[present], inverse


def _packed_rows(rows: np.ndarray) -> np.ndarray:
    """One int64 per row, in the rows' lexicographic order: mixed radix over each column's range, the columns
    that fit in one int64 packed by one integer product with their place values (a column at a time took
    2.5x as long for 20 columns), the keys so far renumbered 0..k-1 whenever the next column would not fit."""
    lows, highs = rows.min(axis=0), rows.max(axis=0)
    spans = (highs - lows + 1).tolist()
    key = np.zeros(rows.shape[0], dtype=np.int64)
    key_span = 1
    start = 0
    while start < rows.shape[1]:
        if key_span * spans[start] >= 2**62:
            _, key = np.unique(key, return_inverse=True)
            key_span = int(key.max()) + 1
        end, block = start, 1
        while end < rows.shape[1] and (end == start or key_span * block * spans[end] < 2**62):
            block *= spans[end]
            end += 1
        places = np.ones(end - start, dtype=np.int64)  # the last column of the block counts ones
        for column in range(end - start - 2, -1, -1):
            places[column] = places[column + 1] * spans[start + column + 1]
        key = key * block + (rows[:, start:end] - lows[start:end]) @ places
        key_span *= block
        start = end
    return key
