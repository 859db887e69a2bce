"""Forms of the rubric pages: edit a version's text, import a rubric file or pasted text."""

import re
from typing import Any

from django import forms

from datasets.text_files import FileRefused, decode_text

from .models import RubricVersion
from .source import DERIVED_FIELDS

MAX_RUBRIC_BYTES = 1024 * 1024


def normalise_newlines(text: str) -> str:
    """Browsers send textarea lines ending in CRLF; prompts use LF as the seed files do."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def steps_text(steps: list[str]) -> str:
    return "\n\n".join(steps)


def scale_text(scale: list[dict]) -> str:
    return "\n".join(f"{o['value']} | {o.get('label', '')} | {o.get('description', '')}" for o in scale)


class RubricVersionForm(forms.Form):
    """The text of a version. Saving always makes a new version (see rubrics.services.edit_rubric).

    With `read_from_text` (the version's text carries its criterion, steps and scale), the form offers
    the text alone: the human form is read from it, so there is one place to edit each word.
    """

    name = forms.CharField(max_length=200, help_text="The rubric's name in lists (not part of the prompt).")
    criterion = forms.CharField(max_length=300)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    instructions = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), required=False)
    steps = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8}),
        required=False,
        help_text="Evaluation steps, separated by a blank line.",
    )
    scale = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "class": "code"}),
        help_text="One option a line: value | label | description, in scale order.",
    )
    prompt_template = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs={"rows": 24, "class": "code"}),
        help_text="Placeholders: {{Dialog}} or {dialog}, {context}, {history}, {prompt}, {response}, "
        "{baseline_model_response}, {sentence}, or a metadata key such as {topic}.",
    )
    target = forms.ChoiceField(choices=RubricVersion.Target.choices)
    output_format = forms.ChoiceField(choices=RubricVersion.OutputFormat.choices)
    explanation_required = forms.BooleanField(required=False)

    def __init__(self, *args: Any, read_from_text: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_from_text = read_from_text
        if read_from_text:
            for name in DERIVED_FIELDS:
                del self.fields[name]
            template = self.fields["prompt_template"]
            template.label = "Rubric text"
            template.help_text = (
                "The prompt the judge reads. The criterion, evaluation steps and scale people see are read "
                "from this text, so edit them here. " + str(template.help_text)
            )
        else:
            self.fields["prompt_template"].help_text = (
                "Put {criterion}, {description}, {instructions}, {steps} and {scale} where the judge "
                "should read the fields above (each text people see must reach the prompt). "
                + str(self.fields["prompt_template"].help_text)
            )

    @classmethod
    def initial_from(cls, version: RubricVersion | None) -> dict:
        if version is None:
            return {}
        return {
            "name": version.rubric.name,
            "criterion": version.criterion, "description": version.description,
            "instructions": version.instructions, "steps": steps_text(version.steps),
            "scale": scale_text(version.scale), "prompt_template": version.prompt_template,
            "target": version.target, "output_format": version.output_format,
            "explanation_required": version.explanation_required,
        }  # fmt: skip

    def clean_description(self) -> str:
        return normalise_newlines(self.cleaned_data["description"])

    def clean_instructions(self) -> str:
        return normalise_newlines(self.cleaned_data["instructions"])

    def clean_prompt_template(self) -> str:
        text = normalise_newlines(self.cleaned_data["prompt_template"])
        if not text.strip():
            raise forms.ValidationError("The prompt template is empty.")
        return text

    def clean_steps(self) -> list[str]:
        text = normalise_newlines(self.cleaned_data["steps"]).strip()
        return [step.strip() for step in re.split(r"\n[ \t]*\n", text) if step.strip()] if text else []

    def clean_scale(self) -> list[dict[str, str]]:
        scale = []
        for number, line in enumerate(normalise_newlines(self.cleaned_data["scale"]).split("\n"), start=1):
            if not line.strip():
                continue
            parts = [part.strip() for part in line.split("|", 2)]
            if not parts[0]:
                raise forms.ValidationError(f"Line {number}: the value before the first | is missing.")
            parts += [""] * (3 - len(parts))
            scale.append({"value": parts[0], "label": parts[1] or parts[0], "description": parts[2]})
        return scale


class RubricImportForm(forms.Form):
    file = forms.FileField(required=False, help_text="A prompt text (.txt) or a JSON spec (.json).")
    text = forms.CharField(
        strip=False,
        required=False,
        widget=forms.Textarea(attrs={"rows": 14, "class": "code"}),
        help_text="Or paste the prompt text or JSON spec here.",
    )
    name = forms.CharField(
        max_length=200, required=False, help_text="Default: the spec's name or the criterion."
    )
    repair_text = forms.BooleanField(
        required=False,
        label="Repair mojibake",
        help_text="Fix text decoded with the wrong encoding (each fix is listed).",
    )

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        upload, text = cleaned.get("file"), cleaned.get("text") or ""
        if upload and text.strip():
            raise forms.ValidationError("Give a file or pasted text, not both.")
        if upload:
            if upload.size > MAX_RUBRIC_BYTES:
                raise forms.ValidationError(f"{upload.name}: larger than {MAX_RUBRIC_BYTES // 1024} KB.")
            try:
                cleaned["source"] = decode_text(upload.read())
            except FileRefused as refused:
                raise forms.ValidationError(f"{upload.name}: {refused}.") from None
            cleaned["filename"] = upload.name
        elif text.strip():
            if len(text.encode("utf-8")) > MAX_RUBRIC_BYTES:
                raise forms.ValidationError(
                    f"The pasted text is larger than the {MAX_RUBRIC_BYTES // 1024} KB a rubric may have."
                )
            cleaned["source"], cleaned["filename"] = normalise_newlines(text), None
        else:
            raise forms.ValidationError(
                "The text is empty: upload a file or paste a prompt text or JSON spec."
            )
        return cleaned
