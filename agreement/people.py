"""People with each other: alpha, pooled agreement, mean pairwise kappa, Fleiss, S1/S2, pairs, per person."""

from __future__ import annotations

import itertools

import numpy as np

from agreement import bootstrap as bs
from agreement import statistics as st
from agreement.tables import (
    Context,
    figure,
    interval,
    mean_kappa,
    pair_tables,
    pairs_of_columns,
    people_pair_tables,
    people_pairs,
    shares_people_tables,
    weighted_mean,
)


def human_human(ctx: Context, names: list[str]) -> dict:
    cols = ctx.human_cols
    mask = ctx.people_rated >= 2
    out: dict = {"raters": len(cols), "items": int(np.count_nonzero(mask)), "why": {}, "ci": {}}
    metrics = ["krippendorff_alpha", "percent_agreement", "cohen_kappa", "fleiss_kappa"]
    if ctx.data.kind == "pairwise":
        metrics += ["agreement_with_ties", "agreement_without_ties"]
    if ctx.data.is_likert:
        metrics.append("spearman")
    if out["items"] == 0:
        why = "one rater" if len(cols) < 2 else "no item has two human ratings"
        for metric in metrics:
            out[metric] = None
            out["why"][metric] = f"{why}: nothing to compare"
        out["pairs"] = []
        return out
    rows = ctx.people_rows(mask).reshape(-1, len(cols), 2)
    # Only the values people gave: a judge's fractional scores must not widen the people's table.
    present = rows[:, :, 1] >= 0
    used, compact = np.unique(rows[:, :, 1][present], return_inverse=True)
    rows[:, :, 1][present] = compact
    levels = ctx.value_levels[used]
    headline = ["krippendorff_alpha", "percent_agreement", "cohen_kappa"]
    if ctx.tie is not None:
        headline += ["agreement_with_ties", "agreement_without_ties"]
    point, ci = bs.bootstrap(
        rows,
        lambda u, w: _human_figures(ctx, u, w, headline, levels),
        resamples=ctx.resamples,
        seed=ctx.seed,
        shared=ctx.resampler,
        members=np.nonzero(mask)[0],
        key=rows[:, :, 1],  # each person's category code is a non-decreasing function of the value's code
    )
    whys = {
        "krippendorff_alpha": f"{st.ALL_IDENTICAL}: alpha undefined",
        "percent_agreement": "no pairs of ratings",
        "cohen_kappa": f"{st.ALL_IDENTICAL} for every pair of people: kappa undefined",
        "agreement_with_ties": "no pairs of ratings",
        "agreement_without_ties": "every pair of ratings includes a tie (SAME)",
    }
    for k, metric in enumerate(headline):
        out[metric], why = figure(point[k], whys[metric])
        if why:
            out["why"][metric] = why
        if interval(ci, k):
            out["ci"][metric] = interval(ci, k)
    counts = ctx.people_counts[mask]
    fleiss = st.fleiss_from_counts(counts)
    out["fleiss_kappa"] = fleiss.value
    if fleiss.why:
        out["why"]["fleiss_kappa"] = fleiss.why
    out["pairs"] = human_pairs(ctx, names)
    if ctx.data.is_likert:
        out["spearman"], why = weighted_mean(out["pairs"], "spearman")
        if why:
            out["why"]["spearman"] = why
    return out


def _human_figures(
    ctx: Context, unique: np.ndarray, w: np.ndarray, headline: list[str], levels: np.ndarray
) -> np.ndarray:
    codes, value_codes = unique[:, :, 0], unique[:, :, 1]
    key = ("people", id(unique))
    if key not in ctx.plans or ctx.plans[key][0] is not unique:
        counts = st.category_counts(codes, ctx.levels)
        alpha_counts = st.category_counts(value_codes, levels.shape[0]) if ctx.data.is_likert else counts
        # Every linear figure's per-row terms side by side, so one product reads the weights once:
        # the alpha coincidences, then agreeing pairs and pairs with and without the tie label.
        columns = [st.alpha_contributions(alpha_counts), st.pair_agreement_columns(counts)]
        if ctx.tie is not None:
            columns.append(st.pair_agreement_columns(counts, exclude=ctx.tie))
        ctx.plans[key] = (unique, np.concatenate(columns, axis=1))
    sums = st._wsum(w, ctx.plans[key][1])
    side = levels.shape[0] if ctx.data.is_likert else ctx.levels
    width = side * side
    out = []
    for metric in headline:
        if metric == "krippendorff_alpha":
            level, values = ("ordinal", levels) if ctx.data.is_likert else ("nominal", None)
            out.append(
                st.alpha_from_coincidence(
                    sums[:, :width].reshape(w.shape[0], side, side), level=level, values=values
                )
            )
        elif metric in ("percent_agreement", "agreement_with_ties"):
            out.append(st._divide(sums[:, width], sums[:, width + 1]))
        elif metric == "agreement_without_ties":
            out.append(st._divide(sums[:, width + 2], sums[:, width + 3]))
        elif metric == "cohen_kappa" and shares_people_tables(ctx):
            # Every item of these rows and no other has two or more people: the tables over all items.
            out.append(mean_kappa(ctx, people_pair_tables(ctx)))
        elif metric == "cohen_kappa":
            out.append(mean_kappa(ctx, pair_tables(ctx, codes, w, people_pairs(ctx), anchor=unique)))
    return np.stack(out, axis=1)


def human_pairs(ctx: Context, names: list[str]) -> list[dict]:
    people = list(itertools.combinations(range(len(ctx.human_cols)), 2))
    figures = pairs_of_columns(ctx, [(ctx.human_cols[a], ctx.human_cols[b]) for a, b in people])
    return [
        {"a": names[a], "b": names[b], **entry}
        for (a, b), entry in zip(people, figures, strict=True)
        if entry is not None
    ]


def human_summaries(ctx: Context, names: list[str]) -> list[dict]:
    """Each person's pooled agreement with the other people on the items they share: weak raters stand out."""
    codes = ctx.human_codes
    # Per item, how many people gave each label: on an item they rated, a person has (people who rated
    # it - 1) pairs with the others, of which (people who gave the same label - 1) agree.
    counts, rated = ctx.people_counts, ctx.people_rated
    out = []
    for n, name in enumerate(names):
        rows = ctx.rated_rows[n]
        pairs = int((rated[rows] - 1.0).sum())
        agree = int((counts[rows, codes[rows, n]] - 1.0).sum())
        out.append(
            {
                "rater": name,
                "rated": int(rows.shape[0]),
                "pairs": pairs,
                "percent_agreement": agree / pairs if pairs else None,
            }
        )
    return out
