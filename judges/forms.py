import re
from typing import cast

from django import forms

from rubrics.models import RubricVersion

from .models import Judge

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JudgeForm(forms.ModelForm):
    class Meta:
        model = Judge
        fields = [
            "name",
            "base_url",
            "model",
            "api_key_env",
            "temperature",
            "max_tokens",
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

    def __init__(self, *args, project=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        others = Judge.objects.filter(project=self.project, name=name).exclude(pk=self.instance.pk)
        if others.exists():
            raise forms.ValidationError(f"This project already has a judge named {name!r}.")
        return name

    def clean_api_key_env(self):
        value = self.cleaned_data["api_key_env"].strip()
        if not ENV_NAME_RE.match(value):
            raise forms.ValidationError(
                "Give the NAME of an environment variable (letters, digits, underscores), not the key itself."
            )
        return value

    def clean_temperature(self):
        value = self.cleaned_data["temperature"]
        if not 0 <= value <= 2:
            raise forms.ValidationError("Temperature must be between 0 and 2.")
        return value

    def clean_samples(self):
        value = self.cleaned_data["samples"]
        if not 1 <= value <= 20:
            raise forms.ValidationError("Samples per item must be between 1 and 20.")
        return value

    def clean_concurrency(self):
        value = self.cleaned_data["concurrency"]
        if not 1 <= value <= 256:
            raise forms.ValidationError("Concurrency must be between 1 and 256.")
        return value

    def clean_max_tokens(self):
        value = self.cleaned_data["max_tokens"]
        if value < 1:
            raise forms.ValidationError("Max tokens must be at least 1.")
        return value

    def clean_request_timeout(self):
        value = self.cleaned_data["request_timeout"]
        if value <= 0:
            raise forms.ValidationError("The timeout must be more than 0 seconds.")
        return value


class RunChoiceForm(forms.Form):
    """Pick the judge and the rubric versions (all of the evaluation's, by default) of new runs."""

    judge: forms.ModelChoiceField = forms.ModelChoiceField(queryset=Judge.objects.none())
    rubric_versions: forms.ModelMultipleChoiceField = forms.ModelMultipleChoiceField(
        queryset=RubricVersion.objects.none(),
        label="Rubric versions",
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Pick at least one rubric version."},
    )

    def __init__(self, *args, evaluation, **kwargs):
        super().__init__(*args, **kwargs)
        cast(forms.ModelChoiceField, self.fields["judge"]).queryset = Judge.objects.filter(
            project=evaluation.project
        )
        versions = evaluation.rubric_versions.select_related("rubric").order_by("rubric__name", "number")
        field = cast(forms.ModelMultipleChoiceField, self.fields["rubric_versions"])
        # Judge-only versions (examples from disagreements) can be picked; the people's are the default.
        field.queryset = (
            evaluation.judge_versions().select_related("rubric").order_by("rubric__name", "number")
        )
        field.initial = [version.pk for version in versions]

    def clean_rubric_versions(self) -> list[RubricVersion]:
        """One run per version, in the order the page lists them."""
        return list(self.cleaned_data["rubric_versions"])
