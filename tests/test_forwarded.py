"""Whether a request came over HTTPS: the connection's own scheme, or a trusted proxy's
``X-Forwarded-Proto`` or, without one, its ``Forwarded`` (RFC 7239)."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.api.forwarded import forwarded_proto, is_secure, trusted_proxies

LOOPBACK = trusted_proxies(("127.0.0.1", "::1"))


def scope(client: str | None, *headers: tuple[str, str], scheme: str = "http") -> dict[str, Any]:
    return {
        "scheme": scheme,
        "client": (client, 50000) if client else None,
        "headers": [(name.encode(), value.encode()) for name, value in headers],
    }


@pytest.mark.parametrize(
    ("headers", "proto"),
    [
        ([("forwarded", "proto=https")], "https"),
        ([("Forwarded", 'for="[2001:db8::1]:4711";proto=HTTPS;by=10.0.0.1')], "https"),
        # Several elements: the last, the nearest proxy's, counts.
        ([("forwarded", "for=192.0.2.1;proto=https, for=10.0.0.2;proto=http")], "http"),
        ([("forwarded", "for=192.0.2.1;proto=http, for=10.0.0.2;proto=https")], "https"),
        # Over several lines, as one list.
        ([("forwarded", "proto=http"), ("forwarded", "proto=https")], "https"),
        # A quoted value may hold a comma and a semicolon.
        ([("forwarded", 'for="a,b;c";proto="https"')], "https"),
        ([("forwarded", r'for="x\"y";proto=https')], "https"),
        # The nearest element says no proto: the client's earlier one is not taken.
        ([("forwarded", "proto=https, for=10.0.0.2")], None),
        # Empty pairs and elements are allowed.
        ([("forwarded", "for=192.0.2.1;;proto=https;, , ")], "https"),
        ([("forwarded", ""), ("forwarded", "proto=https")], "https"),
        ([("x-forwarded-proto", "https")], "https"),
        ([("x-forwarded-proto", " HTTPS ")], "https"),
        ([("x-forwarded-proto", "http, https")], "https"),
        ([("x-forwarded-proto", "https"), ("x-forwarded-proto", "http")], "http"),
        ([("x-forwarded-proto", "gopher")], None),
        # X-Forwarded-Proto is read first; Forwarded only without it.
        ([("forwarded", "proto=https"), ("x-forwarded-proto", "http")], "http"),
        ([("x-forwarded-proto", "gopher"), ("forwarded", "proto=https")], None),
        # A Forwarded that fails to parse anywhere is not read at all.
        ([("forwarded", "for")], None),
        ([("forwarded", 'proto=https, "'), ("forwarded", "proto=http")], None),
        ([("forwarded", "proto=http, for=10.0.0.2 proto=https")], None),
        ([("forwarded", "proto=http;proto=https")], None),
        ([], None),
    ],
)
def test_the_proto_the_nearest_proxy_added(headers: list[tuple[str, str]], proto: str | None) -> None:
    assert forwarded_proto((name.encode(), value.encode()) for name, value in headers) == proto


def test_a_tls_connection_is_secure_whoever_the_peer() -> None:
    assert is_secure(scope("203.0.113.9", scheme="https"), LOOPBACK)
    assert is_secure(scope(None, scheme="wss"), LOOPBACK)


def test_a_trusted_proxy_is_believed_an_untrusted_one_is_not() -> None:
    assert is_secure(scope("127.0.0.1", ("x-forwarded-proto", "https")), LOOPBACK)
    assert is_secure(scope("::1", ("forwarded", "proto=https")), LOOPBACK)
    assert not is_secure(scope("203.0.113.9", ("x-forwarded-proto", "https")), LOOPBACK)
    assert not is_secure(scope(None, ("x-forwarded-proto", "https")), LOOPBACK)
    assert not is_secure(scope("127.0.0.1", ("x-forwarded-proto", "http")), LOOPBACK)
    assert not is_secure(scope("127.0.0.1"), LOOPBACK)


def test_networks_ipv6_and_everyone() -> None:
    proxies = trusted_proxies(("10.0.0.0/8", "2001:db8::/32"))
    assert proxies.trust("10.1.2.3")
    assert proxies.trust("2001:db8::7")
    assert proxies.trust("fe80::1%eth0") is False
    assert proxies.trust("::ffff:10.0.0.1")  # an IPv4 peer on a dual-stack socket
    assert not proxies.trust("11.0.0.1")
    assert not proxies.trust("not an address")
    assert trusted_proxies(("*",)).trust("203.0.113.9")
    assert trusted_proxies(("*",)).trust(None)
    assert not trusted_proxies(()).trust("127.0.0.1")


def test_a_client_behind_the_nginx_recipe_cannot_choose_its_scheme() -> None:
    # nginx (docs/serving.md) overwrites X-Forwarded-Proto with its $scheme; a proxy that does not
    # also drop the client's Forwarded passes it on, which must not win.
    assert not is_secure(
        scope("127.0.0.1", ("forwarded", "proto=https"), ("x-forwarded-proto", "http")), LOOPBACK
    )


def test_a_broken_forwarded_cannot_hide_the_element_the_proxy_appended() -> None:
    # The client's value ends in a broken part; the proxy appends its own element after it.
    client_wrote = 'proto=https, "'
    for headers in (
        [("forwarded", f"{client_wrote}, for=192.0.2.7;proto=http")],
        [("forwarded", client_wrote), ("forwarded", "for=192.0.2.7;proto=http")],
    ):
        assert forwarded_proto((n.encode(), v.encode()) for n, v in headers) is None
        assert not is_secure(scope("127.0.0.1", *headers), LOOPBACK)
