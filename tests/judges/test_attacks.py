"""The judge half of the attacker's tour (issue 9): an annotator, an outsider and a researcher of another
project try to make Concord send a server secret to a listener of theirs, reach addresses it must not,
use someone else's key or cached replies. A real loopback HTTP listener records every byte it receives;
no server secret may ever be among them."""

import ipaddress
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from cryptography.fernet import Fernet
from django.db import IntegrityError, transaction
from django.urls import reverse

from evaluations.models import Rating
from judges.models import CachedReply, Judge, JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import TEST_KEY_ENV, TEST_KEY_HOSTS, judge_form_data, make_judge, run_to_end

LAB_KEY_ENV = "CONCORD_LAB_KEY"
LAB_KEY = "sk-lab-declared-0123456789abcdef"
PASTED_KEY = "sk-proj-pasted-9876543210wxyz"
OTHER_PASTED_KEY = "sk-other-project-1111222233334444"


class Listener:
    """An OpenAI-compatible endpoint an attacker controls: it records every request and echoes the key it
    was sent (in its reply, or in a 401 error when `status` is 401)."""

    def __init__(self):
        self.received: list[bytes] = []
        self.status = 200
        self.plain = False  # answer 200 with a text body that echoes the header, not JSON
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _record(self) -> str:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                listener.received.append(self.requestline.encode() + bytes(self.headers) + body)
                return self.headers.get("authorization", "")

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._record()
                self._send(200, {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "x"}]})

            def do_POST(self):
                auth = self._record()
                if listener.plain:
                    data = f"echo {auth}".encode()
                    self.send_response(200)
                    self.send_header("content-type", "text/plain")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if listener.status != 200:
                    message = f"Incorrect API key provided: {auth}"
                    self._send(listener.status, {"error": {"message": message, "type": "invalid_request"}})
                    return
                content = f"Rating: 3. Your header was {auth!r}"
                self._send(200, {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def everything(self, since: int = 0) -> str:
        return b"\n".join(self.received[since:]).decode("latin-1")

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def server_secrets(settings, monkeypatch):
    """A declared lab key besides the test key, pasted keys enabled, and the openai client's own
    environment variables set, as on a lab server: none of it may reach a judge that was not given it."""
    monkeypatch.setenv(LAB_KEY_ENV, LAB_KEY)
    settings.CONCORD_JUDGE_CREDENTIALS = {TEST_KEY_ENV: TEST_KEY_HOSTS, LAB_KEY_ENV: ["127.0.0.1"]}
    settings.CONCORD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]
    monkeypatch.setenv("OPENAI_API_KEY", LAB_KEY)
    monkeypatch.setenv("OPENAI_ORG_ID", LAB_KEY)
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", f"X-Lab: {LAB_KEY}")
    return settings


def never_received_a_server_secret(listener: Listener, settings, *also: str) -> None:
    seen = listener.everything()
    secrets = [settings.SECRET_KEY, LAB_KEY, OTHER_PASTED_KEY, *also]
    secrets += [os.environ[name] for name in ("DATABASE_URL", "CELERY_BROKER_URL") if os.environ.get(name)]
    for secret in secrets:
        assert secret not in seen


def judge_form(listener_url: str, **fields) -> dict:
    # api_key_env: what the judge form asked for before server credentials, so the old form accepted it.
    defaults = {"base_url": listener_url, "name": "attack judge", "model": "m", "api_key_env": TEST_KEY_ENV}
    return judge_form_data(**{**defaults, **fields})


@pytest.fixture
def evaluation_setup(project):
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=2), [version])
    return evaluation, version


# -- credentials --------------------------------------------------------------------------------
@pytest.mark.parametrize("variable", ["SECRET_KEY", "DATABASE_URL", "PATH", "OPENAI_API_KEY"])
def test_researcher_cannot_give_a_judge_a_server_variable_that_is_not_declared(
    researcher_client, project, listener, server_secrets, variable
):
    form = judge_form(listener.base_url, credential=f"env:{variable}", api_key_env=variable)
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), form)
    page = response.content.decode()
    assert response.status_code == 200 and "CONCORD_JUDGE_CREDENTIALS" in page
    assert not Judge.objects.exists()
    never_received_a_server_secret(listener, server_secrets)


