"""Handing out items: at most N people per item, never twice to one person, expiry, order, concurrency."""

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from datasets.models import Item
from evaluations.models import Rating
from rating import services
from rating.models import Assignment, Slot, pairwise_left_side, shuffled_rank
from rating.progress import annotator_progress, progress_and_upkeep
from tests import factories
from tests.rating.conftest import add_annotators

pytestmark = pytest.mark.django_db


def handed_out(evaluation, user, **kwargs) -> Assignment:
    """next_assignment where the test expects an item to be handed out."""
    assignment = services.next_assignment(evaluation=evaluation, user=user, **kwargs)
    assert assignment is not None
    return assignment


def rate(evaluation, assignment, value="3"):
    answers = {
        version.pk: services.Answer(
            version=version,
            value=version.scale_values[0] if version.kind == "pairwise" else value,
            explanation="because",
        )
        for version in evaluation.ordered_versions()
    }
    return services.submit_ratings(
        evaluation=evaluation, item_id=assignment.item_id, user=assignment.user, answers=answers
    )


def test_next_item_follows_dataset_order_and_resumes_the_open_reservation(evaluation, annotator):
    first = handed_out(evaluation, annotator)
    again = handed_out(evaluation, annotator)
    assert first.item.position == 0
    assert again.pk == first.pk
    rate(evaluation, first)
    second = handed_out(evaluation, annotator)
    assert second.item.position == 1


def test_an_item_never_gets_more_than_overlap_raters(evaluation):
    users = add_annotators(evaluation, 5)
    handed = [handed_out(evaluation, user).item_id for user in users]
    assert max(Counter(handed).values()) == 2  # overlap 2, four items
    assert sorted(Counter(handed).values()) == [1, 2, 2]


def test_one_person_never_gets_the_same_item_twice_and_runs_out(evaluation, annotator):
    seen = []
    while (assignment := services.next_assignment(evaluation=evaluation, user=annotator)) is not None:
        seen.append(assignment.item_id)
        rate(evaluation, assignment)
    assert len(seen) == len(set(seen)) == 4


def test_done_items_stay_counted_so_the_pool_empties_at_n_ratings(evaluation):
    users = add_annotators(evaluation, 3)
    for user in users:
        while (assignment := services.next_assignment(evaluation=evaluation, user=user)) is not None:
            rate(evaluation, assignment)
    per_item = Counter(Assignment.objects.filter(status="done").values_list("item_id", flat=True))
    assert list(per_item.values()) == [2, 2, 2, 2]
    assert not Slot.objects.filter(evaluation=evaluation, is_open=True).exists()


def test_expired_reservation_returns_to_the_pool(evaluation):
    evaluation.overlap = 1
    evaluation.save()
    first, second = add_annotators(evaluation, 2)
    held = handed_out(evaluation, first)
    later = timezone.now() + timedelta(minutes=evaluation.reservation_minutes + 1)
    taken_over = handed_out(evaluation, second, now=later)
    assert taken_over.item_id == held.item_id
    held.refresh_from_db()
    assert held.status == "expired"


def test_coming_back_late_keeps_your_reservation_if_nobody_took_it(evaluation, annotator):
    held = handed_out(evaluation, annotator)
    later = timezone.now() + timedelta(minutes=evaluation.reservation_minutes + 1)
    again = handed_out(evaluation, annotator, now=later)
    assert again.pk == held.pk and again.status == "reserved"
    assert again.reserved_until > later


def test_late_submit_saves_while_the_item_still_has_room(evaluation, annotator):
    held = handed_out(evaluation, annotator)
    later = timezone.now() + timedelta(minutes=evaluation.reservation_minutes + 1)
    assert services.release_expired(evaluation=evaluation, now=later) == 1
    result = rate(evaluation, held)
    assert result.reclaimed and result.created == 2
    assert Slot.objects.get(evaluation=evaluation, item=held.item).claims == 1


def test_late_submit_is_refused_when_others_filled_the_item(evaluation, annotator):
    evaluation.overlap = 1
    evaluation.save()
    (other,) = add_annotators(evaluation, 1)
    held = services.next_assignment(evaluation=evaluation, user=annotator)
    later = timezone.now() + timedelta(minutes=evaluation.reservation_minutes + 1)
    rate(evaluation, services.next_assignment(evaluation=evaluation, user=other, now=later))
    with pytest.raises(services.RatingRefused, match="rated by enough people"):
        rate(evaluation, held)
    assert not Rating.objects.filter(rater__user=annotator).exists()


