"""``supervisor check`` against the simulated cluster: every check passes with the daemon's policy,
and each thing that can be wrong (the token, one capability, the agents' ports, the nodes, Nomad
itself, the configuration) fails or warns with the line that names it and its fix.

Rules of these tests: pytest-trio's ``trio_mode``; ``autojump_clock`` wherever time passes (an agent
that never takes the connection), each such test capped by ``trio.fail_after`` on the virtual
clock; the simulated cluster's servers listen on 127.0.0.1, port 0, started with
``nursery.start``. The command line itself runs in a subprocess, as an operator runs it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from supervisor.cli import main
from supervisor.core.config import ExecutionSettings, HaSettings, NomadSection, Settings, load_settings
from supervisor.informer import informer
from supervisor.nomad import NomadClient, NomadSettings, RetryPolicy
from supervisor.nomad.acl_rules import Acl, parse_policy
from supervisor.ops.check import configuration_result, execution_user_result, exit_code, run_checks
from supervisor.ops.check_nomad import STREAM_TOPICS, check_scheduler, check_version
from supervisor.ops.check_result import CheckResult, Status, format_result
from supervisor.ops.check_token import daemon_needs, daemon_policy
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.simulator.config import AclPolicy, AclToken

ROOT = "root-secret-0000"
DAEMON = "daemon-secret-0000"
SETUSER = ExecutionSettings(unprivileged_wrapper="/sbin/setuser user")
HA = Settings(ha=HaSettings(enabled=True), execution=SETUSER)


def policy_with(settings: Settings, old: str, new: str) -> str:
    """The daemon's policy, with ``old`` replaced by ``new``."""
    text = "\n".join(daemon_policy(settings, "default"))
    assert old in text
    return text.replace(old, new)


def acl_config(rules: str) -> SimConfig:
    return SimConfig(
        seed=3,
        nodes=2,
        acl_token=ROOT,
        acl_tokens=(AclToken(DAEMON, ("supervisor",), name="supervisor"),),
        acl_policies=(AclPolicy("supervisor", rules),),
    )


async def start(nursery: trio.Nursery, config: SimConfig) -> SimulatedCluster:
    cluster: SimulatedCluster = await nursery.start(SimulatedCluster(config).run)
    return cluster


async def checked(
    settings: Settings, addresses: list[str], environ: Mapping[str, str] | None = None
) -> dict[str, CheckResult]:
    environ = {"NOMAD_ADDR": ",".join(addresses), **(environ or {})}
    nomad = settings.nomad_settings(environ)
    assert nomad is not None
    reported: list[CheckResult] = []
    results = await run_checks(settings, nomad, path=None, environ=environ, report=reported.append)
    assert reported == results, "each result is reported as it comes"
    assert len({r.name for r in results}) == len(results), "one line per check"
    return {r.name: r for r in results}


def statuses(results: dict[str, CheckResult]) -> dict[str, Status]:
    return {name: r.status for name, r in results.items()}


def text(results: dict[str, CheckResult]) -> str:
    return "\n".join(line for r in results.values() for line in format_result(r))


def test_the_daemons_policy_grants_every_need() -> None:
    for settings in (Settings(), HA):
        acl = Acl([parse_policy("\n".join(daemon_policy(settings, "default")))])
        for need in daemon_needs(settings):
            assert need.missing(acl, "default", settings.ha.lock_path) == [], need.label
    assert [n.label for n in daemon_needs(HA)][-1] == "lock variable"
    assert "lock variable" not in [n.label for n in daemon_needs(Settings())]


def test_the_stream_topics_are_the_informers() -> None:
    assert informer._TOPICS == STREAM_TOPICS


