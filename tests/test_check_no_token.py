"""``supervisor check`` with no token at all against a Nomad that enforces ACLs: the token's line
says none is set, where to set one, and the policy it must hold, as the daemon would act as Nomad's
anonymous token. Same rules as ``test_check.py``."""

from __future__ import annotations

import trio

from supervisor.core.config import Settings
from supervisor.ops.check_result import Status, exit_code, format_result
from supervisor.ops.check_token import daemon_policy
from supervisor.simulator import SimConfig

from .test_check import HA, acl_config, checked, start


async def test_no_token_prints_where_to_set_one_and_the_policy(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(60):
        cluster = await start(nursery, acl_config("\n".join(daemon_policy(HA, "default"))))
        results = await checked(HA, cluster.addresses)
    token = results["token"]
    assert token.status is Status.WARN
    assert token.detail.startswith("no token set (nomad.token, NOMAD_TOKEN): the daemon acts as Nomad's")
    assert token.fix.startswith("set NOMAD_TOKEN (or nomad.token) to the SecretID of a token")
    printed = format_result(token)
    for line in daemon_policy(HA, "default"):
        assert f"        {line}" in printed, line
    assert printed[-1].endswith("nomad acl token create -name supervisor -policy supervisor")
    assert results["read jobs"].status is Status.FAIL, "the anonymous token may not read jobs"
    assert exit_code(list(results.values())) == 1


async def test_no_token_with_acls_off_asks_for_none(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(60):
        cluster = await start(nursery, SimConfig(seed=3, nodes=2))
        results = await checked(Settings(), cluster.addresses)
    assert results["token"].status is Status.OK
    assert results["token"].detail.startswith("ACLs are off in this Nomad")
    assert results["token"].lines == ()
