"""Estimates for the whole evaluation from a judge's labels plus the people's: prediction-powered inference.

Angelopoulos, Bates, Fannjiang, Jordan & Zrnic, "Prediction-powered inference", Science 2023, with
the authors' package `ppi-python` (PPI++ power tuning, its default). The people's label of an
item is the mean of their values (likert) or, per category, 1 for the majority label (split
evenly between labels that tie for the top). The judge's label is its value, or 1 for the
category it chose. Labeled items: the judge and a person rated them; unlabeled: only the judge.

`ppi_py` takes seconds to import (statsmodels, SciPy), so it is imported only when an estimate is
computed, which needs items without a human label.
"""

from __future__ import annotations

import numpy as np

from agreement.tables import Context

ALPHA = 0.05


def prediction_powered(
    y: np.ndarray, yhat: np.ndarray, yhat_unlabeled: np.ndarray, alpha: float = ALPHA
) -> dict:
    """PPI and people-only (classical) estimates of a mean, and the human labels PPI is worth.

    `effective_labels`: how many human labels a people-only interval would need to be as narrow
    as the PPI interval, n x (classical width / PPI width)^2 (both are normal intervals).
    """
    from ppi_py import classical_mean_ci, ppi_mean_ci, ppi_mean_pointestimate

    low, high = ppi_mean_ci(y, yhat, yhat_unlabeled, alpha=alpha)
    c_low, c_high = classical_mean_ci(y, alpha=alpha)
    width, classical_width = float(high[0] - low[0]), float(c_high - c_low)
    n = int(y.shape[0])
    effective = n * (classical_width / width) ** 2 if width > 0 else None
    return {
        "ppi": float(np.ravel(ppi_mean_pointestimate(y, yhat, yhat_unlabeled))[0]),
        "ppi_ci": [float(low[0]), float(high[0])],
        "classical": float(y.mean()),
        "classical_ci": [float(c_low), float(c_high)],
        "effective_labels": effective,
        "labels_gained": None if effective is None else effective - n,
    }


def majority_shares(codes: np.ndarray, levels: int) -> np.ndarray:
    """(items, levels): 1 on each item's majority label, split evenly between tied top labels."""
    counts = np.zeros((codes.shape[0], levels))
    for label in range(levels):
        counts[:, label] = (codes == label).sum(axis=1)
    top = counts.max(axis=1, keepdims=True)
    winners = (counts == top) & (top > 0)
    return winners / np.maximum(winners.sum(axis=1, keepdims=True), 1)


def ppi_entry(ctx: Context, col: int, alpha: float = ALPHA) -> dict:
    """`rubrics[].raters[].ppi`: the likert mean or each category's share over the evaluation's items."""
    values, codes = ctx.matrix.values, ctx.matrix.codes
    model_ok = ctx.rated_by_column[col]
    human_n = ctx.people_rated
    labeled, unlabeled = model_ok & (human_n > 0), model_ok & (human_n == 0)
    entry: dict = {
        "alpha": alpha,
        "labeled": int(labeled.sum()),
        "unlabeled": int(unlabeled.sum()),
        "human_only": int((~model_ok & (human_n > 0)).sum()),
        "estimates": [],
        "why": None,
    }
    if entry["labeled"] < 2 or entry["unlabeled"] < 2:
        entry["why"] = (
            "needs two or more items rated by the judge and a person, and two or more rated by the judge "
            f"alone ({entry['labeled']} and {entry['unlabeled']})"
        )
        return entry
    if ctx.data.is_likert:
        people = np.nanmean(values[labeled, ctx.people], axis=1)
        model = values[:, col]
        quantities: list[tuple[str, str | None, np.ndarray, np.ndarray, np.ndarray]] = [
            ("mean", None, people, model[labeled], model[unlabeled])
        ]
    else:
        shares = majority_shares(codes[labeled, ctx.people], ctx.levels)
        quantities = [
            (
                "share",
                label,
                shares[:, n],
                (codes[labeled, col] == n) * 1.0,
                (codes[unlabeled, col] == n) * 1.0,
            )
            for n, label in enumerate(ctx.data.labels)
        ]
    for quantity, label, y, yhat, yhat_unlabeled in quantities:
        entry["estimates"].append(
            {"quantity": quantity, "label": label, **prediction_powered(y, yhat, yhat_unlabeled, alpha)}
        )
    return entry
