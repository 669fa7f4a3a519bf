"""``/metrics`` by Prometheus' conventions, without a daemon: the rules its names and labels keep
(``convention_violations``, which the daemon's tests apply to a live ``/metrics`` too), what a
standby's metrics hold, and the API's requests counted by route template.

Rules of these tests: they run in trio (pytest-trio's ``trio_mode``); a test that times something
runs on ``autojump_clock`` and asserts the exact durations of trio's clock; requests go through
httpx's ASGI transport, with no socket.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

import httpx
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from supervisor.api.http_metrics import CountRequests
from supervisor.ops.metrics import DaemonMetrics
from supervisor.ops.metrics_service import identifier

_SNAKE_CASE: Final = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
# Base units, written as the name's last word (before ``_total``): Prometheus' naming page.
_BASE_UNITS: Final = frozenset({"seconds", "bytes"})
_OTHER_UNITS: Final = frozenset(
    {
        "milliseconds",
        "microseconds",
        "nanoseconds",
        "ms",
        "minutes",
        "hours",
        "days",
        "kilobytes",
        "megabytes",
    }
)
# The samples a family of each type writes, besides its name.
_SUFFIXES: Final = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}

Labels = tuple[tuple[str, str], ...]


def convention_violations(text: str) -> list[str]:
    """What promtool's ``check metrics`` and Prometheus' naming page would object to in ``text``:
    names in snake_case; counters, and only they, end in ``_total``; units are base units written
    as suffixes; every family has one HELP and one TYPE, and every sample a family; label names in
    snake_case and label values identifiers (no spaces, not empty); an ``_info`` is 1."""
    found: list[str] = []
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    sample_names: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            kind, name, _, rest = line[2:6], *line[7:].partition(" ")
            seen = helps if kind == "HELP" else types
            if name in seen:
                found.append(f"{name}: a second {kind}")
            seen[name] = rest
        elif line and not line.startswith("#"):
            sample_names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    for name in sorted(helps.keys() | types.keys()):
        found += _name_violations(name, types.get(name, ""), helps.get(name, ""))
    for sample_name in sorted(sample_names):
        if not any(sample_name in {n, *(n + s for s in _SUFFIXES.get(t, ()))} for n, t in types.items()):
            found.append(f"{sample_name}: a sample of no family with a TYPE")
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found += _label_violations(sample.name, sample.labels)
            if sample.name.endswith("_info") and sample.value != 1:
                found.append(f"{sample.name}: an info metric's value is 1")
    return found


def _name_violations(name: str, kind: str, help_text: str) -> list[str]:
    found = []
    if not kind:
        found.append(f"{name}: no TYPE")
    if not help_text.strip():
        found.append(f"{name}: no HELP")
    if not _SNAKE_CASE.fullmatch(name):
        found.append(f"{name}: not snake_case")
    if (kind == "counter") != name.endswith("_total"):
        found.append(
            f"{name}: a {kind or 'family'} {'must' if kind == 'counter' else 'must not'} end in _total"
        )
    words = name.removesuffix("_total").removesuffix("_info").split("_")
    if _OTHER_UNITS & set(words):
        found.append(f"{name}: a unit other than seconds or bytes")
    if any(word in _BASE_UNITS for word in words[:-1]):
        found.append(f"{name}: its unit is not its suffix")
    return found


def _label_violations(name: str, labels: Mapping[str, str]) -> list[str]:
    found = []
    for label, value in labels.items():
        if not _SNAKE_CASE.fullmatch(label):
            found.append(f"{name}: label {label} is not snake_case")
        if not value or re.search(r"\s", value):
            found.append(f"{name}: {label}={value!r} is no identifier")
    return found


def sample_values(text: str, name: str) -> dict[Labels, float]:
    """The samples named ``name`` in ``text``, by their labels (sorted pairs)."""
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def role_of(text: str) -> str:
    """The role ``supervisor_role`` says (the one at 1)."""
    roles = sample_values(text, "supervisor_role")
    assert sorted(roles.values()) == [0, 1], roles
    (role,) = [labels[0][1] for labels, value in roles.items() if value == 1]
    return role


def test_the_rules_see_each_break_of_them() -> None:
    text = """\
