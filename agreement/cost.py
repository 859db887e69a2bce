"""What an agreement report will cost, worked out before it starts, and the budgets it must fit in.

A report's memory and time follow from each rubric version's people, models, items and labels and the
resamples, not from its number of ratings: 5,000 ratings by 419 people on 12 items make 87,571 pairs of
people, each compared in every resample (issue 34). `estimate_report` reads those counts in one query;
`cost_of` turns them into bytes and seconds with the figures below, measured on a 2-core machine
(bench/agreement_report.py --shapes prints the estimate beside the measured peak and time).

Above AGREEMENT_INLINE_SECONDS the page has a worker compute it; above AGREEMENT_MAX_BYTES or
AGREEMENT_MAX_SECONDS nothing computes it: `check` refuses, saying what to reduce. The memory bound is
1 GB by default: 20 people x 100k items (3 per item, 2 models) peaked at 493-568 MB, mostly per-item arrays
of each figure group; the pairs of people, which grew without bound, are built in blocks
(tables.pair_blocks) and cost what the estimate says.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count

from agreement.reading import scale_of
from agreement.tables import PAIRS_PER_BLOCK, TABLE_BLOCK_BYTES
from evaluations.models import Evaluation, Rating

# The process before the report: Python, Django, NumPy, SciPy (measured: 98 MB).
BASE_BYTES = 100_000_000
# One pair of people in the report: its figures (~0.75 KB), their finite_only copy and JSON (~0.85 KB).
PAIR_BYTES = 1_600
# ...and while a block of PAIRS_PER_BLOCK pairs is worked out, ~3 KB each.
PAIR_PASS_BYTES = 3_000
# Each rating's place in the (items, raters) matrix and its copies (values, codes, transposes).
CELL_BYTES = 48
# Each item in each figure group running at once (and the report's own thread: the alt-test, splits):
# its rows, patterns, bootstrap statistics (measured: ~100 MB a group at 100k items).
ITEM_GROUP_BYTES = 500
# Each rating as read (ids, values, codes, before the matrix).
RATING_BYTES = 64
# The shared bootstrap weights of the items are kept (one byte each per resample) up to this much
# (bootstrap.ItemResamples.keep), each chunk of them drawn as 4M weights at most (its budget).
KEPT_RESAMPLES = 256_000_000
CHUNK_WEIGHTS = 4_000_000
# The people's tables of every pair are kept for the models' verdicts when all of them fit in this much
# (tables.shares_people_tables); otherwise each model's verdict sums them again.
SHARED_PEOPLE_TABLES = 64_000_000
# Threads computing figure groups at once (report.GROUP_THREADS takes it from here): each holds a block.
GROUP_THREADS = 3

# Seconds per cell of the pairs' confusion tables in one resample (the kappas' passes), per pair of
# raters and figure group (its sparse plan and listed figures), and per item, resample and figure group.
TABLE_CELL_SECONDS = 35e-9
PAIR_SECONDS = 250e-6
ITEM_RESAMPLE_SECONDS = 4e-9

# Defaults of the settings of the same names.
INLINE_SECONDS = 1.0
MAX_BYTES = 1_000_000_000
MAX_SECONDS = 600


@dataclass(frozen=True)
class RubricShape:
    """What one rubric version's block of the report costs follows from: who rated how much."""

    rubric: str
    people: int
    models: int
    items: int
    labels: int
    people_ratings: int = 0  # for the pairs' shared items (0: every person rated every item)

    @property
    def pairs(self) -> int:
        return self.people * (self.people - 1) // 2

    def shared_items(self) -> int:
        """How many (pair of people, item) there are: each item's people, two at a time."""
        if not self.people_ratings or not self.items:
            return self.pairs * self.items
        per_item = self.people_ratings / self.items
        return int(self.items * per_item * max(0.0, per_item - 1) / 2)

    def bytes(self, resamples: int) -> int:
        chunk = max(1, min(resamples, CHUNK_WEIGHTS // max(1, self.items)))
        cells = self.labels * self.labels
        people_tables = self.pairs * cells * resamples * 4
        shared = people_tables <= SHARED_PEOPLE_TABLES
        groups = min(GROUP_THREADS, 1 + self.models)
        block = min(TABLE_BLOCK_BYTES, max(self.pairs, self.people) * cells * chunk * 8)
        kept = self.items * resamples if self.items * resamples <= KEPT_RESAMPLES else self.items * chunk
        return (
            groups * 3 * block  # each group's block of tables and the kappas' passes over it
            + (people_tables if shared else 0)
            + kept
            + groups * self.items * chunk * 4  # each group's float32 weights of a chunk
            + self.items * (self.people + self.models) * CELL_BYTES
            + self.items * (groups + 1) * ITEM_GROUP_BYTES
            + ((self.people_ratings or self.people * self.items) + self.models * self.items) * RATING_BYTES
            + self.pairs * PAIR_BYTES
            + min(self.pairs, PAIRS_PER_BLOCK) * PAIR_PASS_BYTES
            + self.shared_items() * 8 * 3  # the sparse plans of the pairs' tables (index and weight)
        )

    def seconds(self, resamples: int) -> float:
        cells = self.labels * self.labels
        shared = self.pairs * cells * resamples * 4 <= SHARED_PEOPLE_TABLES
        # The people's pairs: once for their own figures, and again in each model's verdict unless shared.
        people_groups = 1 + (0 if shared else self.models)
        table_cells = (self.pairs * people_groups + self.people * self.models * 2) * cells * resamples
        return (
            table_cells * TABLE_CELL_SECONDS
            + self.pairs * PAIR_SECONDS * (1 + people_groups)
            + self.items * resamples * (1 + self.models) * ITEM_RESAMPLE_SECONDS
        )


@dataclass(frozen=True)
class ReportCost:
    """A report's estimated peak memory (the whole process) and time, and the shapes they came from."""

    shapes: list[RubricShape]
    resamples: int
    bytes: int
    seconds: float

    @property
    def inline(self) -> bool:
        """Cheap enough to compute inside a page's request."""
        return self.seconds <= inline_seconds() and self.bytes <= max_bytes()

    @property
    def refused(self) -> str:
        """Why no one computes it, saying what to reduce; "" when it fits in the budgets."""
        if self.bytes <= max_bytes() and self.seconds <= max_seconds():
            return ""
        worst = max(self.shapes, key=lambda s: (s.bytes(self.resamples), s.seconds(self.resamples)))
        fits = most_people(worst, self.resamples)
        reduce = (
            f"Reduce the people rating one rubric to at most {fits:,} (for example import bulk raters into "
            f"an evaluation of their own)"
            if fits >= 2
            else "Split the items into smaller evaluations"  # not the people: the items alone are too many
        )
        return (
            f"this report would need about {_size(self.bytes)} of memory and {_duration(self.seconds)} "
            f"({worst.rubric}: {worst.people:,} people, so {worst.pairs:,} pairs of people compared in each "
            f"of {self.resamples:,} resamples, on {worst.items:,} items), above this server's limit of "
            f"{_size(max_bytes())} and {_duration(max_seconds())} for one report. {reduce}, or compute it "
            f"from the command line with fewer resamples (manage.py agreement --resamples 200)"
        )


def cost_of(shapes: list[RubricShape], resamples: int) -> ReportCost:
    """The rubric versions are computed one after another: the largest one's memory, every one's time,
    and every one's figures kept for the report."""
    kept = sum(shape.pairs * PAIR_BYTES for shape in shapes)
    peak = max((shape.bytes(resamples) - shape.pairs * PAIR_BYTES for shape in shapes), default=0)
    return ReportCost(
        shapes=shapes,
        resamples=resamples,
        bytes=BASE_BYTES + peak + kept,
        seconds=sum(shape.seconds(resamples) for shape in shapes),
    )


def most_people(shape: RubricShape, resamples: int) -> int:
    """The most people this rubric could have, all else the same, for its report to fit the budgets."""
    low, high = 0, max(2, shape.people)
    while low < high:
        middle = (low + high + 1) // 2
        trial = RubricShape(shape.rubric, middle, shape.models, shape.items, shape.labels)
        cost = cost_of([trial], resamples)
        if cost.bytes <= max_bytes() and cost.seconds <= max_seconds():
            low = middle
        else:
            high = middle - 1
    return low


def estimate_report(*, evaluation: Evaluation, resamples: int) -> ReportCost:
    """The cost of the evaluation's whole report (a slice of its items costs no more), from one query:
    each rubric version's raters of each kind, their items and ratings."""
    versions = {version.pk: version for version in evaluation.ordered_versions(None)}
    counts = (
        Rating.objects.filter(evaluation=evaluation)
        .values("rubric_version_id", "rater__kind")
        .annotate(
            raters=Count("rater_id", distinct=True), items=Count("item_id", distinct=True), n=Count("id")
        )
    )
    found: dict[int, dict[str, dict[str, int]]] = {}
    for row in counts:
        found.setdefault(row["rubric_version_id"], {})[row["rater__kind"]] = {
            "raters": row["raters"],
            "items": row["items"],
            "n": row["n"],
        }
    shapes = []
    for pk, kinds in found.items():
        version = versions.get(pk)
        if version is None:  # ratings of a version the evaluation no longer has: not in the report
            continue
        people, models = kinds.get("human", {}), kinds.get("model", {})
        shapes.append(
            RubricShape(
                rubric=str(version),
                people=people.get("raters", 0),
                models=models.get("raters", 0),
                items=max(people.get("items", 0), models.get("items", 0)),
                labels=max(2, len(scale_of(version)[0])),
                people_ratings=people.get("n", 0),
            )
        )
    return cost_of(shapes, resamples)


class ReportTooLarge(ValueError):
    """The report's estimated cost is above the server's budgets; the message says what to reduce."""


def check(cost: ReportCost) -> None:
    if cost.refused:
        raise ReportTooLarge(cost.refused)


def inline_seconds() -> float:
    return float(getattr(settings, "AGREEMENT_INLINE_SECONDS", INLINE_SECONDS))


def max_bytes() -> int:
    return int(getattr(settings, "AGREEMENT_MAX_BYTES", MAX_BYTES))


def max_seconds() -> float:
    return float(getattr(settings, "AGREEMENT_MAX_SECONDS", MAX_SECONDS))


def _size(count: float) -> str:
    return f"{count / 1e9:.1f} GB" if count >= 1e9 else f"{count / 1e6:.0f} MB"


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 120 else f"{seconds:.0f} seconds"
