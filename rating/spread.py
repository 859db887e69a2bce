"""The rating queue hands out no two items with the same baseline one after the other where it can avoid it.

Pairwise data often compares several systems against one baseline reply, item after item; a rater who sees
the same baseline twice in a row learns which card is the baseline, and tires of it. When the queue is first
built, slots with the same baseline text are moved apart: the order stays the evaluation's (dataset or
shuffled) except where an item would follow one with the same baseline, which then waits for the next item
that differs.
"""

import hashlib
import heapq
from collections import deque
from collections.abc import Hashable, Sequence

from evaluations.models import Evaluation

from .models import Slot


def spread(groups: Sequence[Hashable | None]) -> list[int]:
    """Positions of `groups` in a new order where no two neighbours share a group where that can be avoided.
    None is no group.

    Greedy: the earliest item whose group differs from the last one's, unless one group holds more than
    half of what is left; that group goes now, or its items could no longer be kept apart.
    """
    queues: dict[Hashable, deque[int]] = {}
    for position, group in enumerate(groups):
        queues.setdefault(("item", position) if group is None else ("group", group), deque()).append(position)
    # Both heaps are lazy: an entry whose group has since moved on is dropped when it comes up.
    earliest = [(queue[0], key) for key, queue in queues.items()]
    largest = [(-len(queue), queue[0], key) for key, queue in queues.items()]
    heapq.heapify(earliest)
    heapq.heapify(largest)
    order: list[int] = []
    last: Hashable = None
    left = len(groups)
    while left:
        while -largest[0][0] != len(queues[largest[0][2]]):
            heapq.heappop(largest)
        count, top = -largest[0][0], largest[0][2]
        forced = top != last and count > left // 2
        key = top if forced else _earliest_other(earliest, queues, last)
        queue = queues[key]
        order.append(queue.popleft())
        left -= 1
        if queue:
            heapq.heappush(earliest, (queue[0], key))
            heapq.heappush(largest, (-len(queue), queue[0], key))
        last = key
    return order


def _earliest_other(
    earliest: list[tuple[int, Hashable]], queues: dict[Hashable, deque[int]], last: Hashable
) -> Hashable:
    """The group with the earliest waiting item other than `last` (`last` itself when no other is left)."""
    held_back = []
    found = None
    while earliest:
        head, key = heapq.heappop(earliest)
        if not queues[key] or queues[key][0] != head:
            continue  # stale
        if key == last and found is None:
            held_back.append((head, key))
            continue
        found = key
        break
    for entry in held_back:
        heapq.heappush(earliest, entry)
    if found is None:
        return last
    return found


def _baseline_key(baseline: object) -> str | None:
    if not isinstance(baseline, dict) or not str(baseline.get("text", "")).strip():
        return None
    return hashlib.sha256(str(baseline["text"]).strip().encode()).hexdigest()[:16]


def spread_same_baselines(*, evaluation: Evaluation) -> int:
    """Reorder the evaluation's queue (only before anyone was handed an item); returns how many slots moved.

    The ranks stay the same set of numbers, handed out in the new order, so only moved slots are written."""
    rows = list(
        Slot.objects.filter(evaluation=evaluation)
        .order_by("rank", "pk")
        .values_list("pk", "rank", "item__baseline")
        .iterator(chunk_size=5000)
    )
    groups = [_baseline_key(baseline) for _, _, baseline in rows]
    if len({group for group in groups if group is not None}) == len([g for g in groups if g is not None]):
        return 0  # every baseline differs: nothing to move
    moved = [
        Slot(pk=rows[position][0], rank=rows[place][1])
        for place, position in enumerate(spread(groups))
        if position != place
    ]
    Slot.objects.bulk_update(moved, ["rank"], batch_size=1000)
    return len(moved)