def test_a_stored_judge_naming_an_undeclared_variable_sends_nothing(
    researcher_client, project, listener, server_secrets, evaluation_setup
):
    judge = make_judge(project, listener, api_key_env="DATABASE_URL", model="m")
    response = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    assert "DATABASE_URL is not a server credential" in response.content.decode()
    run = run_to_end(judge, *evaluation_setup)
    assert run.status == JudgeRun.Status.FAILED and "CONCORD_JUDGE_CREDENTIALS" in run.error
    assert listener.received == []


def test_a_judge_receives_its_own_declared_key_and_nothing_else_of_the_server(
    researcher_client, project, listener, server_secrets, evaluation_setup
):
    judge = make_judge(project, listener, model="m")  # given TEST_KEY_ENV, not the lab key
    response = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    assert "connected" in response.content.decode()
    run_to_end(judge, *evaluation_setup)
    assert "Bearer test-key" in listener.everything()
    never_received_a_server_secret(listener, server_secrets)
    assert "openai-organization" not in listener.everything().lower()


def test_an_azure_judge_sends_its_own_key_in_the_api_key_header_and_nothing_else_of_the_server(
    project, listener, server_secrets, evaluation_setup
):
    judge = make_judge(project, listener, model="m", endpoint="azure")  # given TEST_KEY_ENV
    assert run_to_end(judge, *evaluation_setup).status == JudgeRun.Status.DONE
    seen = listener.everything()
    assert "/openai/deployments/m/chat/completions" in seen and "api-key: test-key" in seen
    assert "authorization" not in seen.lower() and "openai-organization" not in seen.lower()
    never_received_a_server_secret(listener, server_secrets)


def test_a_judge_without_a_key_sends_no_authorization_at_all(
    researcher_client, project, listener, server_secrets, evaluation_setup
):
    judge = make_judge(project, listener, model="m", api_key_env="")
    run = run_to_end(judge, *evaluation_setup)
    assert run.status == JudgeRun.Status.DONE
    assert "authorization" not in listener.everything().lower()
    never_received_a_server_secret(listener, server_secrets)


# -- pasted keys --------------------------------------------------------------------------------
def paste_a_key(client, project, listener, key=PASTED_KEY, name="pasted judge") -> Judge:
    form = judge_form(listener.base_url, name=name, credential="pasted", api_key=key)
    response = client.post(reverse("judge_create", args=[project.slug]), form)
    assert response.status_code == 302, response.content.decode()
    return Judge.objects.get(project=project, name=name)


def test_a_key_echoed_in_an_answer_that_is_not_json_is_taken_out_of_the_error(
    researcher_client, project, listener, server_secrets, evaluation_setup
):
    """The error quotes the start of what came back; the key is taken out before it is cut, or a cut through
    the key would leave most of it on the page and in the call's stored error."""
    listener.plain = True
    judge = paste_a_key(researcher_client, project, listener)
    tested = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    page = tested.content.decode()
    assert "is not an OpenAI-compatible API" in page and "echo Bearer ***" in page
    run = run_to_end(judge, *evaluation_setup)
    errors = " ".join(run.calls.values_list("error", flat=True))
    assert "is not an OpenAI-compatible API" in errors and "echo Bearer ***" in errors
    for shown in (page, errors):
        assert PASTED_KEY not in shown and PASTED_KEY[6:30] not in shown


def test_a_pasted_key_is_stored_encrypted_and_shown_only_as_a_hint(
    researcher_client, project, listener, server_secrets, django_user_model, client
):
    judge = paste_a_key(researcher_client, project, listener)
    assert judge.api_key_hint == "sk-...wxyz"
    assert PASTED_KEY not in judge.api_key_encrypted and PASTED_KEY not in judge.api_key_env
    pages = [
        reverse("judge_detail", args=[project.slug, judge.pk]),
        reverse("judge_list", args=[project.slug]),
        reverse("judge_create", args=[project.slug]),
    ]
    for url in pages:
        page = researcher_client.get(url).content.decode()
        assert PASTED_KEY not in page and judge.api_key_encrypted not in page
    assert "sk-...wxyz" in researcher_client.get(pages[0]).content.decode()
    admin = django_user_model.objects.create_superuser("root", "root@example.test", "pw-root-123")
    client.force_login(admin)
    admin_page = client.get(reverse("admin:judges_judge_change", args=[judge.pk])).content.decode()
    assert PASTED_KEY not in admin_page and judge.api_key_encrypted not in admin_page


