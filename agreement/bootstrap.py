"""The bootstrap over items for agreement statistics: resample weights over distinct rows (exact
multinomial, or Poisson when nearly every item is its own row or there are over a thousand rows), the
per-item resamples a report shares between its groups, and percentile intervals. The kernels it weights
are in `agreement.statistics`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .statistics import unique_rows


def bootstrap(
    rows: np.ndarray,
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    budget: int = 4_000_000,
    shared: ItemResamples | None = None,
    members: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Point estimates and percentile confidence intervals over items, for every output of `statistic`.

    `rows` holds one row per item (any integer codes). `statistic(unique_rows, weights)` maps
    P distinct rows and (B, P) weights to (B,) or (B, k) figures. Resampling n items with
    replacement is the same as drawing how often each distinct row occurs from a multinomial
    with the rows' frequencies, which is what happens here, a chunk of resamples at a time
    (or, with many distinct rows, the Poisson bootstrap: see _resample_weights). The next chunk's
    weights are drawn in a second thread while `statistic` reads this one's.
    `shared` (with `members`, each row's index among its items): when four in five items or more are
    their own row, take the Poisson weights of these items from the report's one set instead of
    drawing new ones, and evaluate `statistic` on the rows themselves (the set's seed and resamples
    apply). With fewer distinct rows, drawing for them alone is cheaper than reading every item.
    Returns (point (k,), intervals (k, 2) or None when there are no items).
    """
    rows = np.asarray(rows)
    n = rows.shape[0]
    if n == 0:
        return np.atleast_1d(statistic(rows, np.zeros((1, 0)))).reshape(-1), None
    unique, counts = unique_rows(rows.reshape(n, -1))
    unique = unique.reshape((unique.shape[0], *rows.shape[1:]))
    if not _multinomial(counts, n):
        # The rows seen equally often side by side, so that each count's Poisson weights are drawn into
        # one slice of the chunk rather than scattered over it (~0.1 s of a 100k-item report's 1.5 s).
        order = np.argsort(counts, kind="stable")
        unique, counts = unique[order], counts[order]
    point = np.asarray(statistic(unique, counts[None, :].astype(np.float64)), dtype=np.float64).reshape(-1)
    if resamples <= 0:
        return point, None
    if shared is not None and members is not None and unique.shape[0] * 5 >= n * 4:
        # Per item: the same resamples as every other group of the report, at the cost of n columns.
        draws = [
            np.asarray(statistic(rows, w), dtype=np.float64).reshape(w.shape[0], -1)
            for w in shared.of(members)
        ]
        return point, percentile_intervals(np.concatenate(draws, axis=0), level=level)
    rng = np.random.default_rng(seed)
    chunk = max(1, min(resamples, budget // max(1, unique.shape[0])))
    sizes = [min(chunk, resamples - start) for start in range(0, resamples, chunk)]
    draws = []
    # The next chunk's weights are drawn in a second thread while `statistic` reads this chunk's: NumPy
    # and SciPy's sparse products release the GIL, so on two cores the draws cost little wall time. One
    # thread draws them all, in order, from the one generator: the same weights as drawing inline.
    blocks = _count_blocks(counts)
    with ThreadPoolExecutor(max_workers=1) as drawer:
        pending = drawer.submit(_resample_weights, rng, counts, n, sizes[0], blocks)
        for k, size in enumerate(sizes):
            weights = pending.result()
            if k + 1 < len(sizes):
                pending = drawer.submit(_resample_weights, rng, counts, n, sizes[k + 1], blocks)
            draws.append(np.asarray(statistic(unique, weights), dtype=np.float64).reshape(size, -1))
    values = np.concatenate(draws, axis=0)
    return point, percentile_intervals(values, level=level)


def _resample_weights(
    rng: np.random.Generator,
    counts: np.ndarray,
    n: int,
    size: int,
    blocks: list[tuple[int, slice | np.ndarray, int]] | None = None,
) -> np.ndarray:
    """(size, P) how often each distinct row occurs in `size` resamples of the n items (counts: how
    often each occurs among them).

    Few distinct rows: how often each is drawn when resampling n items with replacement, a
    multinomial over them. Many (each item nearly its own pattern, or over MULTINOMIAL_ROWS patterns):
    the Poisson bootstrap, each item drawn Poisson(1) times independently (a row seen c times:
    Poisson(c)), which has the same spread as resampling n items with replacement for the sizes where
    it is used (the total is n +- sqrt(n) instead of exactly n) and costs one 16-bit random number and a
    table look-up per row instead of n random indices and a scattered count. Column-major, so that one
    distinct row's weights over the resamples are contiguous (what the sparse per-pair sums read).
    `blocks`: `_count_blocks(counts)`, when the caller draws many chunks.
    """
    distinct = counts.shape[0]
    if _multinomial(counts, n):
        return np.asfortranarray(rng.multinomial(n, counts / n, size=size), dtype=np.float64)
    # Each count's rows drawn together from its table, written as float32 (whole counts: exact, half the
    # memory of float64) straight into their rows when they are a slice, as `bootstrap` orders them.
    weights = np.empty((distinct, size), dtype=np.float32)
    for value, rows, block in _count_blocks(counts) if blocks is None else blocks:
        if value > _POISSON_TABLES:  # a row seen more than 16 times: counts beyond the tables
            weights[rows] = rng.poisson(value, size=(block, size))
        elif isinstance(rows, slice):
            _draw_poisson(rng, _poisson_table(value), weights[rows])
        else:
            weights[rows] = _draw_poisson(rng, _poisson_table(value), np.empty((block, size), np.float32))
    return weights.T


MULTINOMIAL_ROWS = 1024


def _multinomial(counts: np.ndarray, n: int) -> bool:
    """Whether `_resample_weights` draws the multinomial over the distinct rows (else Poisson weights).

    The multinomial costs a binomial draw per distinct row and resample (~90 ns), the Poisson weights
    a table look-up (~0.7 ns), or a Poisson draw (~40 ns) for a row seen more than 16 times: the
    multinomial only while that stays small (1,024 rows: ~0.1 s for 1,000 resamples; 3,374 rows of
    a logprob judge's scores took 0.30 s against 0.06 s for the Poisson weights).
    """
    return counts.shape[0] * 4 < n and counts.shape[0] <= MULTINOMIAL_ROWS


def _count_blocks(counts: np.ndarray) -> list[tuple[int, slice | np.ndarray, int]]:
    """(count, the rows seen that often, how many) for each count, smallest first: the rows as a slice when
    the counts never decrease (as `bootstrap` orders them), otherwise as their indices, ascending."""
    order = None if np.all(counts[1:] >= counts[:-1]) else np.argsort(counts, kind="stable")
    values, starts = np.unique(counts if order is None else counts[order], return_index=True)
    ends = [*starts[1:].tolist(), counts.shape[0]]
    return [
        (value, slice(start, end) if order is None else order[start:end], end - start)
        for value, start, end in zip(values.tolist(), starts.tolist(), ends, strict=True)
    ]


_POISSON_TABLES = 16
# Uniforms drawn and looked up this many at a time: the slice, its 16-bit numbers and the 64-bit indices
# np.take makes of them stay in the CPU's cache (measured on 4M weights: 0.6-0.7 ns a weight against
# 1.0-2.2 ns for one np.take of the whole block). A multiple of 4: the same numbers as one draw.
_SLICE = 65536


def _uniform16(rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` uniform 16-bit numbers: each 64-bit output of the generator split in four, low half first, as
    `rng.integers(0, 65536, dtype=np.uint16)` splits it (the same numbers when the generator holds no
    half-used output and the count is a multiple of four), at ~0.4 instead of ~1.1 ns each."""
    raw = rng.bit_generator.random_raw(-(-count // 4))
    return raw.astype("<u8", copy=False).view(np.uint16)[:count]


def _draw_poisson(rng: np.random.Generator, table: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Fill `out` (C-contiguous) with Poisson counts `table[u]` of 16-bit uniforms u (`_poisson_table`), in
    order, a slice at a time: the same numbers as looking up one `_uniform16` of the whole size."""
    flat = out.reshape(-1)
    for start in range(0, flat.shape[0], _SLICE):
        piece = flat[start : start + _SLICE]
        # mode="clip" writes straight into `out` (the default mode buffers it); every u is in range anyway.
        np.take(table, _uniform16(rng, piece.shape[0]), mode="clip", out=piece)
    return out


@dataclass
class ItemResamples:
    """Poisson bootstrap weights of a report's items, drawn once and shared by all its figure groups.

    Each item is drawn Poisson(1) times in each resample (see _resample_weights). A group of figures
    over some of the items takes those items' weights: the Poisson bootstrap of that group, as if drawn
    for it alone, at the cost of one set of draws per report instead of one per group. Chunks of
    resamples are kept (one byte per item and resample) up to `keep` bytes, and otherwise drawn again
    from the same seed each time they are asked for, so the weights never depend on what was kept.
    While `of` hands out a chunk, `chunk` is its number: figures of one group can then take sums over
    other items in the same resamples (`weights`), e.g. to share tables between groups. Groups may run
    in threads of their own: each thread has its own current chunk, and a chunk is the same whichever
    thread draws it.
    """

    items: int
    resamples: int
    seed: int
    budget: int = 4_000_000
    keep: int = 256_000_000
    _kept: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _thread: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def chunk(self) -> int | None:
        """The number of the chunk `of` is handing out in this thread (None outside)."""
        return getattr(self._thread, "chunk", None)

    def of(self, members: np.ndarray) -> Iterator[np.ndarray]:
        """(size, len(members)) float32 weights of the items `members` (sorted indices), a chunk at a time."""
        try:
            for chunk in range(len(self._sizes())):
                self._thread.chunk = chunk
                yield self.weights(members)
        finally:
            self._thread.chunk = None

    def weights(self, members: np.ndarray | None) -> np.ndarray:
        """(size, len(members)) float32 weights of the items `members` (None: all) in the current chunk."""
        if self.chunk is None:
            raise ValueError("weights are only defined while `of` hands out a chunk")
        counts = self._chunk(self.chunk, self._sizes()[self.chunk])
        every = members is None or members.shape[0] == self.items
        return (counts if every else counts[members]).astype(np.float32).T

    def _sizes(self) -> list[int]:
        step = max(1, min(self.resamples, self.budget // max(1, self.items)))
        return [min(step, self.resamples - start) for start in range(0, self.resamples, step)]

    def _chunk(self, chunk: int, size: int) -> np.ndarray:
        """(items, size) uint8 counts of chunk number `chunk`, from its own stream of the seed."""
        if chunk in self._kept:
            return self._kept[chunk]
        rng = np.random.default_rng([self.seed, chunk])
        counts = _draw_poisson(rng, _poisson_bytes(1), np.empty((self.items, size), dtype=np.uint8))
        if self.items * self.resamples <= self.keep:
            self._kept[chunk] = counts
        return counts


@functools.cache
def _poisson_bytes(mean: int) -> np.ndarray:
    """_poisson_table as uint8 (no entry of the tables up to mean 16 is above 36): the shared resamples."""
    return _poisson_table(mean).astype(np.uint8)


@functools.cache
def _poisson_table(mean: int) -> np.ndarray:
    """Poisson(mean) by inverse CDF of a 16-bit uniform: entry u is the count at quantile (u + 0.5) / 65536.

    Each probability of the quantised distribution is within 1/65536 of Poisson's, far below the
    Monte Carlo error of 1,000 resamples (for mean 1: mean 1.0, variance 0.99997).
    """
    k = np.arange(mean * 4 + 40, dtype=np.float64)
    cdf = np.cumsum(np.exp(-mean + k * np.log(mean) - np.cumsum(np.log(np.maximum(k, 1.0)))))
    quantiles = (np.arange(65536) + 0.5) / 65536.0
    return np.searchsorted(cdf, quantiles, side="right").astype(np.float32)


def percentile_intervals(values: np.ndarray, *, level: float = 0.95) -> np.ndarray:
    """(k, 2) percentile intervals of (B, k) bootstrap figures; NaN if under half are defined."""
    tail = (1.0 - level) / 2.0 * 100.0
    out = np.full((values.shape[1], 2), np.nan)
    for k in range(values.shape[1]):
        finite = values[:, k][np.isfinite(values[:, k])]
        if finite.shape[0] >= max(2, values.shape[0] // 2):
            out[k] = np.percentile(finite, [tail, 100.0 - tail])
    return out
