"""`manage.py create_judge`: the judge form's rules from the command line, errors naming the option."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from judges.models import Judge
from tests.judges.conftest import TEST_KEY_ENV


def create_judge(project, *args: str) -> str:
    out = StringIO()
    call_command("create_judge", "--project", project.slug, *args, stdout=out)
    return out.getvalue()


def test_defaults_send_no_temperature_no_logprobs_and_one_sample(project, fake_llm):
    output = create_judge(project, "--name", "j", "--base-url", fake_llm.base_url, "--model", "fake-judge")
    judge = Judge.objects.get(name="j")
    assert judge.temperature is None and not judge.logprobs and judge.samples == 1
    assert not judge.position_swap and judge.credential_label == "no key"
    assert "Judge j (id" in output and "API key: no key" in output


def test_every_option_lands_on_the_judge(project, fake_llm):
    create_judge(
        project,
        *("--name", "full", "--base-url", fake_llm.base_url, "--model", "fake-judge"),
        *("--key-env", TEST_KEY_ENV, "--temperature", "0.7", "--max-output-tokens", "64"),
        *("--samples", "3", "--logprobs", "--position-swap", "--concurrency", "4"),
        *("--rpm", "600", "--tpm", "90000", "--price-in", "0.15", "--price-out", "0.6"),
    )
    judge = Judge.objects.get(name="full")
    assert (judge.api_key_env, judge.temperature, judge.max_tokens, judge.samples) == (
        TEST_KEY_ENV,
        0.7,
        64,
        3,
    )
    assert judge.logprobs and judge.position_swap and judge.concurrency == 4
    assert (judge.requests_per_minute, judge.tokens_per_minute) == (600, 90000)
    assert str(judge.price_input_per_million) == "0.1500" and str(judge.price_output_per_million) == "0.6000"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--key-env", "SECRET_KEY"), "--key-env: SECRET_KEY: That is not a server credential"),
        (("--key-env", "DATABASE_URL"), "CONCORD_JUDGE_CREDENTIALS"),
        (("--base-url", "http://169.254.169.254/v1"), "--base-url: This base URL is refused"),
        (("--base-url", "http://me:pw@api.example.test/v1"), "user name or password"),
        (("--price-in", "-1"), "--price-in: Ensure this value is greater than or equal to 0"),
        (("--temperature", "3"), "--temperature: Temperature must be between 0 and 2"),
        (("--samples", "0"), "--samples: Samples per item must be between 1 and 20"),
    ],
)
def test_bad_options_are_refused_naming_the_option_and_nothing_is_stored(project, fake_llm, args, message):
    base = {"--name": "bad", "--base-url": fake_llm.base_url, "--model": "fake-judge"}
    given = dict(zip(args[::2], args[1::2], strict=True))
    with pytest.raises(CommandError) as error:
        create_judge(project, *[part for pair in {**base, **given}.items() for part in pair])
    assert message in str(error.value)
    assert not Judge.objects.exists()


def test_an_unknown_project_is_named(db):
    with pytest.raises(CommandError, match="No project with slug 'nope'"):
        call_command(
            "create_judge",
            "--project",
            "nope",
            "--name",
            "j",
            "--base-url",
            "https://x.test/v1",
            "--model",
            "m",
        )
