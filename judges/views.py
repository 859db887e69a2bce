"""Judge pages: list, create, detail with a connection test; runs: estimate + launch, live progress, cancel,
resume. Researchers only (projects.access)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core import signing
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from config.htmx import SignedInHtmxRequest
from projects.access import RESEARCHER, get_evaluation_for, get_judge_run_for, get_project_for
from projects.models import Project

from . import credentials, prices, probing, selectors, services
from .credentials import can_store_keys
from .forms import JudgeForm, ReplaceKeyForm, RunChoiceForm
from .models import Judge, JudgeCall, JudgeRun

RECENT_PROBLEMS = 10


@require_GET
@login_required
def judge_list(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    judges = Judge.objects.filter(project=project)
    return render(request, "judges/judge_list.html", {"project": project, "judges": judges})


def _form_context(project: Project, form: JudgeForm, **extra: Any) -> dict[str, Any]:
    return {"project": project, "form": form, "list_prices": prices.LIST_PRICES, "prices_date": prices.DATE,
            "prices_source": prices.SOURCE, **extra}  # fmt: skip


def _with_list_prices(data: QueryDict, project: Project) -> tuple[JudgeForm, str]:
    """The form as filled in, unsaved and not yet checked, with the model's list prices in its price boxes."""
    found = prices.list_price(data.get("model", ""))
    initial: dict[str, Any] = {name: data.get(name) for name in JudgeForm.base_fields if name != "api_key"}
    for name, field in JudgeForm.base_fields.items():
        if isinstance(field, forms.BooleanField):  # an unticked box is absent from the data
            initial[name] = name in data
    if found is None:
        note = (
            f"No list price known for model {data.get('model', '')!r}: type its prices, or leave them empty."
        )
    else:
        listed, initial["price_input_per_million"], initial["price_output_per_million"] = found
        note = f"List prices of {listed} on {prices.DATE} filled in: check them against your contract."
    return JudgeForm(initial=initial, project=project), note


def _test_before_saving(request: HttpRequest, form: JudgeForm, project: Project) -> probing.ConnectionResult:
    """The connection test (judges.probing) on the settings as filled in; nothing is stored."""
    if form.cleaned_data["credential"] == credentials.PASTED:
        return probing.ConnectionResult(
            False,
            "A pasted key is stored only when the judge is saved: "
            "create the judge, then test it on its page.",
        )
    judge = form.save(commit=False)
    judge.project = project
    with probing.one_test_at_a_time(request.user, project) as mine:
        return probing.test_connection(judge=judge) if mine else probing.STILL_TESTING


TESTED_SALT = "judges.judge_create.tested"
TESTED_MAX_AGE = 3600


def _tested_token(judge: Judge, result: probing.ConnectionResult) -> str:
    """What a passed test before saving found, signed, for the form to carry to its save."""
    if not result.ok:
        return ""
    found = {"connection": list(_connection(judge)), "capabilities": result.capabilities,
             "simulated": result.simulated, "at": timezone.now().isoformat()}  # fmt: skip
    return signing.dumps(found, salt=TESTED_SALT)


def _keep_test(judge: Judge, token: str) -> None:
    """A judge saved with the very settings a test before saving passed keeps what the test found, so it
    is not 'never tested' on the launch form; another endpoint, model or key keeps nothing."""
    try:
        found = signing.loads(token, salt=TESTED_SALT, max_age=TESTED_MAX_AGE) if token else None
    except signing.BadSignature:
        return
    if not found or found["connection"] != list(_connection(judge)):
        return
    judge.capabilities = found["capabilities"]
    judge.simulated = judge.simulated or found["simulated"]
    judge.probed_at = judge.tested_at = datetime.fromisoformat(found["at"])
    judge.test_error = ""


@sensitive_post_parameters("api_key")  # a pasted key never shows in an error report
@require_http_methods(["GET", "POST"])
@login_required
def judge_create(request: HttpRequest, slug: str) -> HttpResponse:
    """The new-judge form. Its buttons: create, fill in the model's list prices, or test the connection
    with the settings as filled in, before anything is saved."""
    project = get_project_for(request.user, slug, role=RESEARCHER)
    action = request.POST.get("action", "save")
    if request.method == "POST" and action == "prices":
        form, note = _with_list_prices(request.POST, project)
        return render(request, "judges/judge_create.html", _form_context(project, form, price_note=note))
    form = JudgeForm(request.POST or None, project=project)
    if request.method == "POST" and action == "test" and form.is_valid():
        result = _test_before_saving(request, form, project)
        tested = _tested_token(form.instance, result)
        context = _form_context(project, form, result=result, tested=tested)
        return render(request, "judges/judge_create.html", context)
    if request.method == "POST" and action == "save" and form.is_valid():
        judge = form.save(commit=False)
        judge.project = project
        judge.created_by = cast(User, request.user)  # login_required
        _keep_test(judge, request.POST.get("tested", ""))
        judge.save()
        messages.success(request, f"Judge {judge.name} created. Test its connection before a run.")
        return redirect("judge_detail", slug=project.slug, pk=judge.pk)
    return render(request, "judges/judge_create.html", _form_context(project, form))


