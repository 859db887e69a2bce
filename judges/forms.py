from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django import forms

from rubrics.models import RubricVersion

from . import client, credentials
from .endpoint_safety import UnsafeEndpoint, check_base_url
from .endpoints import AUTOMATIC
from .models import Judge

if TYPE_CHECKING:
    from evaluations.models import Evaluation
    from projects.models import Project

KEY_CHOICE_NONE = credentials.NO_KEY
KEY_CHOICE_PASTED = credentials.PASTED


def key_choices(instance: Judge) -> list[tuple[str, str]]:
    """No key, each server credential the operator declared, or a pasted key (the judge's current one)."""
    choices = [(KEY_CHOICE_NONE, "No key (the endpoint needs none)")]
    choices += [
        (
            credentials.ENV_PREFIX + name,
            f"Server credential {name} (for {', '.join(credentials.credential_hosts(name))})",
        )
        for name in credentials.declared_credentials()
    ]
    if instance.api_key_hint:
        choices.append(
            (KEY_CHOICE_PASTED, f"The pasted key {instance.api_key_hint} (or a new one pasted below)")
        )
    else:
        choices.append((KEY_CHOICE_PASTED, "A key pasted below, stored encrypted for this project"))
    return choices


class PastedKeyField(forms.CharField):
    """A write-only key: never rendered back into the page, one line, no spaces."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}))
        super().__init__(max_length=500, strip=True, **kwargs)

    def validate(self, value: str) -> None:
        super().validate(value)
        if value and any(character.isspace() for character in value):
            raise forms.ValidationError("Paste the key alone: one line, no spaces.")
        if value and client.key_problem(value):
            raise forms.ValidationError(
                "A key holds only printable ASCII characters (letters without accents, digits, - _ .): "
                "this one does not; paste it again from the provider's page."
            )


class JudgeForm(forms.ModelForm):
    credential = forms.ChoiceField(
        label="API key",
        error_messages={
            "invalid_choice": "That is not a server credential: the operator lists the environment "
            f"variables judges may use in {credentials.SETTING}."
        },
    )
    api_key = PastedKeyField(
        label="Paste a key",
        required=False,
        help_text="Stored encrypted, never shown again (only its first and last characters).",
    )

    class Meta:
        model = Judge
        fields = [
            "name",
            "endpoint",
            "base_url",
            "model",
            "credential",
            "api_key",
            "temperature",
            "max_tokens",
            "reasoning_effort",
            "samples",
            "logprobs",
            "position_swap",
            "structured_output",
            "requests_per_minute",
            "tokens_per_minute",
            "concurrency",
            "price_input_per_million",
            "price_output_per_million",
            "cache_enabled",
            "request_timeout",
        ]

        labels = {
            "name": "Name",
            "endpoint": "Kind of endpoint",
            "base_url": "Base URL",
            "model": "Model",
            "temperature": "Temperature",
            "max_tokens": "Longest answer, in output tokens",
            "reasoning_effort": "Reasoning effort",
            "samples": "Answers per item",
            "logprobs": "Score from token probabilities (logprobs)",
            "position_swap": "Judge each pair in both orders",
            "structured_output": "Ask for JSON output",
            "requests_per_minute": "Requests per minute (0: no limit)",
            "tokens_per_minute": "Tokens per minute (0: no limit)",
            "concurrency": "Requests at once",
            "price_input_per_million": "Price per million input tokens (USD)",
            "price_output_per_million": "Price per million output tokens (USD)",
            "cache_enabled": "Reuse the answer to an identical request (cache)",
            "request_timeout": "Seconds before a request times out",
        }
        help_texts = {
            "base_url": "The API's address, usually ending in /v1.",
            "model": "The model's name there, e.g. gpt-4o-mini (fake-judge-1: the simulated model).",
            "temperature": "Empty: none is sent (the endpoint's default).",
            "price_input_per_million": "Empty: not set (estimates then show tokens, not a cost).",
        }

    # The form in the order a researcher fills it: where, which model, which key; the rest folded away.
    GROUPS = (
        ("Endpoint", False, ("name", "endpoint", "base_url")),
        ("Model", False, ("model", "temperature", "max_tokens", "reasoning_effort")),
        ("API key", False, ("credential", "api_key")),
        (
            "How it judges",
            True,
            ("samples", "logprobs", "position_swap", "structured_output", "cache_enabled"),
        ),
        (
            "Limits and prices",
            True,
            (
                "requests_per_minute",
                "tokens_per_minute",
                "concurrency",
                "request_timeout",
                "price_input_per_million",
                "price_output_per_million",
            ),
        ),
    )

    def groups(self) -> list[tuple[str, bool, list[forms.BoundField]]]:
        """(title, folded, fields); a folded group holding an error opens."""
        out = []
        for title, folded, names in self.GROUPS:
            fields = [self[name] for name in names]
            out.append((title, folded and not any(field.errors for field in fields), fields))
        return out

    def __init__(self, *args: Any, project: Project | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.project = project
        field = cast(forms.ChoiceField, self.fields["credential"])
        field.choices = key_choices(self.instance)
        declared = credentials.declared_credentials()
        first = credentials.ENV_PREFIX + declared[0] if declared else KEY_CHOICE_NONE
        field.initial = self.instance.credential_source if self.instance.pk else first
        if not credentials.can_store_keys():
            self.fields["api_key"].disabled = True
            self.fields["api_key"].help_text = credentials.cannot_store_message()
        self.fields["endpoint"].required = False  # left out: automatic

    def clean_endpoint(self) -> str:
        return self.cleaned_data["endpoint"] or AUTOMATIC

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        others = Judge.objects.filter(project=self.project, name=name).exclude(pk=self.instance.pk)
        if others.exists():
            raise forms.ValidationError(f"This project already has a judge named {name!r}.")
        return name

    def clean_base_url(self) -> str:
        try:
            return check_base_url(self.cleaned_data["base_url"])
        except UnsafeEndpoint as error:
            raise forms.ValidationError(f"This base URL is refused: {error}.") from None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        names = ("price_input_per_million", "price_output_per_million")
        unset = [name for name in names if cleaned.get(name) is None and not self.has_error(name)]
        if len(unset) == 1 and not any(self.has_error(name) for name in names):
            self.add_error(unset[0], "Give both prices, or leave both empty (prices not set).")
        choice, pasted = cleaned.get("credential"), cleaned.get("api_key") or ""
        if pasted and choice != KEY_CHOICE_PASTED:
            self.add_error("credential", "You pasted a key: choose “A key pasted below” to use it.")
        elif choice == KEY_CHOICE_PASTED and not credentials.can_store_keys():
            self.add_error("credential", credentials.cannot_store_message())
        elif choice == KEY_CHOICE_PASTED and not pasted and not self.instance.api_key_hint:
            self.add_error("api_key", "Paste the key, or choose another source.")
        elif choice == KEY_CHOICE_PASTED and not pasted and self._moves_pasted_key(cleaned.get("base_url")):
            self.add_error(
                "api_key",
                "The base URL now points to another server: paste the key again. A pasted key goes only to "
                "the server it was pasted for, so that no one who can edit this judge can send it elsewhere.",
            )
        elif choice and choice.startswith(credentials.ENV_PREFIX) and cleaned.get("base_url"):
            name = choice.removeprefix(credentials.ENV_PREFIX)
            if refused := credentials.host_refused(name, cleaned["base_url"]):
                self.add_error("credential", refused[0].upper() + refused[1:] + ".")
        return cleaned

    def _moves_pasted_key(self, base_url: str | None) -> bool:
        """Whether this edit sends the judge's stored pasted key to another scheme, host or port."""
        if not self.instance.pk or not self.instance.api_key_hint or not base_url:
            return False
        return credentials.origin(base_url) != credentials.origin(self.instance.base_url)

    def save(self, commit: bool = True) -> Judge:
        """Apply the key source; a pasted key is encrypted here and only here."""
        judge = super().save(commit=False)
        choice, pasted = self.cleaned_data["credential"], self.cleaned_data.get("api_key") or ""
        if choice == KEY_CHOICE_PASTED:
            if pasted:
                judge.set_pasted_key(pasted)
        else:
            judge.clear_pasted_key()
            judge.api_key_env = (
                choice.removeprefix(credentials.ENV_PREFIX) if choice != KEY_CHOICE_NONE else ""
            )
        if commit:
            judge.save()
        return judge

    def clean_temperature(self) -> float | None:
        value = self.cleaned_data["temperature"]
        if value is not None and not 0 <= value <= 2:
            raise forms.ValidationError(
                "Temperature must be between 0 and 2 (or empty: the endpoint's default)."
            )
        return value

    def clean_samples(self) -> int:
        value = self.cleaned_data["samples"]
        if not 1 <= value <= 20:
            raise forms.ValidationError("Samples per item must be between 1 and 20.")
        return value

    def clean_concurrency(self) -> int:
        value = self.cleaned_data["concurrency"]
        if not 1 <= value <= 256:
            raise forms.ValidationError("Concurrency must be between 1 and 256.")
        return value

    def clean_max_tokens(self) -> int:
        value = self.cleaned_data["max_tokens"]
        if value < 1:
            raise forms.ValidationError("Max tokens must be at least 1.")
        return value

    def clean_request_timeout(self) -> float:
        value = self.cleaned_data["request_timeout"]
        # An hour at most: a longer one overflows the socket's timeout (every call would fail).
        if not 0 < value <= 3600:
            raise forms.ValidationError("The timeout must be more than 0 and at most 3,600 seconds.")
        return value


