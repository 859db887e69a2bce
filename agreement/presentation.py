"""Turn a report (agreement.report's JSON) into rows for the page and the CSV download."""

from __future__ import annotations

import io
from typing import Any

from evaluations import safe_csv

LABELS = {
    "krippendorff_alpha": "Krippendorff's alpha",
    "percent_agreement": "Percent agreement",
    "cohen_kappa": "Cohen's kappa",
    "fleiss_kappa": "Fleiss' kappa",
    "agreement_with_ties": "Agreement with ties (S1)",
    "agreement_without_ties": "Agreement without ties (S2)",
    "spearman": "Spearman's rho",
    "kendall_tau_b": "Kendall's tau-b",
    "pearson": "Pearson's r",
    "within_one": "Within one",
    "mae": "Mean absolute error",
    "bias": "Bias (model - people)",
    "accuracy": "Accuracy",
}
DISAGREEMENTS_SHOWN = 8
# Pairs of people listed on the page (419 people make 87,571; every one is in the JSON and CSV).
PAIRS_SHOWN = 500
SKIP = {"why", "ci", "items", "raters", "pairs", "items_without_majority"}
CSV_COLUMNS = [
    "rubric",
    "version",
    "kind",
    "block",
    "rater",
    "other",
    "items",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "why",
]


# Names that say what a figure is, where it depends on the rubric's kind (see agreement.tables.Context).
KIND_LABELS = {
    ("cohen_kappa", "likert"): "Cohen's kappa, quadratic weights",
    ("cohen_kappa", "categorical"): "Cohen's kappa, unweighted",
    ("cohen_kappa", "pairwise"): "Cohen's kappa, unweighted",
    ("krippendorff_alpha", "likert"): "Krippendorff's alpha, ordinal",
    ("krippendorff_alpha", "categorical"): "Krippendorff's alpha, nominal",
    ("krippendorff_alpha", "pairwise"): "Krippendorff's alpha, nominal",
    ("percent_agreement", "likert"): "Percent agreement (same scale point)",
    ("fleiss_kappa", "likert"): "Fleiss' kappa, unweighted",
}


def metric_label(metric: str, kind: str = "") -> str:
    if metric.startswith("f1_"):
        return f"F1 of {metric[3:]}"
    return KIND_LABELS.get((metric, kind)) or LABELS.get(metric, metric.replace("_", " "))


