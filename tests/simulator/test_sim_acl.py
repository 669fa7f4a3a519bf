"""Nomad's ACL system in the simulated cluster: tokens, policies, and what each request needs.

What Nomad does, and where it says so (hashicorp/nomad): ``acl/policy.go`` (the rules, a policy's
expansion into capabilities), ``acl/acl.go`` (merging policies, deny first, the closest glob),
``nomad/*_endpoint.go`` (each RPC's capability), ``nomad/event_endpoint.go`` (the stream's topics),
``command/agent/acl_endpoint.go`` (token self, policies); nomad-api.md §6 for the 403 texts.

Rules of these tests: pytest-trio's ``trio_mode``; ``autojump_clock`` wherever time passes (a job
placed and started); the cluster's servers listen on 127.0.0.1, port 0, started with
``nursery.start``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from supervisor.nomad.acl_rules import Acl, PolicyError, glob_matches, parse_policy
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.simulator.acl.capabilities import accessor_id, need_of
from supervisor.simulator.config import AclPolicy, AclToken

from .conftest import batch_job, settle

ROOT = "root-secret"
DAEMON_RULES = """
# what the supervisor needs
namespace "default" {
  policy       = "read"
  capabilities = ["submit-job", "alloc-exec"]
  variables {
    path "supervisor/*" {
      capabilities = ["read", "write"]
    }
  }
}
node { policy = "read" }  // the nodes, and the stream's Node topic
"""
POLICIES = (
    AclPolicy("supervisor", DAEMON_RULES, description="the daemon"),
    AclPolicy("reader", 'namespace "default" { policy = "read" }'),
    AclPolicy("ci", '{"namespace": {"ci": {"capabilities": ["read-job"]}}}'),
    AclPolicy("anonymous", 'namespace "default" { capabilities = ["list-jobs"] }'),
)
TOKENS = (
    AclToken("daemon-secret", ("supervisor",), name="supervisor"),
    AclToken("reader-secret", ("reader",), name="reader"),
    AclToken("ci-secret", ("ci",), name="ci"),
    AclToken("ops-secret", type="management", name="ops"),
)


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(seed=7, acl_token=ROOT, acl_tokens=TOKENS, acl_policies=POLICIES)


async def call(
    cluster: SimulatedCluster,
    method: str,
    path: str,
    *,
    token: str = "",
    bearer: bool = False,
    **kwargs: Any,
) -> httpx.Response:
    headers = {}
    if token:
        headers = {"Authorization": f"Bearer {token}"} if bearer else {"X-Nomad-Token": token}
    async with httpx.AsyncClient(base_url=cluster.addresses[0], headers=headers, timeout=30) as http:
        return await http.request(method, path, **kwargs)


def status_and_text(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.text


# -- the rules, read and compiled ---------------------------------------------------------------


def test_a_namespace_policy_expands_into_nomads_capabilities() -> None:
    acl = Acl([parse_policy(DAEMON_RULES)])
    for capability in ("list-jobs", "read-job", "parse-job", "submit-job", "alloc-exec"):
        assert acl.allows_namespace("default", capability), capability
    for capability in ("dispatch-job", "alloc-lifecycle", "read-logs", "alloc-node-exec"):
        assert not acl.allows_namespace("default", capability), capability
    assert not acl.allows_namespace("other", "read-job"), "no rule for that namespace"
    assert acl.allows_namespace("*", "submit-job"), "'*' asks whether any namespace grants it"
    write = Acl([parse_policy('namespace "default" { policy = "write" }')])
    assert write.allows_namespace("default", "alloc-lifecycle")
    assert not write.allows_namespace("default", "alloc-node-exec"), "write does not grant node exec"


def test_variables_rules_read_implies_list_and_paths_are_globs() -> None:
    acl = Acl([parse_policy(DAEMON_RULES)])
    assert acl.allows_variable("default", "supervisor/leader", "write")
    assert acl.allows_variable("default", "supervisor/leader", "list"), "read implies list"
    assert not acl.allows_variable("default", "supervisor/leader", "destroy")
    assert not acl.allows_variable("default", "other/leader", "read")
    assert not acl.allows_variable("ci", "supervisor/leader", "read"), "the rule is the namespace's"
    assert acl.allows_variable_search("default")
    assert not acl.allows_variable_search("ci")


def test_deny_wins_and_the_closest_glob_decides() -> None:
    denied = Acl(
        [
            parse_policy('namespace "default" { policy = "write" }'),
            parse_policy('namespace "default" { policy = "deny" }'),
        ]
    )
    assert not denied.allows_namespace("default", "read-job"), "deny wins over any grant"
    globs = Acl(
        [
            parse_policy('namespace "*" { policy = "read" }'),
            parse_policy('namespace "prod-*" { policy = "deny" }'),
        ]
    )
    assert globs.allows_namespace("default", "read-job")
    assert not globs.allows_namespace("prod-eu", "read-job"), "prod-* is closer to prod-eu than *"
    assert glob_matches("a*c*e", "abcde")
    assert not glob_matches("a*c", "abd")


def test_levels_take_the_most_privileged_and_deny_first() -> None:
    acl = Acl([parse_policy('node { policy = "read" }'), parse_policy('node { policy = "write" }')])
    assert acl.allows("node", "write")
    assert not acl.allows("operator", "read")
    denied = Acl([parse_policy('node { policy = "write" }'), parse_policy('node { policy = "deny" }')])
    assert not denied.allows("node", "read")
    assert Acl(management=True).allows("operator", "write")


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ('namespace "default" { policy = "admin" }', "Invalid namespace policy"),
        ('namespace "default" { capabilities = ["read-jobs"] }', "Invalid namespace capability 'read-jobs'"),
        ('namespace "default" { variables { path "/x" { capabilities = ["read"] } } }', "leading '/'"),
        ('namespace "default" { variables { path "x" { capabilities = ["all"] } } }', "variable capability"),
        ('node { policy = "admin" }', "Invalid node policy"),
        ('nodes { policy = "read" }', "Invalid or duplicate policy keys: nodes"),
        ('namespace "default" { policy = "read"', "unexpected end"),
        ("", "Invalid policy"),
    ],
)
def test_rules_nomad_refuses_are_refused(rules: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_policy(rules)


def test_a_config_with_bad_rules_or_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="acl_policies: broken: Invalid node policy"):
        SimConfig(acl_policies=(AclPolicy("broken", 'node { policy = "all" }'),))
    with pytest.raises(ValueError, match="acl_tokens: t holds 'missing'"):
        SimConfig(acl_tokens=(AclToken("s", ("missing",), name="t"),), acl_policies=POLICIES)


def test_the_table_names_what_the_daemons_requests_need() -> None:
    assert need_of("GET", "/v1/jobs")[0].capabilities == ("list-jobs",)
    assert need_of("POST", "/v1/jobs")[0].capabilities == ("submit-job",)
    assert need_of("DELETE", "/v1/job/runner-1")[0].capabilities == ("submit-job",)
    exec_need, params = need_of("GET", "/v1/client/allocation/abc/exec")
    assert (exec_need.capabilities, exec_need.namespace_of, params) == (
        ("alloc-exec",),
        "allocation",
        {"alloc_id": "abc"},
    )
    lock_need, params = need_of("PUT", "/v1/var/supervisor/leader")
    assert (lock_need.scope, lock_need.capabilities, params) == (
        "variables",
        ("write",),
        {"path": "supervisor/leader"},
    )
    assert need_of("GET", "/v1/status/leader")[0].scope == "nothing"
    assert need_of("GET", "/v1/nodes")[0].describe() == "node: read"
    assert need_of("PATCH", "/v1/var/x")[0].scope == "nothing", "the route's own 400 Invalid method"
    assert need_of("GET", "/v1/something/new")[0].scope == "management", "unknown routes: management only"


# -- over HTTP ------------------------------------------------------------------------------------


async def test_the_management_token_still_does_everything(cluster: SimulatedCluster) -> None:
    for token, bearer in ((ROOT, False), (ROOT, True), ("ops-secret", False)):
        assert (await call(cluster, "GET", "/v1/jobs", token=token, bearer=bearer)).status_code == 200
        assert (await call(cluster, "GET", "/sim/v1/state", token=token)).status_code == 200
    registered = await call(cluster, "POST", "/v1/jobs", token=ROOT, json={"Job": batch_job("r-1", count=0)})
    assert registered.status_code == 200


async def test_no_token_unknown_token_and_open_routes(cluster: SimulatedCluster) -> None:
    assert status_and_text(await call(cluster, "GET", "/v1/nodes")) == (403, "Permission denied")
    unknown = "0b5c1c4e-0000-4000-8000-000000000000"
    for token in ("nope", unknown):  # Nomad 1.10 refuses an unknown token as it refuses a capability
        assert status_and_text(await call(cluster, "GET", "/v1/nodes", token=token)) == (
            403,
            "Permission denied",
        )
    assert (await call(cluster, "GET", "/v1/status/leader")).status_code == 200, "no ACL on the leader"
    assert (await call(cluster, "GET", "/v1/jobs")).status_code == 200, "the anonymous policy lists jobs"
    assert (await call(cluster, "GET", "/v1/job/x")).status_code == 403, "but reads none"
    assert (await call(cluster, "GET", "/sim/v1/state", token="daemon-secret")).status_code == 403
    assert (await call(cluster, "GET", "/v1/namespace/default", token="ci-secret")).status_code == 403
    assert (await call(cluster, "GET", "/v1/namespace/default", token="reader-secret")).status_code == 200


async def test_a_token_lacking_a_capability_is_denied(cluster: SimulatedCluster) -> None:
    job = {"Job": batch_job("r-1", count=0)}
    denied = await call(cluster, "POST", "/v1/jobs", token="reader-secret", json=job)
    assert status_and_text(denied) == (403, "Permission denied")
    assert (await call(cluster, "GET", "/v1/jobs", token="reader-secret")).status_code == 200
    assert (await call(cluster, "POST", "/v1/jobs", token="daemon-secret", json=job)).status_code == 200
    elsewhere = {"Job": {**batch_job("r-2", count=0), "Namespace": "ci"}}
    assert (await call(cluster, "POST", "/v1/jobs", token="daemon-secret", json=elsewhere)).status_code == 403
    assert (await call(cluster, "GET", "/v1/jobs?namespace=ci", token="daemon-secret")).status_code == 403
    assert (await call(cluster, "GET", "/v1/nodes", token="reader-secret")).status_code == 403, "node:read"
    assert (await call(cluster, "GET", "/v1/nodes", token="daemon-secret")).status_code == 200
    node_id = next(iter(cluster.state.nodes))
    drain = await call(cluster, "POST", f"/v1/node/{node_id}/drain", token="daemon-secret", json={})
    assert drain.status_code == 403, "node:write"
    exec_path = "/v1/client/allocation/none/exec?task=t&command=%5B%22true%22%5D"
    assert (await call(cluster, "GET", exec_path, token="reader-secret")).status_code == 403, "alloc-exec"


async def test_an_allocations_own_namespace_decides(
    cluster: SimulatedCluster, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(60):
        job = {"Job": {**batch_job("ci-1"), "Namespace": "ci"}}
        assert (await call(cluster, "POST", "/v1/jobs", token=ROOT, json=job)).status_code == 200
        await settle(
            cluster, lambda: any(a.client_status == "running" for a in cluster.state.allocs.values())
        )
        alloc_id = next(iter(cluster.state.allocs))
        assert (
            await call(cluster, "GET", f"/v1/allocation/{alloc_id}", token="ci-secret")
        ).status_code == 200
        own = await call(cluster, "GET", f"/v1/allocation/{alloc_id}", token="daemon-secret")
        assert own.status_code == 403, "read-job in default says nothing of an allocation in ci"


async def test_the_lock_variable_needs_write_on_its_path(cluster: SimulatedCluster) -> None:
    body = {"Lock": {"TTL": "15s", "LockDelay": "15s"}}
    allowed = await call(
        cluster, "PUT", "/v1/var/supervisor/leader?lock-acquire", token="daemon-secret", json=body
    )
    assert allowed.status_code == 200
    elsewhere = await call(
        cluster, "PUT", "/v1/var/other/leader?lock-acquire", token="daemon-secret", json=body
    )
    assert status_and_text(elsewhere) == (403, "Permission denied")
    reader = await call(cluster, "GET", "/v1/var/supervisor/leader", token="reader-secret")
    assert reader.status_code == 403


async def test_the_event_stream_needs_each_topics_capability(cluster: SimulatedCluster) -> None:
    async def subscribe(token: str, *topics: str, namespace: str = "default") -> int:
        params: list[tuple[str, str | int | float | bool | None]] = [("topic", t) for t in topics]
        params.append(("namespace", namespace))
        async with (
            httpx.AsyncClient(base_url=cluster.addresses[0], timeout=httpx.Timeout(30, read=None)) as http,
            http.stream(
                "GET", "/v1/event/stream", params=params, headers={"X-Nomad-Token": token}
            ) as response,
        ):
            return response.status_code

    assert await subscribe("daemon-secret", "Job:*", "Allocation:*", "Node:*") == 200
    assert await subscribe("ci-secret", "Job:*") == 403, "no read-job in default"
    assert await subscribe("ci-secret", "Job:*", namespace="ci") == 200
    assert await subscribe("reader-secret", "Job:*", "Node:*") == 403, "no node:read"
    assert await subscribe("daemon-secret") == 403, "every topic: management only"
    assert await subscribe("daemon-secret", "ACLToken:*") == 403
    assert await subscribe(ROOT) == 200


async def test_a_token_reads_itself_and_its_own_policies(cluster: SimulatedCluster) -> None:
    me = await call(cluster, "GET", "/v1/acl/token/self", token="daemon-secret")
    assert me.status_code == 200
    token = me.json()
    assert token["AccessorID"] == accessor_id("daemon-secret") != "daemon-secret"
    assert (token["Type"], token["Name"], token["Policies"]) == ("client", "supervisor", ["supervisor"])
    policy = await call(cluster, "GET", "/v1/acl/policy/supervisor", token="daemon-secret")
    assert policy.status_code == 200
    assert (policy.json()["Rules"], policy.json()["Description"]) == (DAEMON_RULES, "the daemon")
    other = await call(cluster, "GET", "/v1/acl/policy/reader", token="daemon-secret")
    assert status_and_text(other) == (403, "Permission denied")
    listed = await call(cluster, "GET", "/v1/acl/policies", token="daemon-secret")
    assert [p["Name"] for p in listed.json()] == ["supervisor"]
    everything = await call(cluster, "GET", "/v1/acl/policies", token=ROOT)
    assert [p["Name"] for p in everything.json()] == ["anonymous", "ci", "reader", "supervisor"]
    root = (await call(cluster, "GET", "/v1/acl/token/self", token=ROOT)).json()
    assert (root["Type"], root["Policies"]) == ("management", None)
    assert (await call(cluster, "GET", "/v1/acl/policy/nope", token=ROOT)).status_code == 404
    unknown = await call(cluster, "GET", "/v1/acl/token/self", token="0b5c1c4e-0000-4000-8000-000000000000")
    assert status_and_text(unknown) == (403, "Permission denied")
    not_a_uuid = await call(cluster, "GET", "/v1/acl/token/self", token="nope")
    assert not_a_uuid.status_code == 500, "tried as a workload's signed identity"
    assert not_a_uuid.text.startswith("failed to parse signed token: ")
    anonymous = (await call(cluster, "GET", "/v1/acl/token/self")).json()
    assert (anonymous["AccessorID"], anonymous["Policies"]) == ("anonymous", ["anonymous"])


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7)])
async def test_without_tokens_acls_are_off(cluster: SimulatedCluster) -> None:
    assert (await call(cluster, "GET", "/v1/nodes")).status_code == 200
    assert (await call(cluster, "GET", "/v1/nodes", token="anything")).status_code == 200
    off = await call(cluster, "GET", "/v1/acl/token/self", token="anything")
    assert (off.status_code, off.json()["AccessorID"]) == (200, "acls-disabled")
    policies = await call(cluster, "GET", "/v1/acl/policies", token="anything")
    assert status_and_text(policies) == (400, "ACL support disabled")
