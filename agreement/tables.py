"""One rubric's ratings as an (items, raters) matrix, and the figures of one rater against another."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, wraps

import numpy as np
from scipy import sparse

from agreement import bootstrap as bs
from agreement import statistics as st
from agreement.reading import RubricRatings

PAIRWISE_TIE = "SAME"


@dataclass
class Matrix:
    """Ratings of one rubric as an (items, raters) matrix: numeric values and category codes."""

    item_ids: np.ndarray
    rater_ids: list[int]
    values: np.ndarray  # float, NaN where missing (likert numbers, or category codes)
    codes: np.ndarray  # int category code (likert: nearest scale point), -1 where missing
    levels: np.ndarray  # the distinct values, sorted
    value_codes: np.ndarray  # int index into levels, -1 where missing
    categories: np.ndarray  # each level's category code, then -1 (what value code -1 looks up)


@dataclass(frozen=True)
class Columns:
    """Ratings column by column: (columns, rows) arrays, one contiguous row per column, so that gathering
    many rows of one column reads them nearly in order."""

    rated_rows: list[np.ndarray]  # for each column, the rows it rated, ascending
    rated: np.ndarray  # (columns, rows) bool
    codes: np.ndarray  # (columns, rows) category codes, -1 where missing
    value_codes: np.ndarray  # (columns, rows) value codes, -1 where missing
    weights: np.ndarray | None = None  # (rows,) how many items each row stands for; None: one each


@dataclass(frozen=True)
class Patterns:
    """The distinct rows of the people's value codes (`Context.patterns`)."""

    of_item: np.ndarray  # (items,) each item's pattern
    value_codes: np.ndarray  # (patterns, people) -1 where the person did not rate
    codes: np.ndarray  # (patterns, people) category codes, -1 where the person did not rate


def to_matrix(data: RubricRatings, rater_ids: list[int]) -> Matrix:
    usable = data.value_codes >= 0  # the finite values
    item_ids, rows = st.unique_ids(data.item_ids[usable], return_inverse=True)
    order = np.argsort(np.array(rater_ids, dtype=np.int64))
    ordered = np.array(rater_ids, dtype=np.int64)[order]
    cols = order[np.searchsorted(ordered, data.rater_ids[usable])]
    values = np.full((item_ids.shape[0], len(rater_ids)), np.nan)
    values[rows, cols] = data.values[usable]
    # The distinct values given (the reading placed each rating among them, once per distinct text), less
    # any that only_items left without a rating.
    given = data.value_codes[usable]
    seen = np.bincount(given, minlength=data.levels.shape[0]) > 0
    levels = data.levels[seen]
    value_codes = np.full(values.shape, -1, dtype=np.int64)
    value_codes[rows, cols] = given if seen.all() else (np.cumsum(seen) - 1)[given]
    # A value's category depends on the value alone: work it out once per distinct value (the table's last
    # entry is what a missing rating, value code -1, looks up).
    categories = np.append(category_codes(levels, data), -1)
    codes = np.take(categories, value_codes)
    return Matrix(item_ids, rater_ids, values, codes, levels, value_codes, categories)


def category_codes(values: np.ndarray, data: RubricRatings) -> np.ndarray:
    """Category code of each value: the label itself, or for likert the nearest scale point (half up)."""
    codes = np.full(values.shape, -1, dtype=np.int64)
    present = np.isfinite(values)
    if not data.is_likert:
        codes[present] = values[present].astype(np.int64)
        return codes
    points = data.label_values
    if points.shape[0] == 0:
        return codes
    if points.shape[0] == 1:
        codes[present] = 0
        return codes
    v = values[present]
    upper = np.clip(np.searchsorted(points, v, side="left"), 1, points.shape[0] - 1)
    # The nearer of the two neighbouring points; exactly half-way goes to the higher one.
    codes[present] = np.where(v - points[upper - 1] >= points[upper] - v, upper, upper - 1)
    return codes


