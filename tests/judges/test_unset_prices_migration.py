"""Migration 0008 turns the old default prices (0 / 0, which cannot be told from "not given") into unset."""

import importlib

import pytest
from django.apps import apps

from judges.models import Judge
from tests.judges.conftest import make_judge

migration = importlib.import_module("judges.migrations.0008_unset_prices_and_connection_test_state")


@pytest.mark.django_db
def test_zero_prices_become_unset_and_given_prices_stay(project, fake_llm):
    zero = make_judge(project, fake_llm, name="zero", price_input_per_million=0, price_output_per_million=0)
    paid = make_judge(project, fake_llm, name="paid", price_input_per_million=0, price_output_per_million=2)
    migration.unset_default_prices(apps, None)
    zero.refresh_from_db()
    paid.refresh_from_db()
    assert zero.price_input_per_million is None and zero.price_output_per_million is None
    assert (paid.price_input_per_million, paid.price_output_per_million) == (0, 2)
    assert Judge.objects.filter(price_input_per_million__isnull=True).count() == 1