def test_a_pasted_key_is_sent_and_an_echo_of_it_is_scrubbed_from_replies_and_pages(
    researcher_client, project, listener, server_secrets, evaluation_setup, caplog
):
    judge = paste_a_key(researcher_client, project, listener)
    test_url = reverse("judge_test_connection", args=[project.slug, judge.pk])
    connection_page = researcher_client.post(test_url).content.decode()
    assert "connected" in connection_page and PASTED_KEY not in connection_page
    run = run_to_end(judge, *evaluation_setup)
    assert f"Bearer {PASTED_KEY}" in listener.everything()
    stored = [
        *JudgeCall.objects.values_list("raw_output", flat=True),
        *CachedReply.objects.values_list("content", flat=True),
        *Rating.objects.values_list("raw_output", flat=True),
        researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).content.decode(),
        caplog.text,
    ]
    assert stored and all(PASTED_KEY not in text for text in stored)
    assert any("Your header was" in text for text in stored)


def test_an_error_echoing_the_key_is_scrubbed(
    researcher_client, project, listener, server_secrets, evaluation_setup
):
    judge = paste_a_key(researcher_client, project, listener)
    listener.status = 401
    run = run_to_end(judge, *evaluation_setup)
    page = researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).content.decode()
    assert run.status == JudgeRun.Status.FAILED and "authentication failed (401)" in run.error
    assert PASTED_KEY not in run.error and PASTED_KEY not in page
    assert all(PASTED_KEY not in error for error in JudgeCall.objects.values_list("error", flat=True))


def test_pasted_keys_are_refused_when_the_server_has_no_encryption_key(
    researcher_client, project, listener, server_secrets
):
    server_secrets.CONCORD_ENCRYPTION_KEY = []
    page = researcher_client.get(reverse("judge_create", args=[project.slug])).content.decode()
    assert "CONCORD_ENCRYPTION_KEY" in page
    form = judge_form(listener.base_url, credential="pasted", api_key=PASTED_KEY)
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), form)
    assert response.status_code == 200 and "CONCORD_ENCRYPTION_KEY" in response.content.decode()
    assert not Judge.objects.exists()


def test_a_pasted_key_no_http_header_can_carry_is_refused_with_the_reason(
    researcher_client, project, listener, server_secrets
):
    form = judge_form(listener.base_url, credential="pasted", api_key="sk-abcdé-wxyz")
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), form)
    assert response.status_code == 200 and "only printable ASCII" in response.content.decode()
    assert not Judge.objects.exists()


def test_a_pasted_key_can_be_replaced_and_keys_rotated(
    researcher_client, project, listener, server_secrets, evaluation_setup
):
    judge = paste_a_key(researcher_client, project, listener)
    old_keys = list(server_secrets.CONCORD_ENCRYPTION_KEY)
    server_secrets.CONCORD_ENCRYPTION_KEY = [Fernet.generate_key().decode(), *old_keys]  # rotation
    url = reverse("judge_replace_key", args=[project.slug, judge.pk])
    response = researcher_client.post(url, {"api_key": "sk-new-key-000011112222zzzz"})
    judge.refresh_from_db()
    assert response.status_code == 302 and judge.api_key_hint == "sk-...zzzz" and judge.api_key_version == 2
    server_secrets.CONCORD_ENCRYPTION_KEY = server_secrets.CONCORD_ENCRYPTION_KEY[:1]  # old key retired
    run = run_to_end(judge, *evaluation_setup)
    assert run.status == JudgeRun.Status.DONE
    assert "Bearer sk-new-key-000011112222zzzz" in listener.everything()


def test_a_key_that_can_no_longer_be_decrypted_fails_the_run_with_the_reason(
    researcher_client, project, listener, server_secrets, evaluation_setup
):
    judge = paste_a_key(researcher_client, project, listener)
    server_secrets.CONCORD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]
    run = run_to_end(judge, *evaluation_setup)
    assert run.status == JudgeRun.Status.FAILED and "cannot be decrypted" in run.error
    assert listener.received == []


