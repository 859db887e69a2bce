"""Position consistency of judge runs with position swap: does the verdict survive swapping A and B?

For each (item, sample) a run judged in both orders (values stored in canonical orientation), the
two orders agree when they give the same value. The share of such pairs that agree is the run's
position consistency (Zheng et al. 2023 call its complement position bias).
"""

from __future__ import annotations

from django.db.models import Count, F, OuterRef, Q, Subquery


def position_consistency(run_ids: list[int]) -> dict[int, dict]:
    """{run id: {"pairs", "consistent", "share"}} for the runs that judged some items in both orders."""
    from judges.models import JudgeCall

    if not run_ids:
        return {}
    swapped = JudgeCall.objects.filter(
        run_id=OuterRef("run_id"), item_id=OuterRef("item_id"), sample=OuterRef("sample"), swapped=True
    ).exclude(value="")
    rows = (
        JudgeCall.objects.filter(run_id__in=run_ids, swapped=False)
        .exclude(value="")
        .annotate(other=Subquery(swapped.values("value")[:1]))
        .exclude(other=None)
        .values("run_id")
        .annotate(pairs=Count("id"), consistent=Count("id", filter=Q(value=F("other"))))
        .order_by()
    )
    return {
        row["run_id"]: {
            "pairs": row["pairs"],
            "consistent": row["consistent"],
            "share": row["consistent"] / row["pairs"] if row["pairs"] else None,
        }
        for row in rows
    }


def with_position_consistency(report: dict) -> dict:
    """The report with `rubrics[].raters[].position_consistency` ({"pairs", "consistent", "share"}, or None
    for a rater that is no judge run with position swap), as the JSON and CSV downloads carry it."""
    from agreement.overview import judge_run_ids

    found = position_consistency(judge_run_ids(report["rubrics"]))
    rubrics = [
        {
            **block,
            "raters": [
                {**rater, "position_consistency": found.get(rater.get("judge_run") or 0)}
                for rater in block["raters"]
            ],
        }
        for block in report["rubrics"]
    ]
    return {**report, "rubrics": rubrics}