def test_skip_frees_the_item_for_others_but_not_for_the_skipper(evaluation, annotator):
    evaluation.overlap = 1
    evaluation.save()
    (other,) = add_annotators(evaluation, 1)
    held = handed_out(evaluation, annotator)
    services.set_aside(
        evaluation=evaluation, item_id=held.item_id, user=annotator, reason="unclear", flag=False
    )
    assert handed_out(evaluation, other).item_id == held.item_id
    assert handed_out(evaluation, annotator).item_id != held.item_id


def test_people_move_forward_and_pick_up_returned_items_at_the_end(evaluation, annotator):
    evaluation.overlap = 1
    evaluation.save()
    (other,) = add_annotators(evaluation, 1)
    first = handed_out(evaluation, other)  # position 0
    mine = [handed_out(evaluation, annotator)]  # position 1
    services.set_aside(evaluation=evaluation, item_id=first.item_id, user=other, reason="later", flag=False)
    rate(evaluation, mine[0])
    while (assignment := services.next_assignment(evaluation=evaluation, user=annotator)) is not None:
        mine.append(assignment)
        rate(evaluation, assignment)
    assert [a.item.position for a in mine] == [1, 2, 3, 0]


def test_skip_without_reason_is_refused_and_changes_nothing(evaluation, annotator):
    held = handed_out(evaluation, annotator)
    with pytest.raises(services.RatingRefused, match="reason"):
        services.set_aside(evaluation=evaluation, item_id=held.item_id, user=annotator, reason=" ", flag=True)
    held.refresh_from_db()
    assert held.status == "reserved"


def test_people_outside_the_evaluation_get_nothing(evaluation, outsider):
    with pytest.raises(services.NotAnnotator):
        services.next_assignment(evaluation=evaluation, user=outsider)
    assert not Assignment.objects.exists()


def test_shuffled_order_is_fixed_per_evaluation_and_matches_python(project, dataset, likert, annotator):
    evaluation = factories.make_evaluation(project, dataset, [likert], annotators=[annotator])
    evaluation.order = "shuffled"
    evaluation.save()
    services.ensure_slots(evaluation=evaluation)
    ranks = dict(Slot.objects.filter(evaluation=evaluation).values_list("item_id", "rank"))
    assert ranks == {
        item_id: shuffled_rank(evaluation_id=evaluation.pk, item_id=item_id) for item_id in ranks
    }
    order = [handed_out(evaluation, annotator)]
    assert order[0].item_id == min(ranks, key=lambda item_id: ranks[item_id])


def test_lowering_overlap_closes_items_and_raising_reopens_them(evaluation, annotator):
    rate(evaluation, services.next_assignment(evaluation=evaluation, user=annotator))
    services.update_assignment_settings(
        evaluation=evaluation, overlap=1, reservation_minutes=5, order="dataset"
    )
    assert Slot.objects.filter(evaluation=evaluation, is_open=False).count() == 1
    services.update_assignment_settings(
        evaluation=evaluation, overlap=3, reservation_minutes=5, order="dataset"
    )
    assert Slot.objects.filter(evaluation=evaluation, is_open=False).count() == 0


def test_pairwise_side_is_deterministic_and_roughly_balanced():
    sides = [pairwise_left_side(user_id=7, item_id=n) for n in range(400)]
    assert sides == [pairwise_left_side(user_id=7, item_id=n) for n in range(400)]
    assert 150 < sides.count("baseline") < 250


def test_progress_counts_done_share_and_total(evaluation, annotator):
    add_annotators(evaluation, 1)
    rate(evaluation, services.next_assignment(evaluation=evaluation, user=annotator))
    (progress,) = annotator_progress(user=annotator)
    assert (progress.done, progress.share, progress.total) == (1, 4, 4)  # 4 items x 2 / 2 people


def test_next_item_query_count_does_not_grow_with_the_dataset(
    project, likert, annotator, django_assert_max_num_queries
):
    small = factories.make_evaluation(
        project, factories.make_dataset(project, items=3), [likert], annotators=[annotator]
    )
    big = factories.make_evaluation(
        project, factories.make_dataset(project, items=300), [likert], annotators=[annotator]
    )
    services.ensure_slots(evaluation=small)
    services.ensure_slots(evaluation=big)
    counts = []
    for evaluation in (small, big):
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            services.next_assignment(evaluation=evaluation, user=annotator)
        counts.append(len(queries))
    assert counts[0] == counts[1]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # keeps data-migration rows