# HELP requests Requests.
# TYPE requests counter
requests 1
# TYPE latency_ms gauge
latency_ms{path="a b"} 3
# HELP queue_seconds_waiting Waiting.
# TYPE queue_seconds_waiting gauge
queue_seconds_waiting{Kind=""} 1
# HELP build_info Build.
# TYPE build_info gauge
build_info 2
untyped 2
"""
    assert convention_violations(text) == [
        "latency_ms: no HELP",
        "latency_ms: a unit other than seconds or bytes",
        "queue_seconds_waiting: its unit is not its suffix",
        "requests: a counter must end in _total",
        "untyped: a sample of no family with a TYPE",
        "latency_ms: path='a b' is no identifier",
        "queue_seconds_waiting: label Kind is not snake_case",
        "queue_seconds_waiting: Kind='' is no identifier",
        "build_info: an info metric's value is 1",
    ]


async def test_a_standby_shows_its_build_role_process_and_python() -> None:
    text = DaemonMetrics(lambda: None).exposition().decode()
    assert convention_violations(text) == []
    assert role_of(text) == "standby"
    families = {family.name for family in text_string_to_metric_families(text)}
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_info"} <= families
    assert "python_gc_objects_collected" in families
    ((labels, value),) = sample_values(text, "supervisor_build_info").items()
    assert value == 1
    assert dict(labels).keys() == {"version", "python", "trio"}
    assert dict(labels)["trio"] == trio.__version__
    assert not any(name.startswith("supervisor_runners") for name in families), "no term: no pools"


async def test_the_embedded_simulated_cluster_is_a_gauge_of_its_own() -> None:
    real = DaemonMetrics(lambda: None).exposition().decode()
    assert sample_values(real, "supervisor_nomad_simulated") == {(): 0}
    simulated = DaemonMetrics(lambda: None, simulated=lambda: True).exposition().decode()
    assert convention_violations(simulated) == []
    assert sample_values(simulated, "supervisor_nomad_simulated") == {(): 1}


async def test_each_daemon_counts_into_a_registry_of_its_own() -> None:
    first, second = DaemonMetrics(lambda: None), DaemonMetrics(lambda: None)
    first.observe_request("GET", "/metrics", 200, 0.01)
    requests = "supervisor_http_requests_total"
    assert sample_values(first.exposition().decode(), requests) == {
        (("method", "GET"), ("route", "/metrics"), ("status", "200")): 1
    }
    assert sample_values(second.exposition().decode(), requests) == {}


def _refusing_without_key(app: ASGIApp) -> ASGIApp:
    """A 401 before the router ever sees the request, as the token check answers one."""

    async def refusing(scope: Scope, receive: Receive, send: Send) -> None:
        if dict(scope["headers"]).get(b"key") == b"k":
            await app(scope, receive, send)
        else:
            await Response(status_code=401)(scope, receive, send)

    return refusing


async def test_requests_are_counted_by_route_template_and_timed_on_trio_s_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def thing(request: Request) -> Response:
        await trio.sleep(0.3)
        return PlainTextResponse(request.path_params["thing_id"])

    app = Starlette(routes=[Route("/things/{thing_id}", thing, methods=["GET"])])
    metrics = DaemonMetrics(lambda: None)
    counted = CountRequests(_refusing_without_key(app), metrics, app.routes)
    transport = httpx.ASGITransport(app=counted)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        assert (await http.get("/things/42", headers={"key": "k"})).status_code == 200
        assert (await http.get("/things/43")).status_code == 401
        assert (await http.get("/nowhere", headers={"key": "k"})).status_code == 404
        assert (await http.request("BREW", "/things/44", headers={"key": "k"})).status_code == 405
    text = metrics.exposition().decode()
    assert convention_violations(text) == []
    assert sample_values(text, "supervisor_http_requests_total") == {
        (("method", "GET"), ("route", "/things/{thing_id}"), ("status", "200")): 1,
        (("method", "GET"), ("route", "/things/{thing_id}"), ("status", "401")): 1,
        (("method", "GET"), ("route", "unmatched"), ("status", "404")): 1,
        (("method", "other"), ("route", "/things/{thing_id}"), ("status", "405")): 1,
    }
    things = (("method", "GET"), ("route", "/things/{thing_id}"))
    buckets = sample_values(text, "supervisor_http_request_duration_seconds_bucket")
    assert buckets[(("le", "0.005"), *things)] == 1, "the 401, at once"
    assert buckets[(("le", "0.25"), *things)] == 1
    assert buckets[(("le", "0.5"), *things)] == 2, "the 200, after its 0.3 s"
    assert sample_values(text, "supervisor_http_request_duration_seconds_sum")[things] == 0.3


def test_label_values_are_identifiers_not_words() -> None:
    assert identifier("node restart") == "node_restart"
    assert identifier("exec refusal") == "exec_refusal"
    assert identifier("exit") == "exit"
    assert identifier("The Runner: gone!") == "the_runner_gone"
