"""A run's frozen settings: typed in code, JSON in JudgeRun.parameters, old stored runs still readable."""

from decimal import Decimal

from judges.parameters import RunParameters

# What runs launched by the first version of Concord stored (no endpoint family, credential or capabilities).
FIRST_VERSION = {
    "base_url": "http://127.0.0.1:9/v1",
    "model": "fake-judge",
    "api_key_env": "OPENAI_API_KEY",
    "temperature": 0.0,
    "max_tokens": 256,
    "samples": 3,
    "logprobs": True,
    "position_swap": False,
    "structured_output": True,
    "requests_per_minute": 60,
    "tokens_per_minute": 0,
    "concurrency": 8,
    "price_input_per_million": "2.5000",
    "price_output_per_million": "10.0000",
    "cache_enabled": True,
    "request_timeout": 60.0,
    "simulated": True,
}


def test_a_run_stored_by_the_first_version_loads_with_its_key_variable_as_credential():
    params = RunParameters.from_json(FIRST_VERSION)
    assert params.credential == "env:OPENAI_API_KEY"
    assert params.endpoint == "" and params.capabilities == {} and params.reasoning_effort == ""
    assert params.samples == 3 and params.logprobs is True and params.position_swap is False
    assert params.price_input_per_million == Decimal("2.5") and params.temperature == 0.0


def test_a_run_without_a_key_variable_has_no_credential():
    assert RunParameters.from_json({**FIRST_VERSION, "api_key_env": ""}).credential == "none"


def test_parameters_survive_the_json_column_unchanged(judge, evaluation_setup):
    from judges import services

    judge.price_input_per_million = Decimal("1.2345")
    judge.save()
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    run.refresh_from_db()
    assert run.parameters["price_input_per_million"] == "1.2345"  # JSON holds text, not a float
    assert run.frozen_parameters == judge.parameters()
    assert run.frozen_parameters.price_input_per_million == Decimal("1.2345")
