from typing import Any

from django import forms

from .readers import FORMATS, WIDE_ROLES


class DatasetUploadForm(forms.Form):
    # The file comes last in the page so the small fields are parsed before an over-size file is refused.
    name = forms.CharField(max_length=200, help_text="A new dataset's name, or an existing one to append to.")
    format = forms.ChoiceField(choices=list(FORMATS.items()), initial="auto")
    append = forms.BooleanField(required=False, label="Append to the existing dataset of this name")
    repair_text = forms.BooleanField(required=False, label="Repair mojibake (listed item by item)")
    keep_mojibake = forms.BooleanField(required=False, label="Keep mojibake unchanged")
    convert_encoding = forms.BooleanField(required=False, label="Convert the encoding to UTF-8")
    file = forms.FileField()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("repair_text") and data.get("keep_mojibake"):
            raise forms.ValidationError("Choose either repairing mojibake or keeping it, not both.")
        return data


class ColumnMappingForm(forms.Form):
    """Which CSV column plays which role; built from the uploaded file's header."""

    response_speaker = forms.CharField(
        max_length=100, initial="BOT", help_text="Speaker of response and baseline."
    )

    def __init__(self, *args: Any, header: list[str], initial_mapping: dict[str, str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        choices = [("", "(none)")] + [(name, name) for name in header]
        for role in WIDE_ROLES:
            self.fields[role] = forms.ChoiceField(
                choices=choices,
                required=role in {"id", "response"},
                initial=initial_mapping.get(role, ""),
                label=f"{role} column",
            )
        self.order_fields([*WIDE_ROLES, "response_speaker"])

    def mapping(self) -> dict[str, str]:
        return {key: value for key, value in self.cleaned_data.items() if value}
