"""The alt-test settings of an evaluation (who the people are, hence epsilon; the alignment metric)."""

from typing import Any

from django import forms

from agreement.alt_test import EPSILON_BY_EXPERTISE
from evaluations.models import Evaluation


class AltTestSettingsForm(forms.ModelForm):
    custom_epsilon = forms.FloatField(
        required=False,
        min_value=0,
        max_value=0.99,
        label="Custom epsilon",
        help_text="Used when the people are 'Custom epsilon': 0 (no benefit for the model) to below 1.",
    )

    class Meta:
        model = Evaluation
        fields = ["annotator_expertise", "alt_test_metric"]
        labels = {"annotator_expertise": "The people are", "alt_test_metric": "Alignment score (likert)"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.annotator_expertise == Evaluation.Expertise.CUSTOM:
            self.fields["custom_epsilon"].initial = self.instance.alt_test_epsilon

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        expertise = data.get("annotator_expertise")
        if expertise == Evaluation.Expertise.CUSTOM and data.get("custom_epsilon") is None:
            self.add_error("custom_epsilon", "Give epsilon when the people are 'Custom epsilon'.")
        return data

    def save(self, commit: bool = True) -> Evaluation:
        evaluation = super().save(commit=False)
        expertise = self.cleaned_data["annotator_expertise"]
        evaluation.alt_test_epsilon = (
            self.cleaned_data["custom_epsilon"]
            if expertise == Evaluation.Expertise.CUSTOM
            else EPSILON_BY_EXPERTISE[expertise]
        )
        if commit:
            evaluation.save(update_fields=["annotator_expertise", "alt_test_epsilon", "alt_test_metric"])
        return evaluation
