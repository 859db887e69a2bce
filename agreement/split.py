"""A fixed, seeded split of an evaluation's items into "tune" and "held out".

Judge prompts are improved on the tune items only (examples, wording), and judged on the held-out
items, so a better figure there is not the result of fitting the prompt to the very labels it is
scored on. Each item's side depends only on (evaluation id, item id), through a 64-bit mixing
hash (SplitMix64's finaliser), so it never changes as items or ratings are added, and differs
between evaluations.
"""

from __future__ import annotations

import numpy as np

from agreement.tables import Context

TUNE = "tune"
HELD_OUT = "held_out"
HELD_OUT_SHARE = 0.5

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: every input bit affects every output bit (uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        x = (x + _GOLDEN).astype(np.uint64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def held_out(evaluation_id: int, item_ids: np.ndarray) -> np.ndarray:
    """True for the items of `item_ids` that evaluation `evaluation_id` holds out (about half)."""
    seed = _mix(np.array([evaluation_id], dtype=np.uint64))[0]
    hashed = _mix(np.asarray(item_ids, dtype=np.int64).astype(np.uint64) ^ seed)
    return (hashed >> np.uint64(11)).astype(np.float64) / float(1 << 53) < HELD_OUT_SHARE


def part_of(evaluation_id: int, item_id: int) -> str:
    return HELD_OUT if bool(held_out(evaluation_id, np.array([item_id]))[0]) else TUNE


def split_entry(ctx: Context, col: int, held: np.ndarray) -> dict:
    """`raters[].split`: the model against the people's majority (likert: rounded mean) on each part:
    percent agreement and Cohen's kappa (likert: quadratic-weighted, and the mean absolute error)."""
    from agreement.tables import kappa_of

    reference, ref_codes = ctx.reference
    ok = np.isfinite(ctx.matrix.values[:, col]) & (ref_codes >= 0)
    out = {}
    for name, part in ((TUNE, ok & ~held), (HELD_OUT, ok & held)):
        model, people = ctx.matrix.codes[part, col], ref_codes[part]
        kappa = kappa_of(ctx, model, people)
        figures: dict = {"items": int(part.sum()), "why": {}}
        figures["percent_agreement"] = float((model == people).mean()) if part.any() else None
        figures["cohen_kappa"] = kappa.value
        if kappa.why:
            figures["why"]["cohen_kappa"] = kappa.why
        if ctx.data.is_likert:
            error = np.abs(ctx.matrix.values[part, col] - reference[part])
            figures["mae"] = float(error.mean()) if part.any() else None
        out[name] = figures
    return out


def growth_order(split_key: int, item_ids: np.ndarray) -> np.ndarray:
    """The fixed shuffle of the items that `growth_entry` adds them in: indices into `item_ids`."""
    seed = _mix(np.array([split_key], dtype=np.uint64))[0]
    return np.argsort(_mix(np.asarray(item_ids, dtype=np.int64).astype(np.uint64) ^ seed), kind="stable")


def growth_entry(ctx: Context, col: int, order: np.ndarray, steps: int = 10) -> dict:
    """`raters[].growth`: the model's agreement with the people's majority (likert: rounded mean) on
    the first k human-rated items of a fixed shuffle (`growth_order` of the matrix's items), k growing
    in `steps`, with 95% Wilson intervals: how the figure settles as human labels are added."""
    _, ref_codes = ctx.reference
    usable = np.isfinite(ctx.matrix.values[:, col]) & (ref_codes >= 0)
    order = order[usable[order]]
    hits = ctx.matrix.codes[order, col] == ref_codes[order]
    total = int(hits.shape[0])
    points = []
    for k in sorted(
        {max(1, round(total * step / steps)) for step in range(1, steps + 1)} if total else set()
    ):
        share = float(hits[:k].mean())
        points.append({"labeled_items": k, "percent_agreement": share, "ci": wilson(share, k)})
    return {"order": "fixed shuffle of the items", "points": points}


def wilson(share: float, n: int, z: float = 1.959964) -> list[float]:
    """95% Wilson score interval of a proportion."""
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [float(centre - half), float(centre + half)]
