"""The token's checks of ``supervisor check``: which token the daemon holds, and whether it may do
each thing the daemon does (read and write jobs, follow the event stream, read nodes, exec, and with
``[ha]`` hold the lock variable).

They ask as Nomad's own CLI does, without writing anything: ``GET /v1/acl/token/self`` names the
token and its policies, ``/v1/acl/policy/:name`` gives each policy's rules (a token may read its own
policies, and ``/v1/acl/role/:id`` its roles), and the rules are evaluated as Nomad evaluates them
(``nomad/acl_rules.py``). Where the rules cannot be read, the daemon's reads are tried instead,
and what only a write or an exec would show is reported unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import orjson
from attrs import frozen

from ..base.errors import NomadNotFound, NomadPermissionDenied, NomadRequestError, SupervisorError
from ..core.config import Settings
from ..nomad import NomadClient
from ..nomad.acl_rules import Acl, PolicyError, parse_policy
from .check_result import CheckResult, Status

__all__ = ["Need", "check_token", "daemon_needs", "daemon_policy"]

_PROBE_JOB: Final = "supervisor-check-probe"


@final
@frozen
class Need:
    """One thing the daemon does, and what it takes of the token: capabilities in the namespace, a
    node level, capabilities on the lock variable."""

    label: str
    namespace: tuple[str, ...] = ()
    node: str = ""
    variable: tuple[str, ...] = ()

    def missing(self, acl: Acl, namespace: str, path: str) -> list[str]:
        """What ``acl`` lacks of this need, in policy words (empty: nothing)."""
        lacks = [
            f'namespace "{namespace}": {c}' for c in self.namespace if not acl.allows_namespace(namespace, c)
        ]
        if self.node and not acl.allows("node", self.node):
            lacks.append(f"node: {self.node}")
        lacks += [
            f'variables "{path}" (namespace "{namespace}"): {c}'
            for c in self.variable
            if not acl.allows_variable(namespace, path, c)
        ]
        return lacks


def daemon_needs(settings: Settings) -> list[Need]:
    """What the daemon does with its token; the lock variable only with ``[ha]``, parsing jobs only
    with a job template in HCL. (Nomad's /v1/validate/job, at startup, takes read-job.)"""
    needs = [
        Need("read jobs", namespace=("list-jobs", "read-job")),
        Need("write jobs", namespace=("submit-job",)),
        # The stream's topics: Job and Allocation need read-job, Node needs node read.
        Need("stream events", namespace=("read-job",), node="read"),
        Need("read nodes", node="read"),
        Need("exec", namespace=("alloc-exec",)),
    ]
    if settings.ha.enabled:
        needs.append(Need("lock variable", variable=("read", "write")))
    template = settings.nomad.job_template
    if template and not template.endswith(".json"):
        # An HCL job template is parsed by Nomad's /v1/jobs/parse at startup.
        needs.append(Need("parse the job template", namespace=("parse-job",)))
    return needs


def daemon_policy(settings: Settings, namespace: str) -> list[str]:
    """A policy's rules (HCL) that grant exactly what ``daemon_needs`` asks, line by line."""
    needs = daemon_needs(settings)
    capabilities = list(dict.fromkeys(c for need in needs for c in need.namespace))
    lines = [f'namespace "{namespace}" {{', f"  capabilities = {orjson.dumps(capabilities).decode()}"]
    if settings.ha.enabled:
        lines += [
            "  variables {",
            f'    path "{settings.ha.lock_path}" {{ capabilities = ["read", "write"] }}',
            "  }",
        ]
    return [*lines, "}", 'node { policy = "read" }']


def _what_to_do(settings: Settings, namespace: str) -> tuple[str, ...]:
    return (
        "A policy that grants what the daemon needs (nomad acl policy apply supervisor FILE):",
        *(f"  {line}" for line in daemon_policy(settings, namespace)),
        "and a token that holds it: nomad acl token create -name supervisor -policy supervisor",
    )


def _no_token(settings: Settings, namespace: str, found: str) -> CheckResult:
    """The token line when none is set and Nomad enforces ACLs: the daemon then acts as the
    anonymous token, which seldom holds what it needs, so the policy and where a token goes come
    with it."""
    return CheckResult(
        "token",
        Status.WARN,
        f"no token set (nomad.token, NOMAD_TOKEN): the daemon acts as Nomad's anonymous token{found}.",
        fix="set NOMAD_TOKEN (or nomad.token) to the SecretID of a token that holds the policy below.",
        lines=_what_to_do(settings, namespace),
    )


async def _get(client: NomadClient, path: str, *, namespaced: bool = False) -> Any:
    response = await client.request("GET", path, namespaced=namespaced)
    return orjson.loads(response.content)


def _described(token: Mapping[str, Any], source: str) -> str:
    accessor = str(token.get("AccessorID", ""))[:8]
    policies = ", ".join(token.get("Policies") or []) or "none"
    kind = token.get("Type", "client")
    held = "" if kind == "management" else f"; policies: {policies}"
    return f'"{token.get("Name", "")}" (accessor {accessor}..., {kind}{held}) from {source}'


async def _rules(client: NomadClient, token: Mapping[str, Any]) -> list[str]:
    """The rules of every policy the token holds, its roles' included."""
    names = list(token.get("Policies") or [])
    for role in token.get("Roles") or []:
        data = await _get(client, f"/v1/acl/role/{role.get('ID', '')}")
        names += [p.get("Name", "") for p in data.get("Policies") or []]
    rules = []
    for name in dict.fromkeys(names):
        rules.append(str((await _get(client, f"/v1/acl/policy/{name}")).get("Rules", "")))
    return rules


def _granted(need: Need, acl: Acl, held: str, namespace: str, path: str) -> str:
    if acl.management:
        return "everything is allowed" if not held else "a management token may do everything"
    grants = [f'namespace "{namespace}": {", ".join(need.namespace)}'] if need.namespace else []
    grants += [f"node: {need.node}"] if need.node else []
    grants += [f'variables "{path}": {", ".join(need.variable)}'] if need.variable else []
    return f"{'; '.join(grants)} (policies: {held})"


def _judged(
    needs: Sequence[Need], acl: Acl, settings: Settings, namespace: str, held: str
) -> list[CheckResult]:
    results = []
    path = settings.ha.lock_path
    for need in needs:
        lacks = need.missing(acl, namespace, path)
        if not lacks:
            results.append(
                CheckResult(need.label, Status.OK, f"{_granted(need, acl, held, namespace, path)}.")
            )
            continue
        results.append(
            CheckResult(
                need.label,
                Status.FAIL,
                f"the token lacks {'; '.join(lacks)}.",
                fix=f"grant it in one of the token's policies ({held}); the policy under the token's "
                "line grants all the daemon needs.",
            )
        )
    return results


async def _probed(
    client: NomadClient, needs: Sequence[Need], settings: Settings, why: str
) -> list[CheckResult]:
    """Each need tried by a read the daemon makes, where one can tell; writes and exec unchecked."""
    reads: dict[str, tuple[str, bool]] = {
        "read jobs": (f"/v1/job/{_PROBE_JOB}", True),
        "read nodes": ("/v1/nodes", False),
        "lock variable": (f"/v1/var/{settings.ha.lock_path}", True),
    }
    results = []
    for need in needs:
        if need.label == "stream events":
            results.append(
                CheckResult(need.label, Status.SKIP, f"not judged ({why}): the next line opens it.")
            )
            continue
        if need.label not in reads:
            results.append(
                CheckResult(need.label, Status.WARN, f"not checked ({why}): only doing it would tell.")
            )
            continue
        path, namespaced = reads[need.label]
        try:
            await _get(client, path, namespaced=namespaced)
        except NomadNotFound:
            pass
        except NomadPermissionDenied as exc:
            results.append(
                CheckResult(need.label, Status.FAIL, f"refused (probed by GET {path}): {exc.body.strip()}.")
            )
            continue
        except SupervisorError as exc:
            results.append(CheckResult(need.label, Status.WARN, f"not known (probed by GET {path}): {exc}."))
            continue
        partly = " (its write is not checked)" if need.variable else ""
        results.append(CheckResult(need.label, Status.OK, f"allowed (probed by GET {path}){partly}."))
    return results


async def check_token(client: NomadClient, settings: Settings, *, source: str) -> list[CheckResult]:
    """The token line, then one line per need. ``source`` says where the token came from (a
    configuration key or a variable), so that a wrong one can be found."""
    namespace = client.settings.namespace or "default"
    needs = daemon_needs(settings)
    secret = client.settings.token
    given = f"the token from {source}" if secret else "no token (nomad.token, NOMAD_TOKEN)"
    acls_off = [
        CheckResult(
            "token",
            Status.OK,
            "ACLs are off in this Nomad: every request is allowed, with or without a token.",
        ),
        *_judged(needs, Acl(management=True), settings, namespace, ""),
    ]
    try:
        token = await _get(client, "/v1/acl/token/self")
    except NomadRequestError as exc:
        text = exc.body.strip()
        if exc.status_code == 400 and "ACL support disabled" in text:
            return acls_off  # Nomad before 1.5, which had no ACL.WhoAmI behind this route
        # Reading its own token needs no capability: a refusal says Nomad does not know it.
        if isinstance(exc, NomadPermissionDenied) and secret:
            return [
                CheckResult(
                    "token",
                    Status.FAIL,
                    f"Nomad does not know {given}: {text}.",
                    fix=f"set {source} to the SecretID of a token of this cluster (`nomad acl token self` "
                    "with it shows it), or create one:",
                    lines=_what_to_do(settings, namespace),
                ),
                *(CheckResult(n.label, Status.SKIP, "not checked: the token is unknown.") for n in needs),
            ]
        why = f"/v1/acl/token/self: {text or exc}"
        head = CheckResult("token", Status.WARN, f"{given}; its policies cannot be read ({why}).")
        if not secret:
            head = _no_token(settings, namespace, "")
        return [head, *await _probed(client, needs, settings, "the policies cannot be read")]
    except SupervisorError as exc:
        return [CheckResult("token", Status.FAIL, f"cannot be read: {exc}.")]
    if token.get("AccessorID") == "acls-disabled":
        return acls_off
    described = _described(token, source)
    if token.get("Type") == "management":
        acl = Acl(management=True)
    else:
        try:
            acl = Acl(parse_policy(rules) for rules in await _rules(client, token))
        except (SupervisorError, PolicyError) as exc:
            why = f"its policies cannot be read: {exc}"
            head = CheckResult("token", Status.WARN, f"{described}; {why}.")
            return [
                _no_token(settings, namespace, f"; {why}") if not secret else head,
                *await _probed(client, needs, settings, why),
            ]
    held = "management" if acl.management else ", ".join(token.get("Policies") or []) or "none"
    judged = _judged(needs, acl, settings, namespace, held)
    failed = any(r.status is Status.FAIL for r in judged)
    head = CheckResult(
        "token", Status.OK, f"{described}.", lines=_what_to_do(settings, namespace) if failed else ()
    )
    return [head if secret else _no_token(settings, namespace, f" (policies: {held})"), *judged]
