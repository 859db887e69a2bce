"""Where a judge's API key comes from: never an arbitrary environment variable of the server.

Two sources only:
- a server credential: an environment variable the operator declared in CONCORD_JUDGE_CREDENTIALS, with
  the hosts its key may be sent to (`NAME@host[:port]`): a judge pointed anywhere else gets no key;
- a key a researcher pasted: stored on the judge (so scoped to its project), encrypted at rest with
  CONCORD_ENCRYPTION_KEY (MultiFernet: the first key encrypts, every key decrypts, for rotation), shown
  afterwards only as a hint such as `sk-...abcd`.
A judge with neither sends no key (the simulated model, a local vLLM started without --api-key).

A `Credential` carries the key for one lane, an `identity` that names it without the secret (for the reply
cache) and, when the key cannot be had, the `problem` that fails the run's first call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.views.decorators.debug import sensitive_variables

SETTING = "CONCORD_JUDGE_CREDENTIALS"
ENCRYPTION_SETTING = "CONCORD_ENCRYPTION_KEY"
NO_KEY = "none"
PASTED = "pasted"
ENV_PREFIX = "env:"


class CredentialError(Exception):
    """A key that cannot be stored or read; the message says why and never contains the key."""


@dataclass(frozen=True)
class Credential:
    identity: str
    api_key: str = ""
    problem: str = ""

    def __repr__(self) -> str:  # never the key, even in a traceback's locals
        return f"Credential({self.identity!r}, problem={self.problem!r})"


def declared_credentials() -> list[str]:
    return list(settings.CONCORD_JUDGE_CREDENTIALS)


def credential_hosts(name: str) -> list[str]:
    """The hosts (`host` or `host:port`) the operator lets this server credential's key be sent to."""
    return list(settings.CONCORD_JUDGE_CREDENTIALS.get(name, []))


def _host_and_port(netloc: str, *, scheme: str = "") -> tuple[str, int | None]:
    parts = urlsplit(f"{scheme}://{netloc}" if scheme else f"//{netloc}")
    default = {"https": 443, "http": 80}.get(scheme)
    return (parts.hostname or "").rstrip("."), parts.port or default


def origin(base_url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port: where a key sent with requests to this base URL goes."""
    scheme = urlsplit(base_url).scheme
    try:
        return (scheme, *_host_and_port(urlsplit(base_url).netloc, scheme=scheme))
    except ValueError:
        return (scheme, base_url, None)


def host_refused(name: str, base_url: str) -> str:
    """Why this server credential may not go to this base URL ("" when it may): its host (and port, when
    the operator gave one) must be one the operator declared for it."""
    _, host, port = origin(base_url)
    for declared in credential_hosts(name):
        allowed_host, allowed_port = _host_and_port(declared)
        if host == allowed_host and allowed_port in (None, port):
            return ""
    return (
        f"the server credential {name} may be sent only to {', '.join(credential_hosts(name))}, not to "
        f"{host}: choose another key for this base URL, or ask the operator to declare "
        f"{name}@{host} in {SETTING}"
    )


def undeclared_message(name: str) -> str:
    return (
        f"{name} is not a server credential: the operator lists the environment variables judges may use "
        f"in {SETTING}."
    )


def can_store_keys() -> bool:
    return bool(settings.CONCORD_ENCRYPTION_KEY)


def cannot_store_message() -> str:
    return f"Pasted keys cannot be stored: the operator has not set {ENCRYPTION_SETTING} on this server."


def _fernet() -> MultiFernet:
    if not can_store_keys():
        raise CredentialError(cannot_store_message())
    return MultiFernet([Fernet(key.encode()) for key in settings.CONCORD_ENCRYPTION_KEY])


@sensitive_variables("api_key")
def encrypt_key(api_key: str) -> str:
    return _fernet().encrypt(api_key.encode()).decode()


def decrypt_key(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise CredentialError(
            f"the judge's pasted key cannot be decrypted with {ENCRYPTION_SETTING} "
            "(was the key that stored it removed?); paste the key again"
        ) from None


@sensitive_variables("api_key")
def key_hint(api_key: str) -> str:
    """What a page may show of a pasted key: `sk-...abcd` (less of a short key)."""
    if len(api_key) < 12:
        return "..." + api_key[-2:]
    prefix = api_key[:3] if api_key[:3].isascii() else ""
    return f"{prefix}...{api_key[-4:]}"


@sensitive_variables("value")
def env_credential(name: str, *, base_url: str) -> Credential:
    identity = ENV_PREFIX + name
    if name not in declared_credentials():
        return Credential(identity, problem=undeclared_message(name))
    if refused := host_refused(name, base_url):
        return Credential(identity, problem=refused)
    value = os.environ.get(name, "")
    if not value:
        return Credential(identity, problem=f"the server credential {name} is not set on this server")
    return Credential(identity, api_key=value)


def pasted_credential(*, judge_id: int) -> Credential:
    from .models import Judge

    row = Judge.objects.filter(pk=judge_id).values("api_key_encrypted", "api_key_version").first()
    identity = f"{PASTED}:{judge_id}:{row['api_key_version'] if row else 0}"
    if not row or not row["api_key_encrypted"]:
        return Credential(identity, problem="the judge has no pasted key; paste one on the judge's page")
    try:
        return Credential(identity, api_key=decrypt_key(row["api_key_encrypted"]))
    except CredentialError as error:
        return Credential(identity, problem=str(error))


def credential_for(*, judge_id: int, source: str, base_url: str) -> Credential:
    """The credential a judge (or a run's frozen parameters) names: "none", "pasted" or "env:NAME", for
    requests to `base_url`."""
    if source == NO_KEY:
        return Credential(NO_KEY)
    if source == PASTED:
        return pasted_credential(judge_id=judge_id)
    if source.startswith(ENV_PREFIX):
        return env_credential(source.removeprefix(ENV_PREFIX), base_url=base_url)
    return Credential(source, problem=f"unknown credential source {source!r}")


def declared_values() -> list[str]:
    """The values of every declared server credential, scrubbed from whatever an endpoint sends back."""
    return [value for name in declared_credentials() if (value := os.environ.get(name, ""))]
