"""Forms of the evaluation pages. Business checks live in services; forms only shape the input."""

from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from datasets.models import Dataset
from projects.models import Project
from rubrics.models import RubricVersion

from .models import MAX_OVERLAP, Evaluation
from .services import visible_rubrics


class RubricVersionChoice(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: RubricVersion) -> str:  # type: ignore[override]
        builtin = ", built-in" if obj.rubric.project_id is None else ""
        return f"{obj} ({obj.rubric.kind}{builtin})"


class EvaluationForm(forms.Form):
    name = forms.CharField(max_length=200)
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none(), empty_label=None)
    rubric_versions = RubricVersionChoice(
        queryset=RubricVersion.objects.none(),
        widget=forms.CheckboxSelectMultiple,
        help_text="One version of each rubric; every item must have what each needs (pairwise: a baseline).",
    )
    overlap = forms.IntegerField(
        min_value=1, max_value=MAX_OVERLAP, initial=3, help_text="Human ratings each item needs."
    )
    order = forms.ChoiceField(choices=Evaluation.Order.choices, initial=Evaluation.Order.DATASET)
    exclude_lacking = forms.BooleanField(
        required=False,
        label="Exclude items that lack what a rubric needs",
        help_text="E.g. items without a baseline under a pairwise rubric: left out (not rated by people or "
        "judges, not counted in reports) instead of refusing the evaluation.",
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["dataset"].queryset = Dataset.objects.filter(project=project).order_by("-created")  # type: ignore[attr-defined]
        self.fields["rubric_versions"].queryset = (  # type: ignore[attr-defined]
            RubricVersion.objects.filter(rubric__in=visible_rubrics(project))
            .select_related("rubric")
            .order_by("rubric__name", "-number")
        )


class RatingsImportForm(forms.Form):
    file = forms.FileField(
        help_text="CSV or JSONL: item_id, rubric, rater, rater_kind, value[, explanation]."
    )

    def clean_file(self) -> UploadedFile:
        upload = self.cleaned_data["file"]
        limit = settings.CONCORD_MAX_UPLOAD_BYTES
        if upload.size > limit:
            raise forms.ValidationError(f"The file has {upload.size:,} bytes; the limit is {limit:,}.")
        return upload
