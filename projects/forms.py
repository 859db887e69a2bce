from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.utils.text import slugify

from .access import AnyUser, shareable_users
from .models import Membership, Project
from .names import max_length


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = ["name", "description"]

    def clean_name(self) -> str:
        """The name, and the project's address (`instance.slug`) made from it."""
        name = self.cleaned_data["name"].strip()
        slug = slugify(name)
        if not slug:
            raise forms.ValidationError("The name needs at least one letter or digit.")
        if len(slug) <= max_length(Project, "slug"):
            if Project.objects.filter(slug=slug).exists():
                raise forms.ValidationError(
                    f"A project with the address '{slug}' exists already; pick another name."
                )
        else:
            slug = _cut_slug(slug)
        self.instance.slug = slug
        return name


def _cut_slug(slug: str) -> str:
    """A slug too long for its column, cut, and numbered when the cut one is taken (two long names that
    begin alike are different projects)."""
    limit = max_length(Project, "slug")
    candidate, number = slug[:limit].rstrip("-"), 1
    while Project.objects.filter(slug=candidate).exists():
        number += 1
        tail = f"-{number}"
        candidate = slug[: limit - len(tail)].rstrip("-") + tail
    return candidate


class MemberForm(forms.Form):
    username = forms.CharField(max_length=max_length(User, "username"))
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.ANNOTATOR)

    def __init__(self, *args: Any, project: Project, added_by: AnyUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.project = project
        self.added_by = added_by

    def clean_username(self) -> User:
        username = self.cleaned_data["username"].strip()
        user = shareable_users(self.added_by).filter(username=username).first()
        if user is None:  # the same words whether the account exists elsewhere or not at all
            raise forms.ValidationError(
                f"No account named '{username}' that you can add: only people who share a project with "
                "you. Create an account for someone new from an evaluation's Annotators section."
            )
        return user