def test_annotator_and_outsider_cannot_replace_or_use_a_pasted_key(
    researcher_client, annotator, outsider, project, listener, server_secrets
):
    judge = paste_a_key(researcher_client, project, listener)
    replace = reverse("judge_replace_key", args=[project.slug, judge.pk])
    test = reverse("judge_test_connection", args=[project.slug, judge.pk])
    attacker = researcher_client
    attacker.force_login(annotator)
    assert attacker.post(replace, {"api_key": "sk-annotator-000000000000"}).status_code == 403
    assert attacker.post(test).status_code == 403
    attacker.force_login(outsider)
    assert attacker.post(replace, {"api_key": "sk-outsider-0000000000000"}).status_code == 404
    assert attacker.post(test).status_code == 404
    judge.refresh_from_db()
    assert judge.api_key_hint == "sk-...wxyz" and listener.received == []


def test_researcher_of_another_project_cannot_use_this_projects_key_or_cached_replies(
    researcher_client, client, project, listener, server_secrets, evaluation_setup
):
    owner_judge = paste_a_key(researcher_client, project, listener, key=OTHER_PASTED_KEY)
    first = run_to_end(owner_judge, *evaluation_setup)
    assert first.status == JudgeRun.Status.DONE
    stranger = factories.make_user("sven")
    theirs = factories.make_project(name="Their study", researchers=[stranger])
    client.force_login(stranger)
    # This project's judge pages: not found for them.
    assert client.get(reverse("judge_detail", args=[project.slug, owner_judge.pk])).status_code == 404
    for name in ("judge_test_connection", "judge_replace_key"):
        url = reverse(name, args=[project.slug, owner_judge.pk])
        assert client.post(url, {"api_key": "sk-stranger-00000000000"}).status_code == 404
    # Their own judge on the same endpoint and model, with "pasted" chosen but no key of their own.
    form = judge_form(listener.base_url, credential="pasted", model=owner_judge.model)
    assert client.post(reverse("judge_create", args=[theirs.slug]), form).status_code == 200
    their_judge = make_judge(theirs, listener, model=owner_judge.model, api_key_env="")
    version = factories.make_rubric(project=theirs, name="Quality")
    evaluation = factories.make_evaluation(theirs, factories.make_dataset(theirs, items=2), [version])
    requests_before = len(listener.received)
    run = run_to_end(their_judge, evaluation, version)
    assert run.status == JudgeRun.Status.DONE
    assert not run.calls.filter(cached=True).exists()
    assert len(listener.received) == requests_before + 2  # asked the endpoint itself
    assert OTHER_PASTED_KEY not in listener.everything(since=requests_before)
    assert "authorization" not in listener.everything(since=requests_before).lower()


# -- the cache and a missing credential ----------------------------------------------------------
def test_a_run_whose_declared_credential_is_gone_fails_at_its_first_call_though_the_cache_could_answer(
    project, fake_llm, evaluation_setup, monkeypatch
):
    judge = make_judge(project, fake_llm)
    assert run_to_end(judge, *evaluation_setup).status == JudgeRun.Status.DONE
    monkeypatch.delenv(TEST_KEY_ENV)
    run = run_to_end(judge, *evaluation_setup)
    assert run.status == JudgeRun.Status.FAILED
    assert run.error == f"no API key: the server credential {TEST_KEY_ENV} is not set on this server"
    assert run.calls.filter(status=JudgeCall.Status.DONE).count() == 0


def test_the_reply_cache_is_kept_per_credential(project, fake_llm, evaluation_setup, server_secrets):
    with_test_key = make_judge(project, fake_llm)
    run_to_end(with_test_key, *evaluation_setup)
    again = run_to_end(with_test_key, *evaluation_setup)
    assert again.calls.filter(cached=True).count() == 2
    with_lab_key = make_judge(project, fake_llm, name="lab judge", api_key_env=LAB_KEY_ENV)
    lab_run = run_to_end(with_lab_key, *evaluation_setup)
    assert lab_run.status == JudgeRun.Status.DONE and not lab_run.calls.filter(cached=True).exists()


