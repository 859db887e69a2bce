"""Every Concord model has a Django admin page that opens."""

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

APPS = {"projects", "rubrics", "datasets", "evaluations", "rating", "judges", "agreement"}


def concord_models():
    return [model for model in apps.get_models() if model._meta.app_label in APPS]


@pytest.mark.parametrize("model", concord_models(), ids=lambda model: model._meta.label)
def test_every_model_is_in_the_admin(model):
    assert model in admin.site._registry


@pytest.mark.django_db
def test_admin_changelists_open_for_a_superuser(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.org", "pw"))
    for model in concord_models():
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        assert client.get(url).status_code == 200, url