def fmt(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def metric_rows(figures: dict, ci: dict | None = None, kind: str = "") -> list[dict]:
    """[{metric, label, value, ci, why}] for every metric in a block, in the block's order."""
    ci = ci or figures.get("ci") or {}
    why = figures.get("why") or {}
    rows = []
    for metric, value in figures.items():
        if metric in SKIP or isinstance(value, dict | list | str):  # a pair's "a" and "b" are names
            continue
        interval = ci.get(metric)
        rows.append(
            {
                "metric": metric,
                "label": metric_label(metric, kind),
                "value": fmt(value),
                "ci": f"{interval[0]:.3f} – {interval[1]:.3f}" if interval else "",
                "why": why.get(metric, ""),
            }
        )
    return rows


def comparison_rows(rater: dict, kind: str = "") -> list[dict]:
    """One row per metric: the model against the people's majority/mean and against each person."""
    major = {row["metric"]: row for row in metric_rows(rater["vs_majority"], rater.get("ci"), kind)}
    each_ci = rater.get("ci_vs_each_human")
    each = {row["metric"]: row for row in metric_rows(rater["vs_each_human"], each_ci, kind)}
    rows = []
    for metric in [*major, *(m for m in each if m not in major)]:
        a, b = major.get(metric), each.get(metric)
        rows.append(
            {
                "label": metric_label(metric, kind),
                "majority": a["value"] if a else "–",
                "majority_ci": a["ci"] if a else "",
                "each": b["value"] if b else "–",
                "each_ci": b["ci"] if b else "",
                "why": "; ".join(sorted({x["why"] for x in (a, b) if x and x["why"]})),
            }
        )
    return rows


def heat_map(confusion: dict) -> dict:
    """Confusion counts with a 0-1 shade per cell (share of its row), for the CSS heat map."""
    rows: list[dict] = []
    for label, counts in zip(confusion["labels"], confusion["matrix"], strict=True):
        total = sum(counts)
        cells = [
            {"count": count, "shade": round(count / total, 3) if total else 0, "diagonal": n == len(rows)}
            for n, count in enumerate(counts)
        ]
        rows.append({"label": label, "cells": cells, "total": total})
    return {"labels": confusion["labels"], "rows": rows}


def distribution_bars(block: dict) -> list[dict]:
    """Per label, the share of each rater group's ratings that fell on it (people first, then models)."""
    series = list(block["distribution"].items())
    totals = {name: sum(counts) for name, counts in series}
    if not any(totals.values()):  # nothing rated here: no bars of 0.0% (the page says so)
        return []
    bars = []
    for n, label in enumerate(block["labels"]):
        entries = []
        for index, (name, counts) in enumerate(series):
            share = counts[n] / totals[name] if totals[name] else 0.0
            entries.append(
                {
                    "name": "people" if name == "human" else name,
                    "series": 0 if name == "human" else 1 + (index - 1) % 4,
                    "count": counts[n],
                    "percent": round(100 * share, 1),
                }
            )
        bars.append({"label": label, "entries": entries})
    return bars


def present_rubric(block: dict) -> dict:
    hh = block["human_human"]
    raters = []
    for rater in block["raters"]:
        raters.append(
            {
                **rater,
                "rows": comparison_rows(rater, block["kind"]),
                "heat": heat_map(rater["confusion"]),
            }
        )
    by_model: dict[str, list[dict]] = {}
    for entry in block.get("disagreements", []):
        shown = by_model.setdefault(entry["rater"], [])
        if len(shown) < DISAGREEMENTS_SHOWN:
            shown.append(entry)
    return {
        **block,
        "disagreements_by_model": by_model,
        "human_rows": metric_rows(hh, kind=block["kind"]),
        "pairs": hh.get("pairs", [])[:PAIRS_SHOWN],
        "pairs_total": len(hh.get("pairs", [])),
        "model_raters": raters,
        "bars": distribution_bars(block),
    }


def report_csv(report: dict) -> str:
    """The report flattened to one row per figure, written through `evaluations.safe_csv`."""
    out = io.StringIO()
    writer = safe_csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for block in report["rubrics"]:
        head = [block["rubric"], block["version"], block["kind"]]
        hh = block["human_human"]
        _write_block(writer, head, "human_human", "", "", hh)
        for pair in hh.get("pairs", []):
            _write_block(writer, head, "pair", pair["a"], pair["b"], pair)
        for rater in block["raters"]:
            _write_block(
                writer, head, "vs_majority", rater["rater"], "", rater["vs_majority"], rater.get("ci")
            )
            each_ci = rater.get("ci_vs_each_human")
            _write_block(writer, head, "vs_each_human", rater["rater"], "", rater["vs_each_human"], each_ci)
            writer.writerow(
                [
                    *head,
                    "counts",
                    rater["rater"],
                    "",
                    rater["items"],
                    "parse_failures",
                    rater["parse_failures"],
                    "",
                    "",
                    "",
                ]
            )
            swap = rater.get("position_consistency")
            if swap:
                why = f"{swap['consistent']} of {swap['pairs']} verdicts the same with A and B swapped"
                writer.writerow([*head, "position_consistency", rater["rater"], "", swap["pairs"], "share",
                                 "" if swap["share"] is None else swap["share"], "", "", why])  # fmt: skip
            _write_verdict(writer, [*head, "verdict", rater["rater"]], rater.get("verdict"))
            _write_alt_test(writer, [*head, "alt_test", rater["rater"]], rater.get("alt_test"))
            _write_ppi(writer, [*head, "ppi", rater["rater"]], rater.get("ppi"))
    return out.getvalue()


def _write_verdict(writer: Any, head: list, verdict: dict | None) -> None:
    """The verdict (`other`: better, worse, comparable, inconclusive or undefined; `why`: its sentence): the
    model's figure against each person, the people's with each other on the same items, the difference."""
    if not verdict:
        return
    label, text = verdict.get("label", "undefined"), verdict.get("text", "")
    if "metric" not in verdict:
        writer.writerow([*head, label, "", "verdict", "", "", "", text])
        return
    for part, value, interval in (
        ("model", verdict["model"], verdict.get("model_ci")),
        ("people", verdict["humans"], verdict.get("humans_ci")),
        ("difference", verdict["difference"], verdict.get("difference_ci")),
    ):
        low, high = interval or ["", ""]
        metric = f"{verdict['metric']}_{part}"
        writer.writerow([*head, label, verdict["items"], metric, value, low, high, text])


def _write_alt_test(writer: Any, head: list, alt: dict | None) -> None:
    """The alternative annotator test: the verdict's figures (`other` says epsilon and metric), then each
    left-out person's p-value (`other` is the person; `why` says whether the test rejected it)."""
    if not alt:
        return
    setting = f"epsilon={alt['epsilon']} {alt['metric']}"
    why = alt.get("why") or alt.get("warning") or ""
    for metric in ("winning_rate", "advantage_probability", "passed"):
        value = alt.get(metric)
        writer.writerow([*head, setting, alt["items"], metric, "" if value is None else value, "", "", why])
    for person in alt.get("people", []):
        verdict = f"rejected at q={alt['q']}" if person["rejected"] else "not rejected"
        writer.writerow(
            [*head, person["rater"], person["items"], "p_value", person["p_value"], "", "", verdict]
        )


def _write_ppi(writer: Any, head: list, ppi: dict | None) -> None:
    """Prediction-powered estimates beside the people-only ones (`other`: the label of a share), and the
    human labels each is worth."""
    if not ppi:
        return
    items = ppi["labeled"] + ppi["unlabeled"]
    if not ppi["estimates"]:
        writer.writerow([*head, "", items, "ppi", "", "", "", ppi.get("why") or ""])
    for estimate in ppi["estimates"]:
        label, quantity = estimate["label"] or "", estimate["quantity"]
        rows = [
            (f"ppi_{quantity}", estimate["ppi"], estimate["ppi_ci"]),
            (f"people_only_{quantity}", estimate["classical"], estimate["classical_ci"]),
            ("effective_labels", estimate["effective_labels"], ["", ""]),
        ]
        for metric, value, (low, high) in rows:
            writer.writerow([*head, label, items, metric, "" if value is None else value, low, high, ""])


def _write_block(
    writer: Any, head: list, name: str, rater: str, other: str, figures: dict, ci: dict | None = None
) -> None:
    for row in metric_rows(figures, ci):
        interval = (ci or figures.get("ci") or {}).get(row["metric"]) or ["", ""]
        value = figures[row["metric"]]
        writer.writerow(
            [
                *head,
                name,
                rater,
                other,
                figures.get("items", ""),
                row["metric"],
                "" if value is None else value,
                interval[0],
                interval[1],
                row["why"],
            ]
        )
