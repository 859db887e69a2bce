"""The one-screen summary at the top of the report: per rubric and model, the verdict with the model's
agreement beside the people's (with CIs) and, for judge runs with position swap, position consistency."""

from __future__ import annotations

from agreement.presentation import metric_label

VERDICT_PHRASES = {
    "better": "agrees better than people do",
    "worse": "agrees less than people do",
    "comparable": "as well as people, within uncertainty",
    "inconclusive": "too uncertain to tell",
    "undefined": "no verdict",
}


def _figure(value: float | None, ci: list[float] | None) -> dict:
    return {
        "value": "–" if value is None else f"{value:.3f}",
        "ci": f"{ci[0]:.3f} – {ci[1]:.3f}" if ci else "",
    }


def _people_figure(verdict: dict, people: dict) -> dict:
    """The people's figure beside the verdict. When it is the people's own figure of the rubric's table
    (the same metric on the same items, the model having rated them all), that figure's interval: the
    verdict's comes from other resamples (those it shares with the model), and one page showed the same
    0.926 with two intervals."""
    metric, value = verdict.get("metric"), verdict.get("humans")
    same = (
        metric in people
        and people.get("items") == verdict.get("items")
        and value is not None
        and people[metric] is not None
        and abs(people[metric] - value) < 1e-6
    )
    if same:
        return _figure(people[metric], (people.get("ci") or {}).get(metric))
    return _figure(value, verdict.get("humans_ci"))


def _consistency(run_id: int | None, consistency: dict[int, dict]) -> dict | None:
    found = consistency.get(run_id) if run_id else None
    if not found or found["share"] is None:
        return None
    return {**found, "percent": f"{100 * found['share']:.1f}%"}


def overview_rows(blocks: list[dict], consistency: dict[int, dict]) -> list[dict]:
    """One row per (rubric, model rater), in report order; a rubric without model ratings gets one row too."""
    rows = []
    for number, block in enumerate(blocks, start=1):
        head = {
            "rubric": block["rubric"],
            "version": block["version"],
            "kind": block["kind"],
            "anchor": number,
        }
        if not block["raters"]:
            rows.append({**head, "model": None})
            continue
        for rater in block["raters"]:
            verdict = rater.get("verdict") or {}
            label = verdict.get("label", "undefined")
            rows.append(
                {
                    **head,
                    "model": rater["rater"],
                    "simulated": rater.get("simulated", False),
                    "verdict": label,
                    "verdict_phrase": VERDICT_PHRASES.get(label, label),
                    "why": verdict.get("why", ""),
                    "metric": metric_label(verdict["metric"], block["kind"]) if "metric" in verdict else "",
                    "items": verdict.get("items"),
                    "model_figure": _figure(verdict.get("model"), verdict.get("model_ci")),
                    "people_figure": _people_figure(verdict, block["human_human"]),
                    "consistency": _consistency(rater.get("judge_run"), consistency),
                }
            )
    return rows


def judge_run_ids(blocks: list[dict]) -> list[int]:
    return sorted(
        {rater["judge_run"] for block in blocks for rater in block["raters"] if rater.get("judge_run")}
    )