async def test_everything_passes_with_a_token_that_holds_the_daemons_policy(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(60):
        cluster = await start(nursery, acl_config("\n".join(daemon_policy(HA, "default"))))
        results = await checked(HA, cluster.addresses, {"NOMAD_TOKEN": DAEMON})
    assert statuses(results) == {
        "configuration": Status.OK,
        "execution user": Status.OK,
        "nomad servers": Status.OK,
        "cluster leader": Status.OK,
        "nomad version": Status.OK,
        "token": Status.OK,
        "read jobs": Status.OK,
        "write jobs": Status.OK,
        "stream events": Status.OK,
        "read nodes": Status.OK,
        "exec": Status.OK,
        "lock variable": Status.OK,
        "event stream": Status.OK,
        "direct exec": Status.OK,
        "scheduler": Status.SKIP,  # the token may not read it (operator read), as the daemon needs not
        "runner jobs": Status.OK,
        "nodes": Status.OK,
    }
    assert exit_code(list(results.values())) == 0
    assert results["token"].detail.startswith('"supervisor" (accessor ')
    assert "from NOMAD_TOKEN" in results["token"].detail
    assert 'namespace "default": submit-job (policies: supervisor)' in results["write jobs"].detail
    assert "worker-01, worker-02" in results["nodes"].detail
    assert "1.10.5" in results["nomad version"].detail
    assert DAEMON not in text(results)


async def test_a_wrong_token_fails_and_says_which_and_what_to_do(nursery: trio.Nursery) -> None:
    cluster = await start(nursery, acl_config("\n".join(daemon_policy(Settings(), "default"))))
    results = await checked(Settings(), cluster.addresses, {"NOMAD_TOKEN": "not-a-token-of-this-cluster"})
    token = results["token"]
    assert token.status is Status.FAIL
    assert "Nomad does not know the token from NOMAD_TOKEN" in token.detail
    assert "not-" not in token.detail, "no part of a secret is shown"
    assert "failed to parse signed token" in token.detail, "no UUID: Nomad tried it as a signed identity"
    assert token.fix.startswith("set NOMAD_TOKEN to the SecretID of a token of this cluster")
    assert '  node { policy = "read" }' in token.lines
    assert (
        token.lines[-1]
        == "and a token that holds it: nomad acl token create -name supervisor -policy supervisor"
    )
    assert results["exec"].status is Status.SKIP
    assert results["the rest"].status is Status.SKIP
    assert exit_code(list(results.values())) == 1


async def test_a_token_from_the_configuration_file_is_named_so(nursery: trio.Nursery, tmp_path: Path) -> None:
    cluster = await start(nursery, acl_config("\n".join(daemon_policy(Settings(), "default"))))
    config = tmp_path / "supervisor.toml"
    config.write_text(f'[nomad]\naddress = "{cluster.addresses[0]}"\ntoken = "wrong-token"\n')
    settings = load_settings(config, {})
    nomad = settings.nomad_settings({})
    assert nomad is not None
    results = await run_checks(settings, nomad, path=str(config), environ={}, report=lambda _: None)
    token = next(r for r in results if r.name == "token")
    assert "the token from nomad.token in the configuration file" in token.detail
    assert token.fix.startswith("set nomad.token in the configuration file to the SecretID")


@pytest.mark.parametrize(
    ("settings", "old", "new", "failing", "named"),
    [
        (Settings(), ',"alloc-exec"', "", {"exec"}, 'namespace "default": alloc-exec'),
        (Settings(), '"submit-job",', "", {"write jobs"}, 'namespace "default": submit-job'),
        (
            HA,
            "supervisor/leader",
            "supervisor/other",
            {"lock variable"},
            'variables "supervisor/leader" (namespace "default"): read',
        ),
        (
            Settings(),
            'node { policy = "read" }',
            "",
            {"stream events", "read nodes", "event stream", "nodes"},
            "node: read",
        ),
    ],
)
async def test_a_token_lacking_one_capability_names_it(
    nursery: trio.Nursery, settings: Settings, old: str, new: str, failing: set[str], named: str
) -> None:
    rules = policy_with(settings, old, new)
    cluster = await start(nursery, acl_config(rules))
    results = await checked(settings, cluster.addresses, {"NOMAD_TOKEN": DAEMON})
    assert {name for name, r in results.items() if r.status is Status.FAIL} == failing
    first = next(r for r in results.values() if r.status is Status.FAIL)
    assert named in first.detail
    assert "one of the token's policies (supervisor)" in first.fix
    assert any(line.startswith("  namespace") for line in results["token"].lines), "the whole policy"
    assert exit_code(list(results.values())) == 1


async def test_an_agent_behind_a_firewall_means_the_servers_fallback(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(60):
        cluster = await start(nursery, SimConfig(seed=3, nodes=2))
        await cluster.set_agent_reachable("worker-02", False)
        start_time = trio.current_time()
        auto = await checked(Settings(), cluster.addresses)
        assert trio.current_time() - start_time == pytest.approx(1.0, abs=0.01), "agent_connect_timeout"
        always = Settings(nomad=NomadSection(direct_exec="always"))
        strict = await checked(always, cluster.addresses)
    warned = auto["direct exec"]
    assert warned.status is Status.WARN
    assert "1 of 2 client agents do not take a connection within 1 s: worker-02 (127.0.0.1:" in warned.detail
    assert "goes through the servers" in warned.detail
    assert "its restart ends the sessions it forwards" in warned.detail
    assert exit_code(list(auto.values())) == 0, "a warning does not fail"
    assert strict["direct exec"].status is Status.FAIL
    assert "nomad.direct_exec = auto" in strict["direct exec"].fix


async def test_nodes_that_cannot_take_runner_jobs_fail(nursery: trio.Nursery) -> None:
    cluster = await start(nursery, SimConfig(seed=3, nodes=2))
    for node in list(cluster.state.nodes.values()):
        cluster.agents.set_eligibility(node, False)
    results = await checked(Settings(), cluster.addresses)
    nodes = results["nodes"]
    assert nodes.status is Status.FAIL
    assert "no node can take runner jobs (datacenter dc1, node pool default, driver docker)" in nodes.detail
    assert "worker-01 (ineligible)" in nodes.detail


async def test_nomad_unreachable_fails_and_skips_the_rest() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = f"http://127.0.0.1:{closed.getsockname()[1]}"
    results = await checked(Settings(execution=SETUSER), [address])
    assert statuses(results) == {
        "configuration": Status.OK,
        "execution user": Status.OK,
        "nomad servers": Status.FAIL,
        "the rest": Status.SKIP,
    }
    assert f"no Nomad server answers: {address} (ConnectError" in results["nomad servers"].detail
    assert "NOMAD_ADDR" in results["nomad servers"].fix


def test_every_key_is_listed_with_its_source(tmp_path: Path) -> None:
    config = tmp_path / "supervisor.toml"
    config.write_text('[server]\nport = 7300\n[nomad]\ntoken = "file-secret"\n')
    environ = {"SUPERVISOR_LOG_LEVEL": "DEBUG", "NOMAD_ADDR": "http://10.0.0.1:4646", "NOMAD_NAMESPACE": "ci"}
    settings = load_settings(config, environ)
    result = configuration_result(settings, str(config), environ, settings.nomad_settings(environ))
    lines = {line.split()[0]: line.split()[1:] for line in result.lines}
    assert lines["server.port"] == ["7300", "file"]
    assert lines["log.level"] == ["'DEBUG'", "env", "SUPERVISOR_LOG_LEVEL"]
    assert lines["nomad.address"] == ["http://10.0.0.1:4646", "env", "NOMAD_ADDR"]
    assert lines["nomad.namespace"] == ["'ci'", "env", "NOMAD_NAMESPACE"]
    assert lines["nomad.token"] == ["***", "file"]
    assert lines["ha.ttl"] == ["10.0", "default"]
    assert len(lines) == len(result.lines) > 40
    assert "file-secret" not in "\n".join(format_result(result))
    assert result.detail.startswith(f"valid (from {config}): ")


def mock_client(answers: Mapping[str, tuple[int, Any]]) -> NomadClient:
    def answer(request: httpx.Request) -> httpx.Response:
        status, body = answers.get(request.url.path, (404, "404 page not found"))
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    settings = NomadSettings(addresses=("http://nomad:4646",), retry=RetryPolicy(attempts=1))
    return NomadClient(settings, transport=httpx.MockTransport(answer))


@pytest.mark.parametrize(
    ("answers", "status", "said"),
    [
        (
            {"/v1/agent/self": (200, {"config": {"Version": {"Version": "1.10.5"}}})},
            Status.OK,
            "1.10.5 on the server",
        ),
        (
            {"/v1/agent/self": (200, {"config": {"Version": {"Version": "1.9.7"}}})},
            Status.FAIL,
            "older than 1.10",
        ),
        (
            {"/v1/agent/self": (200, {"member": {"Tags": {"build": "2.1.0+ent"}}})},
            Status.WARN,
            "newer than any",
        ),
        (
            {"/v1/agent/self": (403, "Permission denied"), "/v1/nodes": (200, [{"Version": "1.11.3"}])},
            Status.OK,
            "1.11.3 on the client agents (the token may not read /v1/agent/self (agent read))",
        ),
    ],
)
async def test_the_version_comes_from_agent_self_or_the_clients(
    answers: Mapping[str, tuple[int, Any]], status: Status, said: str
) -> None:
    async with mock_client(answers) as client:
        result = await check_version(client)
    assert result.status is status
    assert said in result.detail


async def test_the_scheduler_wants_spread_and_memory_oversubscription() -> None:
    binpack = {"SchedulerConfig": {"SchedulerAlgorithm": "binpack", "MemoryOversubscriptionEnabled": False}}
    async with mock_client({"/v1/operator/scheduler/configuration": (200, binpack)}) as client:
        warned = await check_scheduler(client)
    assert warned.status is Status.WARN
    assert "scheduler_algorithm is binpack" in warned.detail
    assert warned.fix == (
        "nomad operator scheduler set-config -scheduler-algorithm=spread -memory-oversubscription=true"
    )
    spread = {"SchedulerConfig": {"SchedulerAlgorithm": "spread", "MemoryOversubscriptionEnabled": True}}
    async with mock_client({"/v1/operator/scheduler/configuration": (200, spread)}) as client:
        assert (await check_scheduler(client)).status is Status.OK
    async with mock_client({"/v1/operator/scheduler/configuration": (403, "Permission denied")}) as client:
        skipped = await check_scheduler(client)
    assert skipped.status is Status.SKIP
    assert "operator read" in skipped.detail


# -- the command line ---------------------------------------------------------------------------


def test_a_configuration_error_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[nomad]\ndirect_exec = 'sometimes'\n")
    assert main(["check", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("supervisor check: configuration: nomad.direct_exec: 'sometimes' is not one of")


def run_check(environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "check"],
        env={**clean, **environ},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_exits_1_when_nomad_does_not_answer() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    wrapper = {"SUPERVISOR_EXECUTION_UNPRIVILEGED_WRAPPER": "/sbin/setuser user"}
    done = run_check({"NOMAD_ADDR": f"http://127.0.0.1:{port}", **wrapper})
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("FAIL  nomad servers  no Nomad server answers") for line in lines)
    assert lines[-1] == "2 OK, 0 warnings, 1 failed, 1 skipped"


def test_the_command_passes_on_the_embedded_cluster() -> None:
    done = run_check({})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("OK    configuration  valid (no file): ")
    assert any(
        "the embedded simulated cluster (no nomad.address, no NOMAD_ADDR) answers" in line for line in lines
    )
    assert any(line.startswith("OK    nodes") for line in lines)
    assert not any(line.startswith("FAIL") for line in lines)
    simulated = [line for line in lines if line.startswith("WARN  nomad          ")]
    assert len(simulated) == 1, lines
    assert "the embedded simulated cluster (no nomad.address, no NOMAD_ADDR)" in simulated[0]
    assert "commands run as local processes of this user" in simulated[0]


def test_the_command_fails_on_the_embedded_cluster_off_loopback() -> None:
    done = run_check({"SUPERVISOR_SERVER_ADDRESS": "0.0.0.0"})
    assert done.returncode == 1, done.stdout + done.stderr
    refused = [line for line in done.stdout.splitlines() if line.startswith("FAIL  nomad ")]
    assert len(refused) == 1, done.stdout
    assert "supervisor run refuses it on server.address 0.0.0.0, off loopback." in refused[0]
    assert "Fix: point nomad.address (or NOMAD_ADDR) at a Nomad cluster." in refused[0]


@pytest.mark.parametrize("wrapper", ["", "  "])
def test_an_empty_unprivileged_wrapper_warns_that_students_code_runs_as_root(wrapper: str) -> None:
    result = execution_user_result(Settings(execution=ExecutionSettings(unprivileged_wrapper=wrapper)))
    assert result.status is Status.WARN
    assert "students' code" in result.detail
    assert "root in CodeOcean's images" in result.detail
    assert result.fix == 'set execution.unprivileged_wrapper = "/sbin/setuser user", as Poseidon runs them.'


def test_an_unprivileged_wrapper_is_named() -> None:
    result = execution_user_result(Settings(execution=SETUSER))
    assert result.status is Status.OK
    assert "run under '/sbin/setuser user'" in result.detail