def distribution(codes: np.ndarray, levels: int) -> list[int]:
    """How many ratings fell on each label (likert: nearest scale point)."""
    flat = codes[codes >= 0]
    return np.bincount(flat, minlength=levels).astype(int).tolist() if levels else []


def computed_once[T](method: Callable[[Context], T]) -> cached_property[T]:
    """A cached_property that the report's threads compute once: the first to ask works it out while the
    others wait for it (functools.cached_property has no lock since Python 3.12: two threads asking
    together each computed it, and each kept its own copy, e.g. of the shared resamples)."""
    name = method.__name__

    @wraps(method)
    def compute(self: Context) -> T:
        with self.locks.setdefault(name, threading.Lock()):
            if name not in self.__dict__:  # the thread that held the lock stored it
                self.__dict__[name] = method(self)
            return self.__dict__[name]

    return cached_property(compute)


@dataclass
class Context:
    """One rubric's matrix and what the report's figures share. The people are the matrix's first
    columns (`human_cols` is 0..k-1), so `people` selects them as a view, without a copy."""

    data: RubricRatings
    matrix: Matrix
    human_cols: list[int]
    resamples: int
    seed: int
    plans: dict = field(default_factory=dict)
    locks: dict[str, threading.Lock] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.human_cols != list(range(len(self.human_cols))):
            raise ValueError("the people must be the matrix's first columns")

    @property
    def people(self) -> slice:
        """The people's columns of the matrix (a slice: indexing with it gives a view)."""
        return slice(0, len(self.human_cols))

    @computed_once
    def people_rated(self) -> np.ndarray:
        """(items,) how many people rated each item."""
        return np.count_nonzero(self.rated_by_column[self.people], axis=0)

    @property
    def levels(self) -> int:
        return len(self.data.labels)

    @property
    def kappa_weights(self) -> str | None:
        return "quadratic" if self.data.is_likert else None

    @property
    def tie(self) -> int | None:
        if self.data.kind == "pairwise" and PAIRWISE_TIE in self.data.labels:
            return self.data.labels.index(PAIRWISE_TIE)
        return None

    @computed_once
    def patterns(self) -> Patterns:
        """The distinct patterns of the people's ratings (each person's value code, -1 where missing) and each
        item's, numbered in the patterns' lexicographic order: a bootstrap row names its items' pattern
        instead of carrying every person's codes (with 20 people, 40 columns), in the same order."""
        value_codes, _, of_item = st.unique_rows(self.matrix.value_codes[:, self.people], return_inverse=True)
        return Patterns(of_item=of_item, value_codes=value_codes, codes=self.matrix.categories[value_codes])

    @computed_once
    def pattern_reference(self) -> tuple[np.ndarray, np.ndarray]:
        """Each pattern's people's majority code (categorical, pairwise) or mean (likert), and its category
        code (-1 without one)."""
        patterns = self.patterns
        if self.data.is_likert:
            mean = row_means(self.numbers(patterns.value_codes))
            return mean, category_codes(mean[:, None], self.data)[:, 0]
        majority = majority_codes(st.category_counts(patterns.codes, self.levels))
        return majority.astype(np.float64), majority

    def numbers(self, value_codes: np.ndarray) -> np.ndarray:
        return decode_values(value_codes, self.value_levels)

    @computed_once
    def reference(self) -> tuple[np.ndarray, np.ndarray]:
        """The people's majority (or mean) on each item and its category code, shared by every model."""
        values, codes = self.pattern_reference
        return values[self.patterns.of_item], codes[self.patterns.of_item]

    @computed_once
    def reference_levels(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct values of the people's reference (`reference`) and each item's index into them."""
        levels, codes = np.unique(self.pattern_reference[0], return_inverse=True)
        return levels, codes.reshape(-1)[self.patterns.of_item]

    @computed_once
    def people_counts(self) -> np.ndarray:
        """(items, labels) how many people gave each label (likert: scale point) on each item."""
        return st.category_counts(self.patterns.codes, self.levels)[self.patterns.of_item]

    @computed_once
    def value_levels(self) -> np.ndarray:
        return self.matrix.levels

    @computed_once
    def human_codes(self) -> np.ndarray:
        return self.matrix.codes[:, self.people]

    @computed_once
    def rated_rows(self) -> list[np.ndarray]:
        """For each rater (column), the rows (items) it rated, in order."""
        return [np.flatnonzero(rated) for rated in self.rated_by_column]

    @computed_once
    def rated_by_column(self) -> np.ndarray:
        """(columns, items) bool: whether each rater rated each item, one contiguous row per rater."""
        return np.ascontiguousarray(np.isfinite(self.matrix.values).T)

    @computed_once
    def columns(self) -> Columns:
        """The matrix column by column, one row per item (what `pairs_of_columns` reads)."""
        return Columns(
            rated_rows=self.rated_rows,
            rated=self.rated_by_column,
            codes=np.ascontiguousarray(self.matrix.codes.T),
            value_codes=np.ascontiguousarray(self.matrix.value_codes.T),
        )

    @computed_once
    def pattern_columns(self) -> Columns:
        """The people's columns over their patterns, each row standing for the items with that pattern:
        the people's pairs read a third as many rows (or fewer) as over the items."""
        patterns = self.patterns
        rated = np.ascontiguousarray(patterns.value_codes.T >= 0)
        return Columns(
            rated_rows=[np.flatnonzero(row) for row in rated],
            rated=rated,
            codes=np.ascontiguousarray(patterns.codes.T),
            value_codes=np.ascontiguousarray(patterns.value_codes.T),
            weights=np.bincount(patterns.of_item, minlength=patterns.codes.shape[0]).astype(np.float64),
        )

    @computed_once
    def values_given(self) -> np.ndarray:
        """(columns, value levels) bool: which of the distinct values each rater (column) gave."""
        codes = self.matrix.value_codes
        out = np.zeros((codes.shape[1], self.value_levels.shape[0]), dtype=bool)
        for col, rows in enumerate(self.rated_rows):
            out[col, codes[rows, col]] = True
        return out

    @computed_once
    def resampler(self) -> bs.ItemResamples:
        """The bootstrap weights of the matrix's items, shared by every figure group drawn by items."""
        return bs.ItemResamples(items=self.matrix.values.shape[0], resamples=self.resamples, seed=self.seed)


def decode_values(value_codes: np.ndarray, levels: np.ndarray) -> np.ndarray:
    out = np.full(value_codes.shape, np.nan)
    present = value_codes >= 0
    out[present] = levels[value_codes[present]]
    return out


def figure(value: float, why: str) -> tuple[float | None, str]:
    stat = st.Stat.of(value, why)
    return stat.value, stat.why


def interval(ci: np.ndarray | None, k: int) -> list[float] | None:
    if ci is None or not np.all(np.isfinite(ci[k])):
        return None
    return [round(float(ci[k][0]), 6), round(float(ci[k][1]), 6)]


def pair_tables(
    ctx: Context,
    codes: np.ndarray,
    w: np.ndarray,
    pairs: list[tuple[int, int]],
    *,
    anchor: object = None,
    only: np.ndarray | None = None,
) -> np.ndarray:
    """(L, L, pairs, B) confusion table of each pair of columns under each weighting of the rows.

    Every table comes from one sparse product: a 0/1 matrix of (cell, pair) by row, built once per set
    of rows (`anchor`, the array the bootstrap passes to every chunk), times the weights. `only` (bool
    per row) leaves the other rows out.
    """
    cells = pair_cells(ctx, codes, pairs, anchor, only)
    # (L * L * pairs, P) @ (P, B), column by column: each row's weights (contiguous, the transpose of the
    # bootstrap's F-ordered ones) are read once, in order, and added into the small table of sums, which
    # comes out in the tables' own layout (the kappas read it ~40% faster than a transposed view).
    return np.asarray(cells @ w.T, dtype=np.float64).reshape(ctx.levels, ctx.levels, len(pairs), w.shape[0])


def mean_kappa(ctx: Context, tables: np.ndarray) -> np.ndarray:
    """(B,) mean of the pairs' kappas in (L, L, pairs, B) tables, weighted by each pair's items."""
    sums = PairSums()
    sums.add(tables, ctx.kappa_weights)
    return sums.mean_kappa


def pooled_agreement(tables: np.ndarray) -> np.ndarray:
    """(B,) share of agreeing pairs of ratings over every pair's (L, L, pairs, B) table: their diagonals
    over their totals (NaN without pairs)."""
    sums = PairSums()
    sums.add(tables)
    return sums.pooled_agreement


# The tables of one block of pairs (float64, every resample of a chunk) held at once. The kappas' passes
# make about three arrays of that size, and each of the report's figure groups' threads (report.
# GROUP_THREADS) may be in one: 3 x 3 x 16 MB, about 0.15 GB, however many pairs of people there are
# (issue 34: 419 people on 12 items asked for one array of 2.4M tables x 1,000 resamples, 9 GB).
TABLE_BLOCK_BYTES = 16_000_000


def pair_blocks[T](ctx: Context, pairs: list[T], resamples: int) -> list[list[T]]:
    """`pairs` in consecutive blocks whose (L, L, block, resamples) tables fit in TABLE_BLOCK_BYTES (one
    block, possibly empty, when they all do)."""
    step = max(1, TABLE_BLOCK_BYTES // max(1, ctx.levels * ctx.levels * resamples * 8))
    return [pairs[start : start + step] for start in range(0, len(pairs), step)] or [pairs]


@dataclass
class PairSums:
    """What mean_kappa and pooled_agreement sum over the pairs of (L, L, pairs, B) tables, added a block of
    pairs at a time. Each pair's kappa and counts do not depend on the other pairs (the counts are whole
    numbers: exact), and the sums over pairs are taken in order, as NumPy sums an array over its first axis,
    row after row: blocks give the same bits as every pair in one array."""

    # (B,) sums over the pairs so far (with one resample, their terms: see `_in_order`)
    kappa_items: np.ndarray | None = None  # kappa x items of the pairs with a kappa
    items: np.ndarray | None = None  # their items
    agreeing: np.ndarray | None = None  # the tables' diagonals
    total: np.ndarray | None = None  # every pair of ratings

    def add(self, tables: np.ndarray, kappa_weights: str | None | bool = False) -> None:
        """Add a block's tables; `kappa_weights` (None or "quadratic") sums their kappas too (False: not)."""
        if kappa_weights is not False:
            kappa, items = st.kappa_and_totals(tables, weights=kappa_weights)  # type: ignore[arg-type]
            ok = np.isfinite(kappa)
            self.kappa_items = _in_order(self.kappa_items, np.where(ok, kappa * items, 0.0))
            self.items = _in_order(self.items, np.where(ok, items, 0.0))
        self.agreeing = _in_order(self.agreeing, np.trace(tables, axis1=0, axis2=1))
        self.total = _in_order(self.total, tables.sum(axis=(0, 1)))

    @property
    def mean_kappa(self) -> np.ndarray:
        assert self.kappa_items is not None and self.items is not None, "no tables added with kappas"
        return st._divide(_summed(self.kappa_items), _summed(self.items))

    @property
    def pooled_agreement(self) -> np.ndarray:
        assert self.agreeing is not None and self.total is not None, "no tables added"
        return st._divide(_summed(self.agreeing), _summed(self.total))


def _in_order(before: np.ndarray | None, terms: np.ndarray) -> np.ndarray:
    """`terms` (pairs, B) summed over the pairs and added to the sum of the pairs before them, as the sum
    of one array of both: (((before + t0) + t1) + ...), the order NumPy adds an array's rows in."""
    if terms.shape[1] == 1:
        # One resample (a point estimate): NumPy sums a lone column pairwise, not row by row. Its terms are
        # kept (8 bytes a pair) and summed as one column at the end (`_summed`).
        return terms if before is None else np.concatenate([before, terms])
    if before is None:
        return terms.sum(axis=0)
    return np.concatenate([before[None], terms]).sum(axis=0)


def _summed(sums: np.ndarray) -> np.ndarray:
    """The (B,) sums of `_in_order`, from the kept column of terms when there is one resample."""
    return sums.sum(axis=0) if sums.ndim == 2 else sums


def pair_sums(
    ctx: Context,
    codes: np.ndarray,
    w: np.ndarray,
    pairs: list[tuple[int, int]],
    *,
    anchor: object,
    only: np.ndarray | None = None,
    kappa: bool = True,
) -> PairSums:
    """PairSums of `pair_tables` of these pairs, built a block of pairs at a time (`pair_blocks`)."""
    sums = PairSums()
    for block in pair_blocks(ctx, pairs, w.shape[0]):
        tables = pair_tables(ctx, codes, w, block, anchor=anchor, only=only)
        sums.add(tables, ctx.kappa_weights if kappa else False)
    return sums


def people_pair_tables(ctx: Context) -> np.ndarray:
    """(L, L, pairs of people, B) tables over every item in the current chunk of the shared resamples.

    The people's figures and each model's verdict take them from here instead of each summing them:
    a group over some of the items subtracts the tables of the items it leaves out.
    """
    key = ("people tables", ctx.resampler.chunk)
    if key not in ctx.plans:
        w = ctx.resampler.weights(None)
        tables = pair_tables(ctx, ctx.human_codes, w, people_pairs(ctx), anchor=ctx.human_codes)
        ctx.plans[key] = tables.astype(np.float32)
    return np.asarray(ctx.plans[key], dtype=np.float64)


def people_pairs(ctx: Context) -> list[tuple[int, int]]:
    return list(itertools.combinations(range(len(ctx.human_cols)), 2))


def shares_people_tables(ctx: Context) -> bool:
    """Inside a chunk of the shared resamples, when every chunk's people_pair_tables fit in 64 MB
    (whole counts as float32: exact)."""
    size = len(people_pairs(ctx)) * ctx.levels * ctx.levels * ctx.resamples * 4
    return ctx.resampler.chunk is not None and len(ctx.human_cols) >= 2 and size <= 64_000_000


def pair_cells(
    ctx: Context,
    codes: np.ndarray,
    pairs: list[tuple[int, int]],
    anchor: object,
    only: np.ndarray | None = None,
) -> sparse.csc_array:
    """(L x L x pairs, rows) 0/1: which (confusion cell, pair) each row counts in, for the rows both rated."""
    key = (id(anchor), tuple(pairs), id(only)) if anchor is not None else None
    if key is not None and key in ctx.plans and ctx.plans[key][0] is anchor:
        return ctx.plans[key][1]
    size = ctx.levels * ctx.levels
    if not pairs:
        return sparse.csc_array((0, codes.shape[0]), dtype=np.float32)
    rated = codes >= 0 if only is None else (codes >= 0) & only[:, None]
    by_column = [np.nonzero(rated[:, c])[0] for c in range(codes.shape[1])]
    targets, sources = [], []
    for n, (a, b) in enumerate(pairs):
        shared = by_column[a][rated[by_column[a], b]]
        targets.append((codes[shared, a] * ctx.levels + codes[shared, b]) * len(pairs) + n)
        sources.append(shared)
    rows, cols = np.concatenate(targets), np.concatenate(sources)
    cells = sparse.csc_array(
        (np.ones(rows.shape[0], dtype=np.float32), (rows, cols)), shape=(len(pairs) * size, codes.shape[0])
    )
    if key is not None:
        ctx.plans[key] = (anchor, cells)
    return cells


def two_raters(
    ctx: Context,
    ca: np.ndarray,
    cb: np.ndarray,
    va: np.ndarray,
    vb: np.ndarray,
    *,
    value_codes: tuple[np.ndarray, np.ndarray | None] | None = None,
) -> dict:
    """Figures of one rater against another on shared items (codes and numbers, no missing).

    `value_codes` (index of each number in ctx.value_levels; None for a side that is not a
    rater's own values, such as the people's mean) saves looking the numbers up again.
    """
    out: dict = {"why": {}}
    stats = {
        "percent_agreement": st.Stat(float((ca == cb).mean()))
        if ca.shape[0]
        else st.Stat(None, "no shared items"),
        "cohen_kappa": kappa_of(ctx, ca, cb),
    }
    if ctx.data.is_likert:
        a_codes, b_codes = value_codes or (None, None)
        a = (a_codes, ctx.value_levels) if a_codes is not None else level_codes(ctx, va)
        b = (b_codes, ctx.value_levels) if b_codes is not None else level_codes(ctx, vb)
        stats.update(st.numeric_figures_from_codes(*a, *b))
    elif ctx.data.kind == "categorical":
        f1 = st.f1_from_confusion(st.w_confusion(ca, cb, st._ones(ca.shape[0]), ctx.levels))[0]
        for n, label in enumerate(ctx.data.labels):
            stats[f"f1_{label}"] = st.Stat.of(f1[n], f"label {label!r} never given by either: F1 undefined")
        stats["accuracy"] = stats["percent_agreement"]
    if ctx.tie is not None:
        stats["agreement_with_ties"] = stats["percent_agreement"]
        no_tie = (ca != ctx.tie) & (cb != ctx.tie)
        stats["agreement_without_ties"] = (
            st.Stat(float((ca[no_tie] == cb[no_tie]).mean()))
            if no_tie.any()
            else st.Stat(None, "every comparison includes a tie (SAME)")
        )
    for metric, stat in stats.items():
        out[metric] = stat.value
        if stat.why:
            out["why"][metric] = stat.why
    return out


PAIR_CELLS_BUDGET = 8_000_000  # float64 cells of the value tables of every pair (64 MB)


def pairs_of_columns(
    ctx: Context, pairs: list[tuple[int, int]], columns: Columns | None = None
) -> list[dict | None]:
    """two_raters of each pair of matrix columns (a, b) on the items both rated, plus "items"; None
    for a pair without such an item. The same figures as calling two_raters pair by pair, from one
    contingency table of each pair: the whole counts are summed in one pass over every pair's items
    and each figure computed for all pairs at once (identical to two_raters, or within 1e-15).
    `columns`: where to read them (default `ctx.columns`, the items; `ctx.pattern_columns` for people).
    """
    columns = ctx.columns if columns is None else columns
    values_a = _values_given(ctx, sorted({a for a, _ in pairs}))
    values_b = _values_given(ctx, sorted({b for _, b in pairs}))
    size_a, size_b = values_a.shape[0], values_b.shape[0]
    cells = size_a * size_b if ctx.data.is_likert else ctx.levels * ctx.levels
    if len(pairs) * cells > PAIR_CELLS_BUDGET:
        return [_two_columns(ctx, a, b) for a, b in pairs]
    # A block of pairs at a time, each with every pair's values (the same tables, so the same figures):
    # the passes hold ~3 KB a pair, against ~0.75 KB for the figures kept.
    out: list[dict | None] = []
    for start in range(0, len(pairs), PAIRS_PER_BLOCK):
        out += _column_pairs(ctx, pairs[start : start + PAIRS_PER_BLOCK], columns, values_a, values_b)
    return out


PAIRS_PER_BLOCK = 10_000


def _column_pairs(
    ctx: Context, pairs: list[tuple[int, int]], columns: Columns, values_a: np.ndarray, values_b: np.ndarray
) -> list[dict | None]:
    """pairs_of_columns of one block of pairs; `values_a` and `values_b`: the values given in the columns
    of every pair's first and second side."""
    size_a, size_b = values_a.shape[0], values_b.shape[0]
    shared = [_shared_rows(columns, a, b) for a, b in pairs]
    pair = np.repeat(np.arange(len(pairs)), [rows.shape[0] for rows in shared])
    rows = np.concatenate(shared) if shared else np.zeros(0, dtype=np.int64)
    weights = None if columns.weights is None else columns.weights[rows]
    col_a = np.array([a for a, _ in pairs], dtype=np.int64)[pair]
    col_b = np.array([b for _, b in pairs], dtype=np.int64)[pair]
    # By flat index into the column-major arrays (numpy's 2-D fancy indexing costs ~5x more): each
    # pair's rows ascending in one column, read nearly in order.
    codes, value_codes = columns.codes.ravel(), columns.value_codes.ravel()
    width = columns.codes.shape[1]
    at_a, at_b = col_a * width + rows, col_b * width + rows
    ca, cb = np.take(codes, at_a), np.take(codes, at_b)
    k, levels = len(pairs), ctx.levels

    def tally(cells: np.ndarray, size: int, kept: np.ndarray | None = None) -> np.ndarray:
        """How many items fall in each cell (`kept`: the pairs' rows that `cells` are of, if not all)."""
        return np.bincount(
            cells, weights=weights if weights is None or kept is None else weights[kept], minlength=size
        )

    items = tally(pair, k).astype(np.int64)
    same = ca == cb
    agree = tally(pair[same], k, same)
    valid = (ca >= 0) & (cb >= 0)
    confusion = tally(
        pair[valid] * levels * levels + ca[valid] * levels + cb[valid], k * levels * levels, valid
    ).reshape(k, levels, levels)
    figures: dict[str, list[st.Stat]] = {
        "percent_agreement": [st.Stat(float(agree[n] / max(items[n], 1))) for n in range(k)],
        "cohen_kappa": [
            st.Stat.of(value, f"{st.ALL_IDENTICAL}: kappa undefined")
            for value in st.kappa_from_tables(
                np.moveaxis(confusion.astype(np.float64), 0, -1), weights=ctx.kappa_weights
            )
        ],
    }
    if ctx.data.is_likert:
        va = _renumber(values_a, ctx)[np.take(value_codes, at_a)]
        vb = _renumber(values_b, ctx)[np.take(value_codes, at_b)]
        tables = tally(pair * size_a * size_b + va * size_b + vb, k * size_a * size_b)
        numeric = st.table_figures(
            tables.reshape(k, size_a, size_b).astype(np.float64),
            ctx.value_levels[values_a],
            ctx.value_levels[values_b],
        )
        figures.update(_numeric_stats(numeric))
    elif ctx.data.kind == "categorical":
        f1 = st.f1_from_confusion(confusion.astype(np.float64))
        for n, label in enumerate(ctx.data.labels):
            why = f"label {label!r} never given by either: F1 undefined"
            figures[f"f1_{label}"] = [st.Stat.of(value, why) for value in f1[:, n]]
        figures["accuracy"] = figures["percent_agreement"]
    if ctx.tie is not None:
        figures["agreement_with_ties"] = figures["percent_agreement"]
        no_tie = (ca != ctx.tie) & (cb != ctx.tie)
        compared = tally(pair[no_tie], k, no_tie)
        agree_no_tie = tally(pair[no_tie & same], k, no_tie & same)
        figures["agreement_without_ties"] = [
            st.Stat(float(agree_no_tie[n] / compared[n]))
            if compared[n]
            else st.Stat(None, "every comparison includes a tie (SAME)")
            for n in range(k)
        ]
    out: list[dict | None] = []
    for n in range(k):
        if not items[n]:
            out.append(None)
            continue
        entry: dict = {"items": int(items[n]), "why": {}}
        for metric, stats in figures.items():
            entry[metric] = stats[n].value
            if stats[n].why:
                entry["why"][metric] = stats[n].why
        out.append(entry)
    return out


def _shared_rows(columns: Columns, a: int, b: int) -> np.ndarray:
    """The rows both columns rated, ascending: the rows of the one that rated fewer, kept where the other
    rated too."""
    if columns.rated_rows[b].shape[0] < columns.rated_rows[a].shape[0]:
        a, b = b, a
    rows = columns.rated_rows[a]
    return rows[columns.rated[b, rows]]


def _values_given(ctx: Context, cols: list[int]) -> np.ndarray:
    """The value codes (into ctx.value_levels) given in these columns, in increasing order."""
    return np.nonzero(ctx.values_given[cols].any(axis=0))[0]


def _renumber(values: np.ndarray, ctx: Context) -> np.ndarray:
    """A look-up from value code to its position in `values` (a sorted subset of the codes)."""
    position = np.full(ctx.value_levels.shape[0], -1, dtype=np.int64)
    position[values] = np.arange(values.shape[0])
    return position


def _numeric_stats(numeric: dict[str, np.ndarray]) -> dict[str, list[st.Stat]]:
    """table_figures' arrays as the Stats (and reasons) of st.numeric_figures."""
    names = {"spearman": "Spearman's rho", "kendall_tau_b": "Kendall's tau-b", "pearson": "Pearson's r"}
    out: dict[str, list[st.Stat]] = {}
    for key, name in names.items():
        stats = []
        for n, value in enumerate(numeric[key]):
            if numeric["n"][n] < 2:
                stats.append(st.Stat(None, f"fewer than two items rated by both: {name} undefined"))
            elif numeric["x_levels"][n] < 2 or numeric["y_levels"][n] < 2:
                stats.append(st.Stat(None, f"{st.ALL_IDENTICAL} for one rater: {name} undefined"))
            else:
                stats.append(st.Stat.of(value, f"{name} undefined"))
        out[key] = stats
    for key in ("within_one", "mae", "bias"):
        out[key] = [st.Stat(float(value)) for value in numeric[key]]
    return out


def _two_columns(ctx: Context, a: int, b: int) -> dict | None:
    """two_raters of matrix columns a and b on the items both rated, plus "items"; None without any."""
    matrix = ctx.matrix
    shared = _shared_rows(ctx.columns, a, b)
    if not shared.shape[0]:
        return None
    entry = two_raters(
        ctx,
        matrix.codes[shared, a],
        matrix.codes[shared, b],
        matrix.values[shared, a],
        matrix.values[shared, b],
        value_codes=(matrix.value_codes[shared, a], matrix.value_codes[shared, b]),
    )
    return {"items": int(shared.shape[0]), **entry}


def level_codes(ctx: Context, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values as codes into the ratings' distinct values, or into their own when they are not among them."""
    levels = ctx.value_levels
    if levels.shape[0]:
        codes = np.clip(np.searchsorted(levels, values), 0, levels.shape[0] - 1)
        if np.array_equal(levels[codes], values):
            return codes, levels
    own, codes = np.unique(values, return_inverse=True)
    return codes, own


def kappa_of(ctx: Context, ca: np.ndarray, cb: np.ndarray) -> st.Stat:
    if ca.shape[0] == 0:
        return st.Stat(None, "no shared items: kappa undefined")
    confusion = st.w_confusion(ca, cb, st._ones(ca.shape[0]), ctx.levels)
    return st.Stat.of(
        st.kappa_from_confusion(confusion, weights=ctx.kappa_weights)[0],
        f"{st.ALL_IDENTICAL}: kappa undefined",
    )


def weighted_mean(entries: list[dict], metric: str) -> tuple[float | None, str]:
    pairs = [(e[metric], e["items"]) for e in entries if e.get(metric) is not None]
    if not pairs:
        return None, f"{metric} undefined for every pair"
    values, weights = zip(*pairs, strict=True)
    return float(np.average(values, weights=weights)), ""


def majority_codes(counts: np.ndarray) -> np.ndarray:
    """Per row of (rows, labels) counts: the single most frequent label, -1 on a tie for the top or without
    any."""
    if not counts.shape[1]:
        return np.full(counts.shape[0], -1, dtype=np.int64)
    top = counts.max(axis=1)
    unique_top = (counts == top[:, None]).sum(axis=1) == 1
    return np.where((top > 0) & unique_top, counts.argmax(axis=1), -1)


def row_means(values: np.ndarray) -> np.ndarray:
    """Mean of each row's finite values; NaN for a row without any."""
    present = np.isfinite(values)
    count = present.sum(axis=1)
    total = np.where(present, values, 0.0).sum(axis=1)
    return st._divide(total, count.astype(np.float64))