# -- keys go only where they were meant for ------------------------------------------------------
def test_a_server_credential_goes_only_to_the_hosts_the_operator_declared_for_it(
    researcher_client, project, listener, fake_llm, server_secrets, evaluation_setup
):
    """Else any researcher could point a judge at a server of their own and read the lab's key off the
    request (the connection test alone would do)."""
    provider = urlsplit(fake_llm.base_url).netloc  # 127.0.0.1 and the provider's own port
    server_secrets.CONCORD_JUDGE_CREDENTIALS = {TEST_KEY_ENV: TEST_KEY_HOSTS, LAB_KEY_ENV: [provider]}
    form = judge_form(listener.base_url, credential=f"env:{LAB_KEY_ENV}")
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), form)
    page = response.content.decode()
    assert response.status_code == 200 and f"may be sent only to {provider}, not to 127.0.0.1" in page
    assert f"Server credential {LAB_KEY_ENV} (for {provider})" in page  # the form says where each key goes
    assert not Judge.objects.filter(name="attack judge").exists()

    # A judge stored otherwise (before the operator bound the key, or by a script) gets no key either.
    judge = make_judge(project, listener, model="m", api_key_env=LAB_KEY_ENV)
    tested = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    assert f"may be sent only to {provider}" in tested.content.decode()
    run = run_to_end(judge, *evaluation_setup)
    assert run.status == JudgeRun.Status.FAILED and f"may be sent only to {provider}" in run.error
    assert listener.received == []

    lab_judge = make_judge(project, fake_llm, name="lab judge", api_key_env=LAB_KEY_ENV)
    assert run_to_end(lab_judge, *evaluation_setup).status == JudgeRun.Status.DONE


@pytest.mark.parametrize(
    ("declared", "base_url", "allowed"),
    [
        ("api.openai.com", "https://api.openai.com/v1", True),
        ("api.openai.com", "https://API.OpenAI.com./v1", True),
        ("api.openai.com", "http://api.openai.com:8080/v1", True),  # no port declared: any
        ("api.openai.com:443", "https://api.openai.com/v1", True),
        ("api.openai.com:443", "http://api.openai.com/v1", False),
        ("api.openai.com", "https://api.openai.com.evil.test/v1", False),
        ("api.openai.com", "https://evil.test/api.openai.com/v1", False),
        ("api.openai.com", "https://api.openai.com@evil.test/v1", False),
        ("[::1]:8000", "http://[::1]:8000/v1", True),
        ("[::1]:8000", "http://[::1]:8001/v1", False),
    ],
)
def test_a_credentials_host_is_matched_exactly(settings, declared, base_url, allowed):
    from judges import credentials

    settings.CONCORD_JUDGE_CREDENTIALS = {LAB_KEY_ENV: [declared]}
    assert (credentials.host_refused(LAB_KEY_ENV, base_url) == "") is allowed


def test_a_colleague_who_points_a_judge_elsewhere_must_paste_its_key_again(
    researcher_client, project, listener, fake_llm, server_secrets, evaluation_setup, client
):
    """Another researcher of the project may edit the judge, but not send its pasted key to their server."""
    form = judge_form(fake_llm.base_url, name="owners judge", credential="pasted", api_key=OTHER_PASTED_KEY)
    assert researcher_client.post(reverse("judge_create", args=[project.slug]), form).status_code == 302
    judge = Judge.objects.get(name="owners judge")
    colleague = factories.make_user("eve")
    project.memberships.create(user=colleague, role="researcher")
    client.force_login(colleague)
    edit = reverse("judge_edit", args=[project.slug, judge.pk])
    moved = judge_form(listener.base_url, name="owners judge", credential="pasted", api_key="")
    response = client.post(edit, moved)
    assert (
        response.status_code == 200
        and "points to another server: paste the key again" in response.content.decode()
    )
    client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    judge.refresh_from_db()
    assert judge.base_url == fake_llm.base_url and listener.received == []

    same_server = judge_form(
        fake_llm.base_url, name="owners judge", credential="pasted", api_key="", samples="2"
    )
    assert client.post(edit, same_server).status_code == 302  # other changes keep the key
    theirs = judge_form(
        listener.base_url, name="owners judge", credential="pasted", api_key="sk-eves-own-key-00"
    )
    assert client.post(edit, theirs).status_code == 302  # with a key of their own, they may
    client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    assert "sk-eves-own-key-00" in listener.everything() and OTHER_PASTED_KEY not in listener.everything()


