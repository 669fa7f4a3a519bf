"""Nomad's ACL system in the simulated cluster: which request needs which capability, the tokens that
hold them, and the ``/v1/acl`` routes that let a token read its own grants.

ACLs are on once ``SimConfig`` names a token (``acl_token``, a management token, or any of
``acl_tokens``). Every request is then checked before its handler runs, with Nomad 1.10.5's answers
(``nomad/auth/auth.go``: every RPC answers a refused authentication as ``ErrPermissionDenied``):

- a token Nomad does not know: 403 ``Permission denied``;
- no token: the request is the anonymous token's, whose grants are the policy named "anonymous"
  (none if there is no such policy); refused, 403 ``Permission denied``;
- a known token whose policies lack what the request needs: 403 ``Permission denied``.

``NEEDS`` is the table of what each route needs (Nomad's RPC endpoints check these): a capability in
a namespace (the request's ``?namespace=``, the registered job's, or the allocation's or
evaluation's own), a capability on a variable's path, or a ``node``/``agent``/``operator`` level.
The event stream needs ``read-job`` in its namespace for the Job, Allocation, Evaluation,
Deployment and Service topics, ``node:read`` for Node, and a management token for any other topic
or none. A route the table does not name needs a management token, and so does ``/sim/v1``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import uuid
from base64 import b64encode
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import orjson
from attrs import frozen

from ...nomad.acl_rules import Acl, parse_policy
from ..config import AclPolicy, AclToken, SimConfig
from ..handle import ClusterHandle
from ..http.errors import NomadError
from ..http.server import Request, Response, json_response, text_response
from ..state.encode import rfc3339
from ..state.store import ClusterState

__all__ = [
    "NEEDS",
    "AclRoutes",
    "Need",
    "accessor_id",
    "authority",
    "need_of",
    "permits",
    "refusal",
    "request_token",
]

# Where a namespaced request's namespace comes from.
QUERY, JOB, ALLOCATION, EVALUATION, PATH = "query", "job", "allocation", "evaluation", "path"


@final
@frozen
class Need:
    """What a request needs of its token: any one of ``capabilities`` in ``scope``.

    Scopes: "namespace" (capabilities such as read-job, in the namespace ``namespace_of`` says; none
    listed: any capability there),
    "variables" (read, write, list or destroy on the path), "node", "agent" and "operator" (a
    level: read or write), "events" (by the stream's topics), "management", and "nothing".
    """

    scope: str
    capabilities: tuple[str, ...] = ()
    namespace_of: str = QUERY

    def describe(self, namespace: str = "") -> str:
        """The need in Nomad's policy words: ``namespace "default": submit-job``, ``node: read``."""
        wanted = " or ".join(self.capabilities)
        if self.scope == "namespace":
            return f'namespace "{namespace}": {wanted}'
        if self.scope == "variables":
            return f'namespace "{namespace}" variables: {wanted}'
        return f"{self.scope}: {wanted}" if wanted else self.scope


_NOTHING: Final = Need("nothing")
_MANAGEMENT: Final = Need("management")


def _ns(*capabilities: str, of: str = QUERY) -> Need:
    return Need("namespace", capabilities, of)


def _routes(*rows: tuple[str, str, Need]) -> tuple[tuple[frozenset[str], re.Pattern[str], Need], ...]:
    return tuple((frozenset(methods.split()), re.compile(pattern), need) for methods, pattern, need in rows)


_ALLOC: Final = r"(?P<alloc_id>[^/]+)"
NEEDS: Final = _routes(
    ("GET", r"/v1/status/(leader|peers)", _NOTHING),
    ("GET", r"/v1/regions", _NOTHING),
    ("GET", r"/v1/namespaces", _NOTHING),  # Nomad lists only those the token may see
    ("GET", r"/v1/namespace/(?P<namespace>[^/]+)", Need("namespace", namespace_of=PATH)),
    ("GET", r"/v1/acl/(token/self|policies|policy/[^/]+)", _NOTHING),  # the routes decide (below)
    ("GET", r"/v1/jobs", _ns("list-jobs")),
    ("PUT POST", r"/v1/jobs", _ns("submit-job", of=JOB)),
    ("PUT POST", r"/v1/jobs/parse", _ns("parse-job", "submit-job")),
    ("PUT POST", r"/v1/validate/job", _ns("read-job", of=JOB)),  # Job.Validate checks read-job
    ("GET", r"/v1/job/[^/]+", _ns("read-job")),
    ("PUT POST", r"/v1/job/[^/]+", _ns("submit-job", of=JOB)),
    ("DELETE", r"/v1/job/[^/]+", _ns("submit-job")),
    ("GET", r"/v1/job/[^/]+/(allocations|evaluations|summary|versions|deployments?)", _ns("read-job")),
    ("PUT POST", r"/v1/job/[^/]+/(plan|evaluate|revert|stable)", _ns("submit-job")),
    ("PUT POST", r"/v1/job/[^/]+/dispatch", _ns("dispatch-job")),
    ("GET", r"/v1/allocations", _ns("read-job")),
    ("GET", rf"/v1/allocation/{_ALLOC}", _ns("read-job", of=ALLOCATION)),
    ("PUT POST", rf"/v1/allocation/{_ALLOC}/stop", _ns("alloc-lifecycle", of=ALLOCATION)),
    ("GET", rf"/v1/client/allocation/{_ALLOC}/exec", _ns("alloc-exec", of=ALLOCATION)),
    ("GET", rf"/v1/client/allocation/{_ALLOC}/stats", _ns("read-job", of=ALLOCATION)),
    ("PUT POST", rf"/v1/client/allocation/{_ALLOC}/(restart|signal)", _ns("alloc-lifecycle", of=ALLOCATION)),
    ("GET", rf"/v1/client/fs/logs/{_ALLOC}", _ns("read-logs", of=ALLOCATION)),
    ("GET", rf"/v1/client/fs/(cat|ls|stat|readat|stream)/{_ALLOC}", _ns("read-fs", of=ALLOCATION)),
    ("GET", r"/v1/evaluations", _ns("read-job")),
    ("GET", r"/v1/evaluation/(?P<eval_id>[^/]+)(/allocations)?", _ns("read-job", of=EVALUATION)),
    ("GET", r"/v1/nodes", Need("node", ("read",))),
    ("GET", r"/v1/node/[^/]+(/allocations)?", Need("node", ("read",))),
    ("PUT POST", r"/v1/node/[^/]+/(drain|eligibility|purge|evaluate)", Need("node", ("write",))),
    ("GET", r"/v1/agent/(self|health)", Need("agent", ("read",))),
    ("GET", r"/v1/agent/members", Need("node", ("read",))),
    (
        "GET",
        r"/v1/operator/(scheduler/configuration|raft/configuration|autopilot/health)",
        Need("operator", ("read",)),
    ),
    ("PUT POST", r"/v1/operator/scheduler/configuration", Need("operator", ("write",))),
    ("GET", r"/v1/vars", Need("variables", ("list",))),
    ("*", r"/v1/var/", _NOTHING),  # no path: the route's 400
    ("GET", r"/v1/var/(?P<path>.+)", Need("variables", ("read",))),
    ("PUT POST", r"/v1/var/(?P<path>.+)", Need("variables", ("write",))),  # locks too
    ("DELETE", r"/v1/var/(?P<path>.+)", Need("variables", ("destroy",))),
    ("*", r"/v1/var/.+", _NOTHING),  # another method: the route's 400
    ("GET", r"/v1/event/stream", Need("events")),
)
# The event stream's topics that need read-job in the stream's namespace; Node needs node:read.
_JOB_TOPICS: Final = frozenset({"Job", "Allocation", "Evaluation", "Deployment", "Service"})


def need_of(method: str, path: str) -> tuple[Need, dict[str, str]]:
    """What ``method path`` needs, and the path's parts the need looks at (``alloc_id``, ``path``)."""
    for methods, pattern, need in NEEDS:
        if (method in methods or "*" in methods) and (found := pattern.fullmatch(path)) is not None:
            return need, {k: v for k, v in found.groupdict().items() if v is not None}
    return _MANAGEMENT, {}


def request_token(request: Request) -> str:
    """The request's secret: ``X-Nomad-Token``, or ``Authorization: Bearer``."""
    token = request.headers.get("x-nomad-token", "")
    authorization = request.headers.get("authorization", "")
    if not token and authorization.lower().startswith("bearer "):
        token = authorization[7:].strip()
    return token


def accessor_id(secret_id: str) -> str:
    """A token's AccessorID: the name others may see, derived from the secret once and for all."""
    return str(uuid.uuid5(uuid.NAMESPACE_OID, f"nomad-acl-accessor:{secret_id}"))


@final
@frozen
class _Authority:
    """The configured tokens and policies, compiled."""

    tokens: Mapping[str, tuple[AclToken, Acl]]
    policies: Mapping[str, AclPolicy]
    anonymous: Acl


@functools.lru_cache(maxsize=8)
def _authority(management: str, tokens: tuple[AclToken, ...], policies: tuple[AclPolicy, ...]) -> _Authority:
    by_name = {policy.name: policy for policy in policies}
    parsed = {policy.name: parse_policy(policy.rules) for policy in policies}

    def compiled(token: AclToken) -> Acl:
        if token.type == "management":
            return Acl(management=True)
        return Acl(parsed[name] for name in token.policies if name in parsed)

    every = [*tokens]
    if management:
        every.append(AclToken(management, name="Bootstrap Token", type="management"))
    return _Authority(
        {token.secret_id: (token, compiled(token)) for token in every},
        by_name,
        Acl([parsed["anonymous"]] if "anonymous" in parsed else []),
    )


def authority(config: SimConfig) -> _Authority:
    """The config's tokens and policies, compiled once (a PolicyError for rules Nomad refuses)."""
    return _authority(config.acl_token, config.acl_tokens, config.acl_policies)


def _namespace(need: Need, request: Request, params: Mapping[str, str], state: ClusterState) -> str:
    """The namespace the need is checked in: the object's own where the request names one."""
    queried = request.arg("namespace") or "default"
    if need.namespace_of == JOB:
        try:
            body = orjson.loads(request.body) if request.body.strip() else None
        except orjson.JSONDecodeError:
            body = None
        job = body.get("Job") if isinstance(body, dict) else None
        named = job.get("Namespace") if isinstance(job, dict) else None
        return named if isinstance(named, str) and named else queried
    if need.namespace_of == ALLOCATION and (alloc := state.allocs.get(params.get("alloc_id", ""))):
        return alloc.namespace
    if need.namespace_of == EVALUATION and (evaluation := state.evals.get(params.get("eval_id", ""))):
        return evaluation.namespace
    if need.namespace_of == PATH:
        return params["namespace"]
    return queried


def _event_needs(request: Request) -> list[Need]:
    topics = {value.split(":")[0] for value in request.args("topic")}
    if not topics:
        return [_MANAGEMENT]
    needs = []
    for topic in sorted(topics):
        if topic in _JOB_TOPICS:
            needs.append(_ns("read-job"))
        elif topic == "Node":
            needs.append(Need("node", ("read",)))
        else:
            needs.append(_MANAGEMENT)
    return needs


def permits(acl: Acl, need: Need, request: Request, params: Mapping[str, str], state: ClusterState) -> bool:
    """Whether ``acl`` grants what ``need`` asks of this request."""
    if need.scope == "nothing" or acl.management:
        return True
    if need.scope == "management":
        return False
    if need.scope == "events":
        return all(permits(acl, each, request, params, state) for each in _event_needs(request))
    if need.scope == "namespace":
        namespace = _namespace(need, request, params, state)
        if not need.capabilities:
            return acl.allows_namespace_at_all(namespace)
        return any(acl.allows_namespace(namespace, capability) for capability in need.capabilities)
    if need.scope == "variables":
        namespace = request.arg("namespace") or "default"
        if "path" not in params:
            return acl.allows_variable_search(namespace)
        return any(acl.allows_variable(namespace, params["path"], c) for c in need.capabilities)
    return any(acl.allows(need.scope, level) for level in need.capabilities)


def refusal(cluster: ClusterHandle, request: Request) -> Response | None:
    """Nomad's 403 for a request its token may not make, or None when it may pass."""
    config = cluster.config
    if not config.acl_enabled:
        return None
    secret = request_token(request)
    if secret and secret == config.acl_token:
        return None
    need, params = need_of(request.method, request.path)
    if need.scope == "nothing":
        return None
    found = authority(config)
    if secret:
        token = found.tokens.get(secret)
        if token is None:
            return text_response(403, "Permission denied")
        acl = token[1]
    else:
        acl = found.anonymous
    if permits(acl, need, request, params, cluster.state):
        return None
    return text_response(403, "Permission denied")


_UUID: Final = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_NOT_SIGNED: Final = "failed to parse signed token: go-jose/go-jose: compact JWS format must have three parts"


def _stand_in(accessor: str, name: str, policies: list[str] | None) -> dict[str, Any]:
    """``structs.AnonymousACLToken`` or ``ACLsDisabledToken``: no secret, nothing of a real token."""
    return {
        "AccessorID": accessor,
        "SecretID": "",
        "Name": name,
        "Type": "client",
        "Policies": policies,
        "Roles": None,
        "Global": False,
        "Hash": None,
        "CreateTime": "0001-01-01T00:00:00Z",
        "ExpirationTime": None,
        "ExpirationTTL": 0,
        "CreateIndex": 0,
        "ModifyIndex": 0,
    }


def _hash(*parts: str) -> str:
    return b64encode(hashlib.blake2b("\x00".join(parts).encode(), digest_size=32).digest()).decode()


class AclRoutes:
    """``GET /v1/acl/token/self``, ``/v1/acl/policies`` and ``/v1/acl/policy/:name``: what a token
    may read of its own grants (a management token, of every policy). With ACLs off the policies
    answer 400 ``ACL support disabled``; the token is then ``ACLsDisabledToken``, as ``ACL.WhoAmI``
    says, and without a token the anonymous one."""

    def __init__(self, cluster: ClusterHandle) -> None:
        self.cluster = cluster

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """Add the routes to a server's router."""
        add("/v1/acl/token/self", "GET", self.token_self)
        add("/v1/acl/policies", "GET", self.list_policies)
        add("/v1/acl/policy/{name}", "GET", self.get_policy)

    def _caller(self, request: Request) -> AclToken | None:
        """The request's token; None for the anonymous one. Nomad does not know a secret that is no
        UUID as a token, and tries it as a workload's signed identity, which it is not either (500);
        an unknown UUID is refused as every RPC refuses it."""
        if not self.cluster.config.acl_enabled:
            raise NomadError(400, "ACL support disabled")
        secret = request_token(request)
        if not secret:
            return None
        found = authority(self.cluster.config).tokens.get(secret)
        if found is None:
            if not _UUID.fullmatch(secret):
                raise NomadError(500, _NOT_SIGNED)
            raise NomadError(403, "Permission denied")
        return found[0]

    def _meta(self) -> tuple[tuple[str, str], ...]:
        """The query meta Nomad's agent sets on every read (the ACL tables are written at index 1)."""
        leader = "true" if self.cluster.leader else "false"
        return (("X-Nomad-Index", "1"), ("X-Nomad-KnownLeader", leader), ("X-Nomad-LastContact", "0"))

    def _created(self) -> str:
        state = self.cluster.state
        return rfc3339(state.now_ns() - round(state.now() * 1e9))

    async def token_self(self, request: Request, params: dict[str, str]) -> Response:
        """The caller's token: accessor, secret, type and policies; with ACLs off or without a
        token, Nomad's own stand-ins."""
        if not self.cluster.config.acl_enabled:
            return json_response(
                _stand_in("acls-disabled", "ACLs disabled token", None), headers=self._meta()
            )
        token = self._caller(request)
        if token is None:
            return json_response(
                _stand_in("anonymous", "Anonymous Token", ["anonymous"]), headers=self._meta()
            )
        management = token.type == "management"
        return json_response(
            {
                "AccessorID": accessor_id(token.secret_id),
                "SecretID": token.secret_id,
                "Name": token.name,
                "Type": token.type,
                "Policies": None if management else list(token.policies),
                "Roles": None,
                "Global": False,
                "Hash": _hash(token.name, token.type, *token.policies),
                "CreateTime": self._created(),
                "ExpirationTime": None,
                "ExpirationTTL": 0,
                "CreateIndex": 1,
                "ModifyIndex": 1,
            },
            headers=self._meta(),
        )

    def _readable(self, token: AclToken | None) -> list[AclPolicy]:
        policies = authority(self.cluster.config).policies
        if token is not None and token.type == "management":
            return sorted(policies.values(), key=lambda p: p.name)
        names = ("anonymous",) if token is None else token.policies
        return [policies[name] for name in sorted(set(names)) if name in policies]

    async def list_policies(self, request: Request, params: dict[str, str]) -> Response:
        """The policies the caller may read: every one for management, else its own."""
        readable = self._readable(self._caller(request))
        return json_response(
            [
                {
                    "Name": p.name,
                    "Description": p.description,
                    "Hash": _hash(p.name, p.rules),
                    "CreateIndex": 1,
                    "ModifyIndex": 1,
                }
                for p in readable
            ],
            headers=self._meta(),
        )

    async def get_policy(self, request: Request, params: dict[str, str]) -> Response:
        """One policy and its rules: 403 unless the caller holds it (or is management), 404 if
        there is no such policy."""
        token = self._caller(request)
        policy = authority(self.cluster.config).policies.get(params["name"])
        if policy is None:
            if token is not None and token.type == "management":
                raise NomadError(404, "ACL policy not found")
            raise NomadError(403, "Permission denied")
        if policy not in self._readable(token):
            raise NomadError(403, "Permission denied")
        return json_response(
            {
                "Name": policy.name,
                "Description": policy.description,
                "Rules": policy.rules,
                "JobACL": None,
                "Hash": _hash(policy.name, policy.rules),
                "CreateIndex": 1,
                "ModifyIndex": 1,
            },
            headers=self._meta(),
        )