class ReplaceKeyForm(forms.Form):
    """Replace a judge's pasted key (write-only: the old one is never shown)."""

    api_key = PastedKeyField(label="New key", required=True)

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean()
        if not credentials.can_store_keys():
            raise forms.ValidationError(credentials.cannot_store_message())
        return cleaned


class VersionChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return obj.label  # NAME@N alone names a built-in and its project copy alike


class RunChoiceForm(forms.Form):
    """Pick the judge and the rubric versions (all of the evaluation's, by default; `preselect` instead,
    e.g. the version just made from disagreements) of new runs."""

    judge: forms.ModelChoiceField = forms.ModelChoiceField(queryset=Judge.objects.none())
    rubric_versions: forms.ModelMultipleChoiceField = VersionChoiceField(
        queryset=RubricVersion.objects.none(),
        label="Rubric versions",
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Pick at least one rubric version."},
    )

    batch = forms.BooleanField(
        label="Through the Batch API",
        required=False,
        help_text="Half the judge's prices; results within 24 h (OpenAI's Batch API, or an endpoint that "
        "implements it).",
    )

    def __init__(
        self, *args: Any, evaluation: Evaluation, preselect: list[int] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        judges = Judge.objects.filter(project=evaluation.project, archived=False)
        judge = cast(forms.ModelChoiceField, self.fields["judge"])
        judge.queryset = judges
        only = [] if self.is_bound else list(judges.values_list("pk", flat=True)[:2])
        if len(only) == 1:  # the project's one judge, picked already on the empty form
            judge.initial, judge.empty_label = only[0], None
        versions = evaluation.rubric_versions.select_related("rubric").order_by("rubric__name", "number")
        field = cast(forms.ModelMultipleChoiceField, self.fields["rubric_versions"])
        # Judge-only versions (examples from disagreements) can be picked; the people's are the default.
        field.queryset = (
            evaluation.judge_versions().select_related("rubric").order_by("rubric__name", "number")
        )
        field.initial = [version.pk for version in versions]
        chosen = [pk for pk in preselect or [] if field.queryset.filter(pk=pk).exists()]
        if chosen:
            field.initial = chosen

    def versions(self) -> list[RubricVersion]:
        return list(cast(forms.ModelMultipleChoiceField, self.fields["rubric_versions"]).queryset or [])

    def picked_judge(self) -> Judge | None:
        """The judge the page shows picked (the data's when bound, else the initial one), if it is one."""
        picked = self["judge"].value() if self.is_bound else self.fields["judge"].initial
        judges = cast(forms.ModelChoiceField, self.fields["judge"]).queryset
        return judges.filter(pk=picked).first() if judges is not None and str(picked).isdigit() else None

    def checked_versions(self) -> set[int]:
        """The versions whose boxes are ticked as the page shows them (data when bound, else initial)."""
        if self.is_bound:
            values = self.data.getlist("rubric_versions") if hasattr(self.data, "getlist") else []
        else:
            values = self.fields["rubric_versions"].initial or []
        return {int(value) for value in values if str(value).isdigit()}

    def clean_rubric_versions(self) -> list[RubricVersion]:
        """One run per version, in the order the page lists them."""
        return list(self.cleaned_data["rubric_versions"])