# -- endpoints ----------------------------------------------------------------------------------
REFUSED_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/v1",
    "http://[::ffff:a9fe:a9fe]/v1",
    "http://[fe80::1]/v1",
    "http://metadata.google.internal/computeMetadata/v1",
    "http://user:password@api.example.test/v1",
    "ftp://api.example.test/v1",
    "http://0.0.0.0:8000/v1",
]


@pytest.mark.parametrize("base_url", REFUSED_URLS)
def test_researcher_cannot_create_a_judge_on_a_metadata_or_malformed_endpoint(
    researcher_client, project, base_url
):
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), judge_form(base_url))
    assert response.status_code == 200 and not Judge.objects.exists()
    assert list(response.context["form"].errors) == ["base_url"]
    (message,) = response.context["form"].errors["base_url"]
    assert message.startswith("This base URL is refused: ") and message.count("refused") == 1  # said once


def test_loopback_endpoints_are_refused_unless_the_operator_allows_private_ones(
    researcher_client, project, listener, server_secrets, evaluation_setup
):
    server_secrets.CONCORD_JUDGE_ALLOW_PRIVATE = False
    response = researcher_client.post(
        reverse("judge_create", args=[project.slug]), judge_form(listener.base_url)
    )
    assert "CONCORD_JUDGE_ALLOW_PRIVATE" in response.content.decode() and not Judge.objects.exists()
    stored = make_judge(project, listener, model="m")  # saved before the rule, or through the admin
    page = researcher_client.post(reverse("judge_test_connection", args=[project.slug, stored.pk]))
    assert "loopback or private network" in page.content.decode()
    run = run_to_end(stored, *evaluation_setup)
    assert run.status == JudgeRun.Status.FAILED and "loopback or private network" in run.error
    assert listener.received == []


def test_a_name_that_rebinds_to_loopback_after_the_check_is_refused_at_connection(
    researcher_client, project, listener, server_secrets, monkeypatch
):
    server_secrets.CONCORD_JUDGE_ALLOW_PRIVATE = False
    real_getaddrinfo = socket.getaddrinfo
    answers = iter(["93.184.216.34"])  # public when the form checks, loopback ever after

    def rebinding(host, port, *args, **kwargs):
        if host == "rebind.example.test":
            address = next(answers, "127.0.0.1")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"http://rebind.example.test:{listener.port}/v1"
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), judge_form(url))
    assert response.status_code == 302
    judge = Judge.objects.get()
    page = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    assert "loopback or private network" in page.content.decode()
    assert listener.received == []


def test_connection_test_says_could_not_connect_without_the_networks_error_text(
    researcher_client, project, listener
):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    garbage = socket.socket()
    garbage.bind(("127.0.0.1", 0))
    garbage.listen()

    def answer_like_ssh() -> None:
        while True:
            try:
                connection, _ = garbage.accept()
            except OSError:
                return  # closed at the end of the test
            connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            connection.close()

    threading.Thread(target=answer_like_ssh, daemon=True).start()
    for port in (closed_port, garbage.getsockname()[1]):
        judge = make_judge(project, listener, name=f"scan {port}", base_url=f"http://127.0.0.1:{port}/v1")
        page = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
        html = page.content.decode()
        assert "could not connect to the endpoint" in html
        for leak in ("Errno", "refused", "SSH", "RemoteProtocol", "disconnected", "timed out"):
            assert leak not in html
    garbage.close()


