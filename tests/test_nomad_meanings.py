"""The table of what Nomad's answers mean (``nomad.boundary.MEANINGS``), row by row, each against an
answer the simulated cluster really gives (as Nomad 1.10.5 does), or against Nomad's own text where
the simulated cluster has no way to give it.

Virtual time (``autojump_clock``); the cluster on 127.0.0.1 port 0.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from supervisor.base.errors import (
    NomadConflict,
    NomadNotFound,
    NomadPermissionDenied,
    NomadRequestError,
    NomadUnavailableError,
)
from supervisor.nomad.boundary import MEANINGS, Meaning, in_one_line, meaning_of, translate_status
from supervisor.simulator import SimConfig, SimulatedCluster

from .simulator.conftest import batch_job

TOKEN = "the-management-token"


def row(why_starts: str) -> Meaning:
    (found,) = [m for m in MEANINGS if m.why.startswith(why_starts)]
    return found


async def answer(
    http: httpx.AsyncClient, method: str, url: str, *, body: Any = None, token: str = TOKEN
) -> tuple[int, str]:
    response = await http.request(method, url, json=body, headers={"X-Nomad-Token": token})
    return response.status_code, response.text


@pytest.fixture
async def cluster(nursery: trio.Nursery, autojump_clock: trio.testing.MockClock) -> SimulatedCluster:
    config = SimConfig(seed=3, servers=3, nodes=1, acl_token=TOKEN, election_timeout=5.0)
    started: SimulatedCluster = await nursery.start(SimulatedCluster(config).run)
    return started


async def test_every_row_against_the_answers_nomad_gives(cluster: SimulatedCluster) -> None:
    base = cluster.addresses[0]
    seen: dict[str, Meaning | None] = {}
    async with httpx.AsyncClient(base_url=base) as http:
        seen["bad index"] = meaning_of(*await answer(http, "GET", "/v1/jobs?index=x"))
        seen["wrong token"] = meaning_of(*await answer(http, "GET", "/v1/jobs", token="wrong"))
        seen["unknown job"] = meaning_of(*await answer(http, "GET", "/v1/job/nobody"))
        lock = {"Path": "x/lock", "Lock": {"TTL": "15s", "LockDelay": "15s"}}
        await answer(http, "PUT", "/v1/var/x/lock?lock-acquire", body=lock)
        seen["lock held"] = meaning_of(*await answer(http, "PUT", "/v1/var/x/lock?lock-acquire", body=lock))
        job = batch_job("j")
        seen["bad priority"] = meaning_of(
            *await answer(http, "PUT", "/v1/jobs", body={"Job": {**job, "Priority": 500}})
        )
        await answer(http, "PUT", "/v1/jobs", body={"Job": job})
        seen["stale index"] = meaning_of(
            *await answer(
                http, "PUT", "/v1/jobs", body={"Job": job, "EnforceIndex": True, "JobModifyIndex": 1}
            )
        )
        nodes = (await http.get("/v1/nodes", headers={"X-Nomad-Token": TOKEN})).json()
        seen["bad eligibility"] = meaning_of(
            *await answer(
                http, "PUT", f"/v1/node/{nodes[0]['ID']}/eligibility", body={"Eligibility": "maybe"}
            )
        )
        seen["drain of no node"] = meaning_of(
            *await answer(http, "PUT", "/v1/node/00000000-0000-0000-0000-000000000000/drain", body={})
        )
        leader = cluster.leader
        assert leader is not None
        follower = next(s for s in cluster.servers if s.name != leader)
        async with httpx.AsyncClient(base_url=cluster.addresses[cluster.servers.index(follower)]) as other:
            status, text = await answer(other, "PUT", "/v1/jobs", body={"Job": {**job, "Priority": 500}})
            assert text.startswith("rpc error: 1 error occurred:\n"), "forwarded to the leader"
            seen["bad priority through a follower"] = meaning_of(status, text)
        cluster.restart_server(leader, downtime=30.0)
        async with httpx.AsyncClient(base_url=cluster.addresses[cluster.servers.index(follower)]) as other:
            seen["no leader"] = meaning_of(*await answer(other, "GET", "/v1/jobs"))
    assert seen == {
        "bad index": row("the request is wrong"),
        "wrong token": row("the token is unknown"),
        "unknown job": row("the object does not exist"),
        "lock held": row("the object changed or is held"),
        "bad priority": row("a validation failure"),
        "bad priority through a follower": row("a validation failure"),
        "stale index": row("a registration with a stale EnforceIndex"),
        "bad eligibility": row("a node's eligibility"),
        "drain of no node": row("an object Nomad looked up"),
        "no leader": row("no leader"),
    }


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (400, "RPC Error:: 400,invalid path", NomadRequestError),
        (403, "Permission denied", NomadPermissionDenied),
        (404, "job not found", NomadNotFound),
        (405, "Invalid method", NomadRequestError),
        (409, "", NomadConflict),
        (429, "", NomadUnavailableError),
        (408, "", NomadUnavailableError),
        (425, "", NomadUnavailableError),
        (500, "No cluster leader", NomadUnavailableError),
        (503, "No cluster leader", NomadUnavailableError),
        (500, "1 error occurred:\n\t* job priority must be between [1, 100]\n\n", NomadRequestError),
        (
            500,
            '2 errors occurred:\n\t* Missing job task groups\n\t* Invalid job type: "x"\n\n',
            NomadRequestError,
        ),
        (500, "rpc error: Task group g validation failed: 1 error occurred", NomadRequestError),
        (
            500,
            "rpc error: 1 error occurred:\n\t* job priority must be between [1, 100]\n\n",
            NomadRequestError,
        ),
        (500, "Enforcing job modify index 5: job does not exist", NomadConflict),
        (
            500,
            "can not set node's scheduling eligibility to eligible while it is draining",
            NomadRequestError,
        ),
        (500, "node not found", NomadNotFound),
        (500, "rpc error: EOF", NomadUnavailableError),
        (
            500,
            "failed to parse signed token: go-jose/go-jose: compact JWS format must have three parts",
            NomadPermissionDenied,
        ),
        (500, "leadership lost while committing log", NomadUnavailableError),
        (502, "Bad Gateway", NomadUnavailableError),
        (504, "", NomadUnavailableError),
    ],
)
def test_each_answer_becomes_the_error_its_meaning_says(status: int, body: str, error: type) -> None:
    translated = translate_status(status, body, "a request")
    assert type(translated) is error
    assert body.strip() in str(translated)


def test_only_what_may_succeed_later_is_transient() -> None:
    transient = {m.why for m in MEANINGS if issubclass(m.error, NomadUnavailableError)}
    assert transient == {
        "too many requests for now",
        "a proxy's timeout: the request may be sent again",
        "a proxy's too early: the request may be sent again",
        "no leader (an election): try again",
        "any other 5xx: a failure of the moment",
    }
    assert translate_status(204, "", "a request") is None
    assert isinstance(translate_status(600, "", "a request"), NomadUnavailableError)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            '1 error occurred:\n\t* Task group "g" validation failed: 1 error occurred:\n\t* Task "t" '
            "validation failed: 1 error occurred:\n\t* 1 error occurred:\n\t* "
            "minimum MemoryMB value is 10; got 5\n\n",
            'Task group "g" validation failed: Task "t" validation failed: '
            "minimum MemoryMB value is 10; got 5",
        ),
        (
            '2 errors occurred:\n\t* Missing job task groups\n\t* Invalid job type: "x"\n\n',
            'Missing job task groups; Invalid job type: "x"',
        ),
        (
            "rpc error: 1 error occurred:\n\t* job priority must be between [1, 100]\n\n",
            "job priority must be between [1, 100]",
        ),
        ("job not found", "job not found"),
    ],
)
def test_a_refusal_reads_in_one_line(text: str, line: str) -> None:
    assert in_one_line(text) == line
