"""Which addresses and base URLs a judge may use (judges.endpoint_safety), one rule per case."""

import ipaddress

import pytest

from judges.endpoint_safety import UnsafeEndpoint, check_address, check_base_url

ALWAYS_REFUSED = [
    "169.254.169.254",  # the cloud metadata service
    "169.254.1.1",
    "::ffff:169.254.169.254",  # the same, written as IPv4-mapped IPv6
    "64:ff9b::a9fe:a9fe",  # ... through NAT64
    "2002:a9fe:a9fe::1",  # ... through 6to4
    "::a9fe:a9fe",  # ... IPv4-compatible
    "fe80::1",
    "fd00:ec2::254",  # AWS metadata over IPv6
    "100.100.100.200",  # Alibaba Cloud metadata
    "0.0.0.0",
    "::",
    "224.0.0.1",
    "240.0.0.1",
]
PRIVATE = [
    "127.0.0.1",
    "::1",
    "::ffff:127.0.0.1",
    "10.1.2.3",
    "172.16.0.9",
    "192.168.1.20",
    "fc00::1",
    "100.64.0.1",
]
PUBLIC = ["8.8.8.8", "2606:4700::1111", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", ALWAYS_REFUSED)
@pytest.mark.parametrize("allow_private", [False, True])
def test_link_local_metadata_and_non_unicast_addresses_are_always_refused(address, allow_private):
    with pytest.raises(UnsafeEndpoint):
        check_address(ipaddress.ip_address(address), allow_private=allow_private)


@pytest.mark.parametrize("address", PRIVATE)
def test_loopback_and_private_addresses_need_the_operators_consent(address):
    with pytest.raises(UnsafeEndpoint, match="CONCORD_JUDGE_ALLOW_PRIVATE"):
        check_address(ipaddress.ip_address(address), allow_private=False)
    check_address(ipaddress.ip_address(address), allow_private=True)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address):
    check_address(ipaddress.ip_address(address), allow_private=False)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://api.example.test/v1", "http:// or https://"),
        ("https://key:secret@api.example.test/v1", "user name or password"),
        ("https://key@api.example.test/v1", "user name or password"),
        ("http://metadata.google.internal/v1", "metadata"),
        ("http://METADATA.google.internal./v1", "metadata"),
        ("http://169.254.169.254/latest", "link-local"),
        ("http://[::ffff:169.254.169.254]/v1", "link-local"),
        ("http://api.example.test:99999/v1", "malformed"),
    ],
)
def test_refused_base_urls_say_why(url, reason):
    with pytest.raises(UnsafeEndpoint, match=reason):
        check_base_url(url)


def test_a_name_that_does_not_resolve_here_is_accepted_and_checked_at_connection():
    assert check_base_url(" https://api.example.test/v1 ") == "https://api.example.test/v1"


def test_lookups_of_one_name_in_flight_share_one_thread_and_nothing_is_kept_once_answered(monkeypatch):
    """DNS is the edge we do not own: a resolver that hangs stands in for a domain whose name servers never
    answer. Saving its URL again and again leaves one lookup behind, not one thread per save."""
    import threading
    import time

    from judges import endpoint_safety

    answered = threading.Event()
    asked: list[str] = []

    def hanging(host, port, *args, **kwargs):
        asked.append(host)
        if not answered.wait(10):
            raise OSError("no answer")
        return [(2, 1, 6, "", ("93.184.215.14", port))]

    monkeypatch.setattr(endpoint_safety.socket, "getaddrinfo", hanging)
    monkeypatch.setattr(endpoint_safety, "RESOLVE_SECONDS", 0.1)
    threads_before = threading.active_count()
    for _ in range(6):
        assert check_base_url("https://api.hangs.test/v1") == "https://api.hangs.test/v1"
    check_base_url("https://other.hangs.test/v1")
    assert asked == ["api.hangs.test", "other.hangs.test"]
    assert threading.active_count() - threads_before == 2
    answered.set()
    deadline = time.monotonic() + 5
    while endpoint_safety._lookups and time.monotonic() < deadline:  # the two left behind are answered
        time.sleep(0.01)
    assert endpoint_safety.resolve("api.hangs.test", 443) == [ipaddress.ip_address("93.184.215.14")]
    assert asked.count("api.hangs.test") == 2  # looked up anew, not kept