KEY_FIELDS = ("api_key_env", "api_key_encrypted", "api_key_hint", "api_key_version")


def _connection(judge: Judge) -> tuple[str, str, str, str, int]:
    """What a connection test depends on: the endpoint, the model and which key (a new paste counts)."""
    return (judge.base_url, judge.model, judge.endpoint, judge.credential_source, judge.api_key_version)


@sensitive_post_parameters("api_key")
@require_http_methods(["GET", "POST"])
@login_required
def judge_edit(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """The judge form on an existing judge: later runs use the change, launched runs keep what they froze.
    A changed endpoint, model or key forgets what the last connection test found."""
    project = get_project_for(request.user, slug, role=RESEARCHER)
    judge = get_object_or_404(Judge, project=project, pk=pk)
    before = _connection(judge)
    form = JudgeForm(request.POST or None, instance=judge, project=project)
    if request.method == "POST" and form.is_valid():
        judge = form.save(commit=False)
        if _connection(judge) != before:
            judge.capabilities, judge.probed_at = {}, None
        if form.has_changed():  # a connection test from before no longer vouches for these settings
            judge.edited_at = timezone.now()
        judge.archived = False
        judge.save()
        messages.success(request, f"Judge {judge.name} saved; runs launched from now on use these settings.")
        return redirect("judge_detail", slug=project.slug, pk=judge.pk)
    return render(request, "judges/judge_create.html", _form_context(project, form, judge=judge))


@require_POST
@login_required
def judge_delete(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Delete a judge no run used; a judge with runs is archived instead (hidden from new runs, kept for
    the reports of its runs)."""
    project = get_project_for(request.user, slug, role=RESEARCHER)
    judge = get_object_or_404(Judge, project=project, pk=pk)
    if services.delete_or_archive_judge(judge=judge):
        messages.success(request, f"Judge {judge.name} deleted.")
        return redirect("judge_list", slug=project.slug)
    messages.success(request, f"Judge {judge.name} archived: its runs keep it for their reports.")
    return redirect("judge_detail", slug=project.slug, pk=judge.pk)


@require_GET
@login_required
def judge_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    judge = get_object_or_404(Judge, project=project, pk=pk)
    runs = judge.runs.select_related("evaluation", "rubric_version__rubric")
    context = {"project": project, "judge": judge, "runs": runs, "key_form": _key_form(None)}
    return render(request, "judges/judge_detail.html", context)


def _key_form(data: QueryDict | None) -> ReplaceKeyForm | None:
    return ReplaceKeyForm(data) if can_store_keys() else None


@sensitive_post_parameters("api_key")
@require_POST
@login_required
def judge_replace_key(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Paste a new key for the judge (it replaces any earlier pasted key or server credential)."""
    project = get_project_for(request.user, slug, role=RESEARCHER)
    judge = get_object_or_404(Judge, project=project, pk=pk)
    form = ReplaceKeyForm(request.POST)
    if form.is_valid():
        judge.set_pasted_key(form.cleaned_data["api_key"])
        judge.capabilities, judge.probed_at = {}, None  # another key may reach another account's models
        judge.edited_at = timezone.now()
        judge.save(update_fields=[*KEY_FIELDS, "capabilities", "probed_at", "edited_at"])
        messages.success(request, f"Key replaced: the judge now uses the pasted key {judge.api_key_hint}.")
        return redirect("judge_detail", slug=project.slug, pk=judge.pk)
    runs = judge.runs.select_related("evaluation", "rubric_version__rubric")
    context = {"project": project, "judge": judge, "runs": runs, "key_form": form}
    return render(request, "judges/judge_detail.html", context, status=400)


@require_POST
@login_required
def judge_test_connection(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    judge = get_object_or_404(Judge, project=project, pk=pk)
    with probing.one_test_at_a_time(request.user, project) as mine:
        result = probing.test_connection(judge=judge) if mine else probing.STILL_TESTING
    if not result.still_running:  # the launch form warns about a failed or stale test
        judge.tested_at, judge.test_error = timezone.now(), "" if result.ok else result.message
        judge.save(update_fields=["tested_at", "test_error"])
    runs = judge.runs.select_related("evaluation", "rubric_version__rubric")
    context = {
        "project": project,
        "judge": judge,
        "result": result,
        "runs": runs,
        "key_form": _key_form(None),
    }
    template = "judges/judge_detail.html#connection" if request.htmx else "judges/judge_detail.html"
    return render(request, template, context)


@require_http_methods(["GET", "POST"])
@login_required
def judge_run_create(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    """GET: pick a judge and rubric versions; with a judge picked, show calls, tokens and cost per version
    and in total. POST: launch one run per version (all or none)."""
    evaluation = get_evaluation_for(request.user, slug, pk)
    project = evaluation.project
    data = request.POST if request.method == "POST" else (request.GET if "judge" in request.GET else None)
    preselect = [int(v) for v in request.GET.getlist("version") if v.isdigit()]
    form = RunChoiceForm(data, evaluation=evaluation, preselect=preselect)
    boxes = selectors.version_boxes(
        evaluation=evaluation,
        versions=form.versions(),
        checked=form.checked_versions(),
        judge=form.picked_judge(),
    )
    context = {"project": project, "evaluation": evaluation, "form": form, "estimates": None, "boxes": boxes}
    if form.is_bound and form.is_valid():
        judge, versions = form.cleaned_data["judge"], form.cleaned_data["rubric_versions"]
        batch = form.cleaned_data["batch"]
        try:
            if request.method == "POST" and request.POST.get("confirm") == "yes":
                runs = services.launch_runs(
                    judge=judge,
                    evaluation=evaluation,
                    rubric_versions=versions,
                    created_by=cast(User, request.user),
                    batch=batch,
                )
                calls = sum(run.total_calls for run in runs)
                refused = services.queue_refused(runs)
                if len(runs) == 1:
                    if not refused:  # else the run's page says why it failed
                        messages.success(request, f"Judge run launched: {calls} calls queued.")
                    return redirect("judge_run_detail", slug=project.slug, pk=runs[0].pk)
                if refused:
                    messages.error(request, services.QUEUE_REFUSED)
                else:
                    messages.success(request, f"{len(runs)} judge runs launched: {calls} calls queued.")
                url = reverse("evaluation_detail", args=[project.slug, evaluation.pk])
                return redirect(f"{url}#evaluation_judge_runs")
            estimates = services.estimate_runs(
                judge=judge, evaluation=evaluation, rubric_versions=versions, batch=batch
            )
            context.update(
                estimates=estimates,
                total=services.total_estimate([estimate for _, estimate in estimates]),
                judge=judge,
            )
        except ValidationError as error:
            form.add_error(None, error)
    template = "judges/judge_run_create.html#estimate" if request.htmx else "judges/judge_run_create.html"
    return render(request, template, context)


@require_GET
@login_required
def judge_run_detail(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    run = get_judge_run_for(request.user, slug, pk)
    project = run.evaluation.project
    context = {"project": project, "run": run, "progress": services.run_progress(run), "batches": []}
    if run.mode == JudgeRun.Mode.BATCH:
        context["batches"] = batches = list(run.batches.order_by("id"))
        context["batch_open"] = any(not batch.collected for batch in batches)
    if request.htmx:
        return render(request, "judges/judge_run_detail.html#progress", context)
    problems = (
        (run.calls.filter(status=JudgeCall.Status.FAILED) | run.calls.filter(parse_failed=True))
        .select_related("item")
        .order_by("-finished_at")[:RECENT_PROBLEMS]
    )
    context["problems"] = problems
    return render(request, "judges/judge_run_detail.html", context)


@require_POST
@login_required
def judge_run_cancel(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    run = get_judge_run_for(request.user, slug, pk)
    project = run.evaluation.project
    if services.cancel_run(run=run):
        messages.success(request, "Run cancelled. Calls in flight finish; resume to continue later.")
    else:
        messages.warning(request, "The run was not running.")
    return redirect("judge_run_detail", slug=project.slug, pk=run.pk)


@require_POST
@login_required
def judge_run_resume(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    run = get_judge_run_for(request.user, slug, pk)
    project = run.evaluation.project
    if not run.can_resume:
        messages.warning(
            request, f"The run is {run.get_status_display().lower()}: there is nothing to resume."
        )
        return redirect("judge_run_detail", slug=project.slug, pk=run.pk)
    mode = request.POST.get("mode")
    try:
        reopened = services.resume_run(run=run, mode=mode if mode in JudgeRun.Mode.values else None)
    except ValidationError as error:
        messages.warning(request, " ".join(error.messages))
        return redirect("judge_run_detail", slug=project.slug, pk=run.pk)
    how = " through a new batch" if run.mode == JudgeRun.Mode.BATCH else ""
    if not services.queue_refused([run]):  # else the run's page says why it failed again
        messages.success(
            request, f"Run resumed{how}; {reopened} failed or interrupted call(s) will be tried again."
        )
    return redirect("judge_run_detail", slug=project.slug, pk=run.pk)


@require_GET
@login_required
def evaluation_judge_runs(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """The evaluation page's judge runs section alone: htmx polls it while any run is running."""
    evaluation = get_evaluation_for(request.user, slug, pk)
    context = selectors.evaluation_runs(evaluation)
    response = render(request, "judges/_evaluation_judge_runs.html", context)
    if not context["active"]:  # the last poll: the page's summary counts the new model ratings
        response["HX-Trigger"] = "judge-runs-settled"
    return response
