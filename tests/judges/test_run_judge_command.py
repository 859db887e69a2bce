"""`manage.py run_judge` with --rubric repeated: one run per version, all or none; --wait follows them all.
Lanes are worked in-process (no worker): the command's pause between progress lines works them."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from judges import services
from judges.models import JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import make_judge


@pytest.fixture
def study(project, fake_llm):
    quality = factories.make_rubric(project=project, name="Quality")
    fluency = factories.make_rubric(project=project, name="Fluency")
    pairwise = factories.make_rubric(project=project, name="Preference", kind="pairwise")
    dataset = factories.make_dataset(project, items=3, baseline=False)
    factories.make_evaluation(project, dataset, [quality, fluency, pairwise], name="Study")
    make_judge(project, fake_llm)
    return quality, fluency, pairwise


def run_judge(*rubrics: str, wait: bool = False) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    args = ["--evaluation", "Study", "--judge", "fake judge"]
    for rubric in rubrics:
        args += ["--rubric", rubric]
    if wait:
        args += ["--wait", "--interval", "0"]
    call_command("run_judge", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_repeated_rubric_launches_one_run_per_version_with_the_total(study, no_enqueue):
    quality, fluency, _ = study
    out, _ = run_judge("Quality@1", "Fluency")
    runs = list(JudgeRun.objects.order_by("pk"))
    assert [run.rubric_version for run in runs] == [quality, fluency]
    assert [run.total_calls for run in runs] == [3, 3] and len({run.rater_id for run in runs}) == 2
    for run in runs:
        assert f"Run {run.pk}: fake judge" in out and f"/ {run.rubric_version}: 3 calls" in out
    assert "Total: 2 runs, 6 calls" in out


def test_a_single_rubric_launches_one_run_as_before(study):
    out, _ = run_judge("Quality")
    run = JudgeRun.objects.get()
    assert out.startswith(f"Run {run.pk}: fake judge") and "Total" not in out


def test_a_rubric_that_cannot_be_judged_refuses_the_whole_launch(study):
    _, _, pairwise = study
    with pytest.raises(CommandError, match=f"Pairwise rubric {pairwise} needs a baseline"):
        run_judge("Quality", "Preference")
    assert not JudgeRun.objects.exists() and not JudgeCall.objects.exists()


def test_an_unknown_rubric_among_several_launches_nothing(study):
    with pytest.raises(CommandError, match="has no rubric 'Missing'"):
        run_judge("Quality", "Missing")
    assert not JudgeRun.objects.exists()


def test_wait_follows_every_run_and_exits_non_zero_when_one_did_not_finish(study, monkeypatch):
    def pause(_seconds):
        first, second = JudgeRun.objects.order_by("pk")
        services.work_lane(run_id=first.pk, lane=0)
        services.cancel_run(run=second)

    monkeypatch.setattr("judges.management.commands.run_judge.sleep", pause)
    with pytest.raises(SystemExit) as exit_info:
        run_judge("Quality", "Fluency", wait=True)
    first, second = JudgeRun.objects.order_by("pk")
    assert exit_info.value.code == 1
    assert first.status == JudgeRun.Status.DONE and second.status == JudgeRun.Status.CANCELLED


def test_wait_exits_zero_when_every_run_is_done(study, monkeypatch, capsys):
    def pause(_seconds):
        for run in JudgeRun.objects.filter(status=JudgeRun.Status.RUNNING):
            services.work_lane(run_id=run.pk, lane=0)

    monkeypatch.setattr("judges.management.commands.run_judge.sleep", pause)
    out, err = run_judge("Quality", "Fluency", wait=True)
    first, second = JudgeRun.objects.order_by("pk")
    assert f"Run {first.pk} done: 3/3 done" in out and f"Run {second.pk} done: 3/3 done" in out
    assert err == ""
