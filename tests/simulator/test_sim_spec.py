"""Every Nomad route the simulated cluster serves answers in the shape HashiCorp's OpenAPI description
of ``/v1`` gives it (``tests/fixtures/nomad-openapi.yaml.gz``: ``hashicorp/nomad-openapi``,
MPL-2.0, generated from the ``api`` package of Nomad 1.4), read as Go writes JSON:

- every schema is nullable: Go writes nil pointers, slices and maps as ``null``, and the
  description has no ``nullable``;
- the client-side fields ``LastIndex`` and ``RequestTime`` are never on the wire: not looked for;
- only 2xx answers are checked (the description documents no 404, 409 or 204), their JSON body
  and the ``X-Nomad-*`` headers the description declares;
- the blocking index is the query parameter ``index`` (the description declares it a header).

One cluster with ACLs on (a management token), runner jobs placed, one job no node can take, a
variable; each route once, reads before writes. Routes the description does not have (the event
stream, exec, the agent's self, the simulator's ``/sim/v1``) are listed, and a test checks that
every route of a server's router is either checked here or listed.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import jsonschema
import pytest
import trio
import yaml
from attrs import frozen
from jsonschema.exceptions import best_match

from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.simulator.api.nomad_api import NomadAPI
from supervisor.simulator.config import AclPolicy

from .conftest import batch_job, settle

SPEC_FILE: Final = Path(__file__).parents[1] / "fixtures" / "nomad-openapi.yaml.gz"
TOKEN: Final = "5b8b4e36-9a4c-4a56-b1de-1d7f0d8ee2a7"
CLIENT_SIDE_FIELDS: Final = frozenset({"LastIndex", "RequestTime"})
# Routes with no operation in the description (``GET /v1/agent/self`` is checked by hand).
OUTSIDE_THE_DESCRIPTION: Final = (
    "/v1/event/stream",
    "/v1/client/allocation/",
    "/v1/agent/self",
    "/v1/var/$",  # no path: the route's 400
    "/sim/v1/",
)


# Answers the simulator does not give as Nomad 1.10.5 does yet, each with its reason: a problem that
# starts with one of these is not counted.
KNOWN_GAPS: Final[dict[str, str]] = {}
# Headers the description declares that Nomad 1.10.5 does not send, each with its reason.
NOT_SENT_BY_NOMAD: Final[dict[tuple[str, str], str]] = {
    ("POST /validate/job", "X-Nomad-Index"): "ValidateJobRequest sets no index: JobValidateResponse has none",
}


@frozen
class Call:
    """One request, and the description's operation that answers it."""

    method: str
    url: str
    spec_path: str
    body: Any = None
    params: tuple[tuple[str, str], ...] = ()


