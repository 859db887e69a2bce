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
    pair_sums,
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
        why = {0: "no human ratings", 1: "one rater"}.get(len(cols), "no item has two human ratings")
        for metric in metrics:
            out[metric] = None
            out["why"][metric] = f"{why}: nothing to compare"
        out["pairs"] = []
        return out
    # Rows: each item's pattern of ratings. Only the values people gave: a judge's fractional scores must not
    # widen the people's table (renumbering keeps their order, so the patterns' order too).
    patterns = ctx.patterns
    given = patterns.value_codes[np.count_nonzero(patterns.value_codes >= 0, axis=1) >= 2]  # those of `mask`
    used = np.unique(given[given >= 0])
    renumbered = np.full(ctx.value_levels.shape[0] + 1, -1, dtype=np.int64)  # the last entry: -1 stays -1
    renumbered[used] = np.arange(used.shape[0])
    levels = ctx.value_levels[used]
    headline = ["krippendorff_alpha", "percent_agreement", "cohen_kappa"]
    if ctx.tie is not None:
        headline += ["agreement_with_ties", "agreement_without_ties"]
    point, ci = bs.bootstrap(
        patterns.of_item[mask],
        lambda u, w: _human_figures(ctx, u, w, headline, levels, renumbered),
        resamples=ctx.resamples,
        seed=ctx.seed,
        shared=ctx.resampler,
        members=np.nonzero(mask)[0],
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
    ctx: Context,
    unique: np.ndarray,
    w: np.ndarray,
    headline: list[str],
    levels: np.ndarray,
    renumbered: np.ndarray,
) -> np.ndarray:
    """`unique`: patterns (`Context.patterns`); `renumbered`: each value code's among `levels`."""
    key = ("people", id(unique))
    if key not in ctx.plans or ctx.plans[key][0] is not unique:
        codes = ctx.patterns.codes[unique]
        counts = st.category_counts(codes, ctx.levels)
        if ctx.data.is_likert:
            alpha_counts = st.category_counts(renumbered[ctx.patterns.value_codes[unique]], levels.shape[0])
        else:
            alpha_counts = counts
        # Every linear figure's per-row terms side by side, so one product reads the weights once:
        # the alpha coincidences, then agreeing pairs and pairs with and without the tie label.
        columns = [st.alpha_contributions(alpha_counts), st.pair_agreement_columns(counts)]
        if ctx.tie is not None:
            columns.append(st.pair_agreement_columns(counts, exclude=ctx.tie))
        ctx.plans[key] = (unique, np.concatenate(columns, axis=1), codes)
    _, columns, codes = ctx.plans[key]
    sums = st._wsum(w, columns)
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
        elif metric == "cohen_kappa":  # every pair of people's tables, a block of pairs at a time
            out.append(pair_sums(ctx, codes, w, people_pairs(ctx), anchor=unique).mean_kappa)
    return np.stack(out, axis=1)


def human_pairs(ctx: Context, names: list[str]) -> list[dict]:
    people = list(itertools.combinations(range(len(ctx.human_cols)), 2))
    figures = pairs_of_columns(ctx, people, ctx.pattern_columns)  # the people are the first columns
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