def test_parallel_requests_never_over_assign(project, likert):
    """Twelve people, each in two browser tabs, ask for items and submit at once (overlap 3, five items)."""
    dataset = factories.make_dataset(project, items=5)
    evaluation = factories.make_evaluation(project, dataset, [likert], overlap=3)
    users = add_annotators(evaluation, 12, prefix="par")
    base = f"/p/{project.slug}/evaluations/{evaluation.pk}/rate/"
    barrier = threading.Barrier(len(users) * 2)
    errors: list[BaseException] = []
    statuses: list[int] = []

    def tab(user):
        try:
            client = Client()
            client.force_login(user)
            barrier.wait()
            for _ in range(3):
                handed = client.get(base)
                if not handed["Location"].startswith(base):
                    return  # nothing left for this person
                item_id = handed["Location"].rstrip("/").split("/")[-1]
                statuses.append(
                    client.post(f"{base}{item_id}/submit/", {f"rubric-{likert.pk}": "3"}).status_code
                )
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=tab, args=(user,)) for user in users for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and set(statuses) == {302}
    per_item = Counter(Assignment.objects.filter(evaluation=evaluation).values_list("item_id", flat=True))
    assert sorted(per_item.values()) == [3, 3, 3, 3, 3]
    assert Rating.objects.filter(evaluation=evaluation).count() == 15
    assert {slot.claims for slot in Slot.objects.filter(evaluation=evaluation)} == {3}


def test_items_appended_to_the_dataset_after_rating_started_join_the_queue(project, annotator):
    from datasets.models import Item

    version = factories.make_rubric(project=project)
    dataset = factories.make_dataset(project, items=1)
    evaluation = factories.make_evaluation(project, dataset, [version], overlap=1, annotators=[annotator])
    first = handed_out(evaluation, annotator)
    Item.objects.create(
        dataset=dataset, external_id="late", position=99, response={"speaker": "BOT", "text": "Late."}
    )
    services.ensure_slots(evaluation=evaluation)
    assert set(evaluation.slots.values_list("item_id", flat=True)) == {
        first.item_id,
        dataset.items.get(external_id="late").pk,
    }


def test_the_side_stored_with_a_reservation_is_pairwise_left_side(project, likert):
    """On PostgreSQL the reservation is made in SQL (rating/db.py), which hashes the side itself."""
    dataset = factories.make_dataset(project, items=40)
    evaluation = factories.make_evaluation(project, dataset, [likert], overlap=1)
    (person,) = add_annotators(evaluation, 1)
    while (assignment := services.next_assignment(evaluation=evaluation, user=person)) is not None:
        assert assignment.left_side == pairwise_left_side(user_id=person.pk, item_id=assignment.item_id)
        assert Assignment.objects.get(pk=assignment.pk).left_side == assignment.left_side
        rate(evaluation, assignment)
    sides = set(Assignment.objects.filter(user=person).values_list("left_side", flat=True))
    assert Assignment.objects.filter(user=person).count() == 40 and sides == {"baseline", "response"}


def test_the_hot_paths_progress_agrees_with_the_home_pages(evaluation, annotator):
    others = add_annotators(evaluation, 2)
    rate(evaluation, services.next_assignment(evaluation=evaluation, user=annotator))
    held = services.next_assignment(evaluation=evaluation, user=annotator)
    assert held is not None
    services.set_aside(
        evaluation=evaluation, item_id=held.item_id, user=annotator, reason="unclear", flag=False
    )
    services.next_assignment(evaluation=evaluation, user=others[0], now=timezone.now() - timedelta(hours=3))
    (home,) = annotator_progress(user=annotator, evaluation=evaluation)
    hot = progress_and_upkeep(evaluation=evaluation, user=annotator, now=timezone.now())
    assert (hot.done, hot.skipped, hot.share, hot.total) == (home.done, home.skipped, home.share, home.total)
    assert (hot.done, hot.skipped, hot.total) == (1, 1, 4)
    assert hot.queue_complete and hot.expired_waiting  # the other person's reservation ran out
    Item.objects.create(
        dataset=evaluation.dataset,
        external_id="late",
        position=99,
        context=[],
        response={"speaker": "BOT", "text": "x"},
    )
    appended = progress_and_upkeep(evaluation=evaluation, user=annotator, now=timezone.now())
    assert not appended.queue_complete
    services.ensure_slots(evaluation=evaluation)
    assert progress_and_upkeep(evaluation=evaluation, user=annotator, now=timezone.now()).queue_complete
