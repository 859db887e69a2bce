from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.utils.text import slugify

from .models import Membership, Project


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = ["name", "description"]

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        slug = slugify(name)
        if not slug:
            raise forms.ValidationError("The name needs at least one letter or digit.")
        if Project.objects.filter(slug=slug).exists():
            raise forms.ValidationError(
                f"A project with the address '{slug}' exists already; pick another name."
            )
        return name


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.ANNOTATOR)

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.project = project

    def clean_username(self) -> User:
        username = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise forms.ValidationError(
                f"No user is called '{username}'. Create accounts for new annotators from an evaluation page."
            )
        return user
