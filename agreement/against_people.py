"""Each model rater against the people: each person, the majority or mean, CIs, verdict, disagreements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agreement import bootstrap as bs
from agreement import statistics as st
from agreement.tables import (
    Context,
    PairSums,
    interval,
    pair_blocks,
    pair_sums,
    pair_tables,
    pairs_of_columns,
    people_pair_tables,
    people_pairs,
    shares_people_tables,
    two_raters,
    weighted_mean,
)


@dataclass
class ModelFigures:
    """One model rater against the people: each person, the majority or mean, intervals, verdict."""

    items: int
    vs_each_human: dict[str, Any]
    vs_majority: dict[str, Any]
    ci: dict[str, list[float]]  # of vs_majority's headline figures
    ci_vs_each_human: dict[str, list[float]]
    verdict: dict[str, Any]
    confusion: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "vs_each_human": self.vs_each_human,
            "vs_majority": self.vs_majority,
            "ci": self.ci,
            "ci_vs_each_human": self.ci_vs_each_human,
            "verdict": self.verdict,
            "confusion": self.confusion,
        }


def model_report(ctx: Context, col: int) -> ModelFigures:
    model_ok = ctx.rated_by_column[col]
    humans_n = ctx.people_rated
    usable = model_ok & (humans_n >= 1)
    # The point figures first, while the report's other groups still share the cores; the bootstrap last:
    # near the report's end only the models' groups are left to run (measured: 5-7% less wall time).
    each, majority = vs_each_human(ctx, col, usable), vs_majority(ctx, col, usable)
    confusion = confusion_matrix(ctx, col, usable)
    ci, ci_vs_each_human, verdict = headline_intervals(ctx, col, usable, humans_n)
    return ModelFigures(
        items=int(usable.sum()),
        vs_each_human=each,
        vs_majority=majority,
        ci=ci,
        ci_vs_each_human=ci_vs_each_human,
        verdict=verdict,
        confusion=confusion,
    )


def vs_each_human(ctx: Context, col: int, usable: np.ndarray) -> dict:
    """Pooled percent agreement over (model, person) pairs; other figures per person, weighted by items."""
    codes = ctx.matrix.codes
    # Items a person rated are usable exactly when the model rated them too: the pair's shared items.
    per_person = [e for e in pairs_of_columns(ctx, [(col, h) for h in ctx.human_cols]) if e is not None]
    if not per_person:
        return {"items": 0, "why": {"all": "no item rated by both the model and a person"}}
    out: dict = {"items": int(usable.sum()), "why": {}}
    metrics = [m for m in per_person[0] if m not in ("why", "items")]
    for metric in metrics:
        if metric in ("percent_agreement", "agreement_with_ties", "accuracy", "agreement_without_ties"):
            continue
        out[metric], why = weighted_mean(per_person, metric)
        if why:
            out["why"][metric] = why
    cm, ch = codes[usable, col], ctx.human_codes[usable]
    valid = ch >= 0
    pooled = _pooled(cm, ch, valid)
    out["percent_agreement"] = pooled
    if ctx.data.kind == "categorical":
        out["accuracy"] = pooled
    if ctx.tie is not None:
        out["agreement_with_ties"] = pooled
        no_tie = valid & (ch != ctx.tie) & (cm[:, None] != ctx.tie)
        out["agreement_without_ties"] = _pooled(cm, ch, no_tie)
        if out["agreement_without_ties"] is None:
            out["why"]["agreement_without_ties"] = "every comparison includes a tie (SAME)"
    return out


def _pooled(model: np.ndarray, humans: np.ndarray, valid: np.ndarray) -> float | None:
    pairs = int(valid.sum())
    return float(((humans == model[:, None]) & valid).sum() / pairs) if pairs else None


def vs_majority(ctx: Context, col: int, usable: np.ndarray) -> dict:
    reference, ref_codes = ctx.reference
    ok = usable & (ref_codes >= 0)
    out: dict = {"items": int(ok.sum()), "why": {}}
    if not ctx.data.is_likert:
        out["items_without_majority"] = int((usable & (ref_codes < 0)).sum())
    if not ok.any():
        out["why"]["all"] = "no item has both a model rating and a human majority"
        return out
    values, codes = ctx.matrix.values, ctx.matrix.codes
    entry = two_raters(
        ctx,
        codes[ok, col],
        ref_codes[ok],
        values[ok, col],
        reference[ok],
        value_codes=(ctx.matrix.value_codes[ok, col], None),
    )
    out["why"].update(entry.pop("why"))
    out.update(entry)
    return out


def confusion_matrix(ctx: Context, col: int, usable: np.ndarray) -> dict:
    """Counts of (people's majority or rounded mean, model) pairs: rows people, columns model."""
    _, ref_codes = ctx.reference
    ok = usable & (ref_codes >= 0)
    matrix = st.w_confusion(ref_codes[ok], ctx.matrix.codes[ok, col], st._ones(int(ok.sum())), ctx.levels)[0]
    return {
        "labels": ctx.data.labels,
        "rows": "people",
        "columns": "model",
        "matrix": matrix.astype(int).tolist(),
    }


def headline_intervals(ctx: Context, col: int, usable: np.ndarray, humans_n: np.ndarray) -> tuple:
    """Bootstrap CIs of the headline figures, and the verdict.

    Agreement, kappa and the verdict come from one set of resamples (rows: the people's pattern of
    ratings, whether two or more people rated, the model's category); for likert, Spearman, MAE and bias
    from a second (rows: the model's exact score and the people's mean), so a judge's fractional
    scores do not multiply the distinct rows of the first.
    """
    if not usable.any():
        return {}, {}, _verdict_undefined("the model has no usable rating on an item a person rated")
    # Rows: the people's pattern, whether two or more rated (a function of the pattern), the model's code.
    comparable = humans_n[usable] >= 2
    rows = np.stack([ctx.patterns.of_item[usable], comparable, ctx.matrix.codes[usable, col]], axis=1)
    names = _headline_names(ctx)
    members = np.nonzero(usable)[0]
    # Items with two or more people the model did not rate: the verdict's people tables leave them out.
    left_out = np.nonzero((humans_n >= 2) & ~usable)[0]
    point, ci = bs.bootstrap(
        rows,
        lambda u, w: _headline_figures(ctx, u, w, names, left_out),
        resamples=ctx.resamples,
        seed=ctx.seed,
        shared=ctx.resampler,
        members=members,
    )
    intervals = {name: interval(ci, k) for k, name in enumerate(names)}
    if ctx.data.is_likert:
        mean_levels, mean_codes = ctx.reference_levels
        numeric = np.stack([ctx.matrix.value_codes[usable, col], mean_codes[usable]], axis=1)
        numeric_names = ["maj:spearman", "maj:mae", "maj:bias"]
        _, numeric_ci = bs.bootstrap(
            numeric,
            lambda u, w: _numeric_headline(ctx, u, w, mean_levels),
            resamples=ctx.resamples,
            seed=ctx.seed,
            shared=ctx.resampler,
            members=members,
        )
        intervals.update({name: interval(numeric_ci, k) for k, name in enumerate(numeric_names)})
    verdict = make_verdict(ctx, point, ci, names, int(comparable.sum()))
    major = {m.split(":", 1)[1]: v for m, v in intervals.items() if m.startswith("maj:") and v}
    each = {m.split(":", 1)[1]: v for m, v in intervals.items() if m.startswith("each:") and v}
    return major, each, verdict


def _numeric_headline(ctx: Context, unique: np.ndarray, w: np.ndarray, mean_levels: np.ndarray) -> np.ndarray:
    model_value = ctx.value_levels[unique[:, 0]]
    mean = mean_levels[unique[:, 1]]
    difference = model_value - mean
    return np.stack(
        [st.w_spearman(model_value, mean, w), st.w_mean(np.abs(difference), w), st.w_mean(difference, w)],
        axis=1,
    )


def _headline_names(ctx: Context) -> list[str]:
    names = ["maj:percent_agreement", "maj:cohen_kappa", "each:percent_agreement", "each:cohen_kappa"]
    if ctx.tie is not None:
        names += ["each:agreement_with_ties", "each:agreement_without_ties"]
        names += ["maj:agreement_with_ties", "maj:agreement_without_ties"]
    verdict = ["kappa_model", "kappa_humans", "kappa_diff", "pa_model", "pa_humans", "pa_diff"]
    return [*names, *(f"verdict:{name}" for name in verdict)]


@dataclass
class _HeadlineRows:
    """What the headline figures need from the distinct rows, worked out once for every chunk of resamples."""

    codes: np.ndarray  # people's codes, the model's, then the people's majority or rounded mean (-1: none)
    comparable: np.ndarray  # two or more people rated the row (bool)
    incomparable: np.ndarray  # the other rows


def _headline_rows(ctx: Context, unique: np.ndarray) -> _HeadlineRows:
    key = ("headline", id(unique))
    if key in ctx.plans and ctx.plans[key][0] is unique:
        return ctx.plans[key][1]
    patterns, model_code = unique[:, 0], unique[:, 2]
    comparable = unique[:, 1] == 1
    rows = _HeadlineRows(
        codes=np.concatenate(
            [ctx.patterns.codes[patterns], model_code[:, None], ctx.pattern_reference[1][patterns][:, None]],
            axis=1,
        ),
        comparable=comparable,
        incomparable=~comparable,
    )
    ctx.plans[key] = (unique, rows)
    return rows


def _headline_figures(
    ctx: Context, unique: np.ndarray, w: np.ndarray, names: list[str], left_out: np.ndarray
) -> np.ndarray:
    k = len(ctx.human_cols)
    rows = _headline_rows(ctx, unique)
    results = {}
    # Every figure comes from pairs' tables, products of the weights: the model against each person and
    # against the people's majority (its confusion matrix), and, outside the shared resamples, the people
    # against each other on the same rows (the verdict's). Percent agreement is a table's diagonal over its
    # total. The pairs' tables are summed a block of pairs at a time (`pair_blocks`): with hundreds of
    # people, all at once would not fit in memory.
    majority = [(k, k + 1)]
    confusion = pair_tables(ctx, rows.codes, w, majority, anchor=unique, only=rows.comparable)[:, :, 0]
    if rows.incomparable.any():  # the items with one person count in "each" and the majority, not the verdict
        others = pair_tables(ctx, rows.codes, w, majority, anchor=unique, only=rows.incomparable)
        confusion = confusion + others[:, :, 0]
    confusion = np.moveaxis(confusion, -1, 0)  # (B, model, people)
    results["maj:percent_agreement"] = st._divide(
        np.trace(confusion, axis1=1, axis2=2), confusion.sum(axis=(1, 2))
    )
    results["maj:cohen_kappa"] = st.kappa_from_confusion(confusion, weights=ctx.kappa_weights)
    if ctx.tie is not None:
        results["maj:agreement_with_ties"] = results["maj:percent_agreement"]
        kept = np.delete(np.delete(confusion, ctx.tie, axis=1), ctx.tie, axis=2)
        results["maj:agreement_without_ties"] = st._divide(
            np.trace(kept, axis1=1, axis2=2), kept.sum(axis=(1, 2))
        )
    # The verdict compares, on items with two or more people, the model against each person with
    # the people against each other; the "each" figures add the items with one person.
    verdict_model, each, each_without_ties = PairSums(), PairSums(), PairSums()
    for block in pair_blocks(ctx, [(h, k) for h in range(k)], w.shape[0]):
        model_tables = pair_tables(ctx, rows.codes, w, block, anchor=unique, only=rows.comparable)
        verdict_model.add(model_tables, ctx.kappa_weights)
        if rows.incomparable.any():
            model_tables = model_tables + pair_tables(
                ctx, rows.codes, w, block, anchor=unique, only=rows.incomparable
            )
        each.add(model_tables, ctx.kappa_weights)
        if ctx.tie is not None:
            each_without_ties.add(np.delete(np.delete(model_tables, ctx.tie, axis=0), ctx.tie, axis=1))
    if shares_people_tables(ctx):
        people = PairSums()
        people.add(_shared_people_tables(ctx, left_out), ctx.kappa_weights)
    else:
        people = pair_sums(ctx, rows.codes, w, people_pairs(ctx), anchor=unique, only=rows.comparable)
    results["verdict:kappa_model"] = verdict_model.mean_kappa
    results["verdict:pa_model"] = verdict_model.pooled_agreement
    results["each:cohen_kappa"] = each.mean_kappa
    results["each:percent_agreement"] = each.pooled_agreement
    if ctx.tie is not None:
        results["each:agreement_with_ties"] = results["each:percent_agreement"]
        results["each:agreement_without_ties"] = each_without_ties.pooled_agreement
    results["verdict:kappa_humans"] = people.mean_kappa
    results["verdict:pa_humans"] = people.pooled_agreement
    results["verdict:kappa_diff"] = results["verdict:kappa_model"] - results["verdict:kappa_humans"]
    results["verdict:pa_diff"] = results["verdict:pa_model"] - results["verdict:pa_humans"]
    return np.stack([results[name] for name in names], axis=1)


def _shared_people_tables(ctx: Context, left_out: np.ndarray) -> np.ndarray:
    """The people's pair tables on the comparable rows inside the shared resamples: the tables over
    every item less those of the items the model left out."""
    tables = people_pair_tables(ctx)
    if left_out.shape[0]:
        codes = ctx.human_codes[left_out]
        weights = ctx.resampler.weights(left_out)
        tables = tables - pair_tables(ctx, codes, weights, people_pairs(ctx), anchor=left_out)
    return tables


# "As well as people" needs the whole interval of the difference within this much of 0 (kappa or percent
# agreement): an interval that merely holds 0 but reaches far either side shows nothing (a judge at chance
# level on twelve items had -0.719, -1.000 to +0.000), and is called inconclusive instead.
EQUIVALENCE_MARGIN = 0.1


def _verdict_undefined(why: str) -> dict:
    return {"label": "undefined", "text": f"No verdict: {why}.", "why": why}


def make_verdict(
    ctx: Context, point: np.ndarray, ci: np.ndarray | None, names: list[str], items: int
) -> dict:
    """Does the model agree with people at least as well as people agree with each other?"""
    if items == 0:
        return _verdict_undefined("no item the model rated has two or more human ratings")
    index = {name: k for k, name in enumerate(names)}
    metric, prefix = "cohen_kappa", "verdict:kappa"
    if not np.isfinite(point[index["verdict:kappa_diff"]]):
        metric, prefix = "percent_agreement", "verdict:pa"
    model_key, human_key = f"{prefix}_model", f"{prefix}_humans"
    model, humans = point[index[model_key]], point[index[human_key]]
    if not (np.isfinite(model) and np.isfinite(humans)):
        return _verdict_undefined(f"{st.ALL_IDENTICAL}: neither kappa nor percent agreement is defined")
    diff_ci = interval(ci, index[f"{prefix}_diff"])
    verdict = {
        "metric": metric,
        "items": items,
        "model": round(float(model), 6),
        "model_ci": interval(ci, index[model_key]),
        "humans": round(float(humans), 6),
        "humans_ci": interval(ci, index[human_key]),
        "difference": round(float(model - humans), 6),
        "difference_ci": diff_ci,
    }
    label = "inconclusive"
    if diff_ci is not None and diff_ci[0] > 0:
        label = "better"
    elif diff_ci is not None and diff_ci[1] < 0:
        label = "worse"
    elif diff_ci is not None and diff_ci[0] >= -EQUIVALENCE_MARGIN and diff_ci[1] <= EQUIVALENCE_MARGIN:
        label = "comparable"
    verdict["label"] = label
    verdict["text"] = verdict_text(verdict)
    return verdict


def verdict_text(v: dict) -> str:
    name = "Cohen's kappa" if v["metric"] == "cohen_kappa" else "percent agreement"
    around = {
        "better": "agrees with people better than people agree with each other",
        "worse": "agrees with people less than people agree with each other",
        "comparable": "agrees with people about as well as people agree with each other",
        "inconclusive": "cannot be told apart from people here, nor shown to agree as well",
    }[v["label"]]
    ci = v["difference_ci"]
    spread = f" (95% CI {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else " (no interval)"
    text = (
        f"It {around}: {name} {v['model']:.3f} against each person vs {v['humans']:.3f} between people "
        f"on the same {v['items']} items, a difference of {v['difference']:+.3f}{spread}."
    )
    if v["label"] == "inconclusive":
        text += (
            f" The interval reaches beyond ±{EQUIVALENCE_MARGIN:.1f}: more items rated by people and the "
            "model would tell."
        )
    return text


def disagreement_list(
    ctx: Context, col: int, model_name: str, human_names: list[str], limit: int
) -> list[dict]:
    """Items where the model is furthest from the people.

    Likert: |model - human mean|; otherwise the share of people whose label the model contradicts.
    """
    values, codes = ctx.matrix.values, ctx.matrix.codes
    people = ctx.people_rated
    usable = ctx.rated_by_column[col] & (people > 0)
    if not usable.any() or limit <= 0:
        return []
    human_vals, human_codes = values[:, ctx.people], ctx.human_codes
    present = ctx.rated_by_column[ctx.people].T
    reference, _ = ctx.reference
    if ctx.data.is_likert:
        distance = np.abs(values[:, col] - reference)
    else:
        contradicting = np.count_nonzero((human_codes != codes[:, [col]]) & present, axis=1)
        distance = contradicting / np.maximum(people, 1)
    distance = np.where(usable, distance, -1.0)
    # Only items at least as far as the limit-th furthest can be chosen: sort those alone.
    cut = np.partition(distance, -limit)[-limit] if distance.shape[0] > limit else -1.0
    chosen = np.flatnonzero((distance > 0) & (distance >= cut))
    chosen = chosen[np.lexsort((ctx.matrix.item_ids[chosen], -people[chosen], -distance[chosen]))][:limit]
    return [
        {
            "item_id": int(ctx.matrix.item_ids[n]),
            "rater": model_name,
            "value": _label(ctx, values[n, col]),
            "humans": {human_names[h]: _label(ctx, human_vals[n, h]) for h in np.flatnonzero(present[n])},
            "distance": round(float(distance[n]), 4),
            "people": int(people[n]),
            "contradicts": int(np.count_nonzero((human_codes[n] != codes[n, col]) & present[n])),
            "people_mean": round(float(reference[n]), 4) if ctx.data.is_likert else None,
        }
        for n in chosen.tolist()
    ]


def _label(ctx: Context, value: float) -> str:
    if ctx.data.is_likert:
        return f"{value:g}"
    return ctx.data.labels[int(value)]