def _self_signed_https_server(tmp_path) -> tuple[ThreadingHTTPServer, list[str]]:
    """An HTTPS server on loopback with a certificate no public authority issued; records what reaches it."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    loopback = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(loopback, critical=False)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(self.path)
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


def test_an_endpoint_whose_certificate_no_authority_issued_is_refused_with_the_reason(
    researcher_client, project, listener, evaluation_setup, tmp_path
):
    """The trust store every judge shares (one per process) still verifies: a self-signed endpoint (a local
    vLLM behind TLS, or someone in the middle) gets no request, and the run stops at once with the reason
    instead of retrying a connection that cannot succeed."""
    server, received = _self_signed_https_server(tmp_path)
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/v1"
        judge = make_judge(project, listener, name="self-signed", base_url=url, concurrency=2)
        page = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
        assert "TLS certificate was not accepted (self-signed certificate)" in page.content.decode()
        run = run_to_end(judge, *evaluation_setup)
    finally:
        server.shutdown()
        server.server_close()
    assert run.status == JudgeRun.Status.FAILED
    assert "TLS certificate was not accepted" in run.error
    assert run.calls.get(status=JudgeCall.Status.FAILED).attempts == 1
    assert received == []


def test_a_lab_certificate_authority_named_by_the_operator_is_trusted_beside_the_public_ones(
    researcher_client, project, listener, tmp_path, settings, monkeypatch
):
    """CONCORD_JUDGE_CA_BUNDLE: the same endpoint, its authority now in the bundle, gets the request over
    TLS; the refusal of another names the setting."""
    from judges import client

    server, received = _self_signed_https_server(tmp_path)
    settings.CONCORD_JUDGE_CA_BUNDLE = str(tmp_path / "cert.pem")
    client.ssl_context.cache_clear()  # the trust store is loaded once per process
    monkeypatch.setattr(client, "_endpoints", {})
    monkeypatch.setattr(client, "_clients", {})
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/v1"
        judge = make_judge(project, listener, name="lab-ca", base_url=url, concurrency=2)
        page = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
        (tmp_path / "other").mkdir()
        other, _ = _self_signed_https_server(tmp_path / "other")
        refused = client.connection_error(ssl_failure(other))
        other.shutdown()
        other.server_close()
    finally:
        server.shutdown()
        server.server_close()
        client.ssl_context.cache_clear()
    assert received and "TLS certificate" not in page.content.decode()
    assert "and those in CONCORD_JUDGE_CA_BUNDLE" in refused.message


def ssl_failure(server: ThreadingHTTPServer) -> Exception:
    """What verifying `server`'s certificate against the trust store raises."""
    import ssl

    from judges import client

    address = ("127.0.0.1", server.server_address[1])
    with socket.create_connection(address) as raw, pytest.raises(ssl.SSLError) as failed:
        client.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1")
    return failed.value


# -- prices -------------------------------------------------------------------------------------
def test_negative_prices_are_refused_by_the_form_and_the_database(researcher_client, project, listener):
    form = judge_form(listener.base_url, price_input_per_million="-1", price_output_per_million="-0.5")
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), form)
    assert response.status_code == 200 and "greater than or equal to 0" in response.content.decode()
    assert not Judge.objects.exists()
    with pytest.raises(IntegrityError), transaction.atomic():
        make_judge(project, listener, price_input_per_million=-1)


def test_a_judge_cannot_hold_a_pasted_key_and_a_server_credential_at_once(project, listener):
    with pytest.raises(IntegrityError), transaction.atomic():
        make_judge(project, listener, api_key_encrypted="token", api_key_hint="sk-...abcd")


def test_runs_of_the_longest_judge_and_rubric_names_get_rater_names_that_fit_and_differ(project, listener):
    """Issue 34: judge (120) + rubric (200) + " · run N" passed the rater's 200 characters: a 500."""
    from judges.services import launch_run
    from projects.names import max_length
    from rubrics.models import Rubric

    version = factories.make_rubric(project=project, name="R" * max_length(Rubric, "name"))
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=2), [version])
    judge = make_judge(project, listener, name="J" * max_length(Judge, "name"))
    runs = [launch_run(judge=judge, evaluation=evaluation, rubric_version=version) for _ in range(2)]
    names = [run.rater.name for run in runs]
    assert all(len(name) == 200 for name in names)
    assert [name[-len(f"R… v1 (id {version.pk}) · run 1") :] for name in names] == [
        f"R… v1 (id {version.pk}) · run 1",
        f"R… v1 (id {version.pk}) · run 2",
    ]
    assert names[0].startswith("J" * 120 + " · RRR")