@functools.cache
def description() -> dict[str, Any]:
    with gzip.open(SPEC_FILE) as source:
        document: dict[str, Any] = yaml.load(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return document


def nullable(schema: Any) -> Any:
    """The schema as Go's JSON reads: any value may be null; client-side fields dropped."""
    if isinstance(schema, list):
        return [nullable(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return {"anyOf": [{"$ref": schema["$ref"]}, {"type": "null"}]}
    out = {key: nullable(value) for key, value in schema.items() if key != "properties"}
    if "properties" in schema:
        out["properties"] = {
            name: nullable(value)
            for name, value in schema["properties"].items()
            if name not in CLIENT_SIDE_FIELDS
        }
    if isinstance(schema.get("type"), str):
        out["type"] = [schema["type"], "null"]
    return out


@functools.cache
def schemas() -> dict[str, Any]:
    return {name: nullable(schema) for name, schema in description()["components"]["schemas"].items()}


def expected_response(spec_path: str, method: str) -> dict[str, Any]:
    operation = description()["paths"][spec_path][method.lower()]
    response: dict[str, Any] = operation["responses"]["200"]
    if "$ref" in response:
        response = description()["components"]["responses"][response["$ref"].rpartition("/")[2]]
    return response


def problems(call: Call, response: httpx.Response) -> list[str]:
    """What keeps the answer from being a 2xx whose body and declared headers are the
    description's."""
    where = f"{call.method} {call.url}"
    if not response.is_success:
        return [f"{where}: {response.status_code} {response.text}"]
    expected = expected_response(call.spec_path, call.method)
    found = []
    for header, declared in (expected.get("headers") or {}).items():
        if (f"{call.method} {call.spec_path}", header) in NOT_SENT_BY_NOMAD:
            continue
        value = response.headers.get(header)
        kind = declared["schema"]["type"]
        if value is None or not (value in ("true", "false") if kind == "boolean" else value.isdigit()):
            found.append(f"{where}: {header} is {value!r}")
    content = (expected.get("content") or {}).get("application/json")
    if content is None or response.status_code == 204:
        return found
    schema = {**nullable(content["schema"]), "components": {"schemas": schemas()}}
    errors = [best_match([e]) for e in jsonschema.Draft202012Validator(schema).iter_errors(response.json())]
    return found + [f"{where}: {e.json_path}: {e.message[:200]}" for e in errors]


def unplaceable_job(job_id: str) -> dict[str, Any]:
    job = batch_job(job_id)
    job["Constraints"] = [{"LTarget": "${node.unique.name}", "RTarget": "nowhere", "Operand": "="}]
    return job


def calls(alloc: Any, blocked_eval: str, node_id: str, other_node: str) -> Iterator[Call]:
    """Every route once: reads, then writes (each write leaves what the later ones need)."""
    listed = (("index", "1"), ("namespace", "default"))
    yield Call("GET", "/v1/jobs", "/jobs", params=listed)
    yield Call("GET", "/v1/job/runner-1", "/job/{jobName}")
    yield Call("GET", "/v1/job/runner-1/allocations", "/job/{jobName}/allocations")
    yield Call("GET", "/v1/job/runner-1/evaluations", "/job/{jobName}/evaluations")
    yield Call("GET", "/v1/job/nowhere/evaluations", "/job/{jobName}/evaluations")
    yield Call("GET", "/v1/job/runner-1/summary", "/job/{jobName}/summary")
    yield Call("GET", "/v1/job/runner-1/versions", "/job/{jobName}/versions")
    yield Call("GET", "/v1/allocations", "/allocations", params=(*listed, ("resources", "true")))
    yield Call("GET", f"/v1/allocation/{alloc.id}", "/allocation/{allocID}")
    yield Call("GET", "/v1/evaluations", "/evaluations", params=listed)
    yield Call("GET", f"/v1/evaluation/{blocked_eval}", "/evaluation/{evalID}")
    yield Call("GET", f"/v1/evaluation/{alloc.eval_id}/allocations", "/evaluation/{evalID}/allocations")
    yield Call("GET", "/v1/nodes", "/nodes", params=listed)
    yield Call("GET", f"/v1/node/{node_id}", "/node/{nodeId}")
    yield Call("GET", f"/v1/node/{node_id}/allocations", "/node/{nodeId}/allocations")
    yield Call("GET", "/v1/status/leader", "/status/leader")
    yield Call("GET", "/v1/status/peers", "/status/peers")
    yield Call("GET", "/v1/regions", "/regions")
    yield Call("GET", "/v1/operator/scheduler/configuration", "/operator/scheduler/configuration")
    yield Call("GET", "/v1/namespaces", "/namespaces")
    yield Call("GET", "/v1/namespace/default", "/namespace/{namespaceName}")
    yield Call("GET", "/v1/vars", "/vars", params=(("prefix", "runners"),))
    yield Call("GET", "/v1/var/runners/lock", "/var/{path}")
    yield Call("GET", "/v1/acl/token/self", "/acl/token/{tokenAccessor}")
    yield Call("GET", "/v1/acl/policies", "/acl/policies")
    yield Call("GET", "/v1/acl/policy/readonly", "/acl/policy/{policyName}")
    jobspec = 'job "x" {\n  group "g" {\n    task "t" {\n      driver = "docker"\n    }\n  }\n}\n'
    yield Call("POST", "/v1/jobs/parse", "/jobs/parse", body={"JobHCL": jobspec, "Canonicalize": True})
    yield Call("POST", "/v1/validate/job", "/validate/job", body={"Job": batch_job("runner-5")})
    variable = {"Namespace": "default", "Path": "runners/lock", "Items": {"holder": "b"}}
    yield Call("PUT", "/v1/var/runners/lock", "/var/{path}", body=variable)
    yield Call("POST", "/v1/jobs", "/jobs", body={"Job": batch_job("runner-3")})
    yield Call("POST", "/v1/job/runner-4", "/job/{jobName}", body={"Job": batch_job("runner-4")})
    yield Call("POST", "/v1/job/runner-1/evaluate", "/job/{jobName}/evaluate")
    yield Call("POST", f"/v1/allocation/{alloc.id}/stop", "/allocation/{allocID}/stop")
    drain = {"DrainSpec": {"Deadline": 3600 * 10**9, "IgnoreSystemJobs": False}, "MarkEligible": False}
    yield Call("POST", f"/v1/node/{other_node}/drain", "/node/{nodeId}/drain", body=drain)
    eligible = {"NodeID": other_node, "Eligibility": "ineligible"}
    yield Call("POST", f"/v1/node/{other_node}/eligibility", "/node/{nodeId}/eligibility", body=eligible)
    yield Call("DELETE", "/v1/job/runner-2", "/job/{jobName}", params=(("purge", "true"),))
    yield Call("PUT", "/v1/system/gc", "/system/gc")
    yield Call("POST", f"/v1/node/{other_node}/purge", "/node/{nodeId}/purge")
    yield Call("DELETE", "/v1/var/runners/lock", "/var/{path}")


async def started(nursery: trio.Nursery) -> tuple[SimulatedCluster, dict[str, Any]]:
    """A cluster with runner jobs placed, a job no node can take, and a variable."""
    readonly = AclPolicy("readonly", 'namespace "default" { policy = "read" }')
    config = SimConfig(seed=11, nodes=3, acl_token=TOKEN, acl_policies=(readonly,))
    cluster: SimulatedCluster = await nursery.start(SimulatedCluster(config).run)
    headers = {"X-Nomad-Token": TOKEN}
    async with httpx.AsyncClient(base_url=cluster.addresses[1], headers=headers) as http:
        for job in (batch_job("runner-1", count=2), batch_job("runner-2"), unplaceable_job("nowhere")):
            assert (await http.post("/v1/jobs", json={"Job": job})).is_success
        variable = {"Namespace": "default", "Path": "runners/lock", "Items": {"holder": "a"}}
        assert (await http.put("/v1/var/runners/lock", json=variable)).is_success

    def ready() -> bool:
        running = sum(a.client_status == "running" for a in cluster.state.allocs.values())
        return running == 3 and any(e.status == "blocked" for e in cluster.state.evals.values())

    await settle(cluster, ready)
    alloc = next(a for a in cluster.state.allocs.values() if a.job_id == "runner-1")
    blocked = next(e for e in cluster.state.evals.values() if e.status == "blocked")
    other = next(n for n in sorted(cluster.state.nodes) if n != alloc.node_id)
    return cluster, {
        "alloc": alloc,
        "blocked_eval": blocked.id,
        "node_id": alloc.node_id,
        "other_node": other,
    }


async def test_every_route_answers_as_the_openapi_description_says(nursery: trio.Nursery) -> None:
    cluster, ids = await started(nursery)
    async with httpx.AsyncClient(base_url=cluster.addresses[1], headers={"X-Nomad-Token": TOKEN}) as http:
        found = []
        for call in calls(**ids):
            response = await http.request(call.method, call.url, params=call.params, json=call.body)
            found += [p for p in problems(call, response) if not p.startswith(tuple(KNOWN_GAPS))]
        assert not found, "\n".join(found)
        agent = (await http.get("/v1/agent/self")).json()
    assert agent["config"]["Region"] == "global"
    assert agent["member"]["Name"] == "server-2.global"


async def test_every_route_is_checked_or_outside_the_description(nursery: trio.Nursery) -> None:
    cluster, ids = await started(nursery)
    api = NomadAPI(cluster, cluster.servers[0])
    exercised = [(call.method, call.url) for call in calls(**ids)]
    unchecked = []
    for regex, table in api.router._routes:
        if any(regex.pattern.startswith("^" + prefix) for prefix in OUTSIDE_THE_DESCRIPTION):
            continue
        for handler in {id(h): h for method, h in table.items() if method != "*"}.values():
            methods = [m for m, h in table.items() if h is handler]
            if not any(m in methods and regex.match(url) for m, url in exercised):
                unchecked.append(f"{' '.join(methods)} {regex.pattern}")
    assert not unchecked, unchecked


def test_the_description_is_read_as_go_writes_json() -> None:
    node = schemas()["Node"]
    assert node["type"] == ["object", "null"]
    assert node["properties"]["DrainStrategy"] == {
        "anyOf": [{"$ref": "#/components/schemas/DrainStrategy"}, {"type": "null"}]
    }
    assert "LastIndex" not in schemas()["JobVersionsResponse"]["properties"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"Name": 1}, {**schemas()["Node"], "components": {"schemas": schemas()}})
