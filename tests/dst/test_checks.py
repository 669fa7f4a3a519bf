"""The simulation's checks of a promise, on their own: what they call broken and what not."""

from __future__ import annotations

from typing import Any, cast

import trio

from supervisor.dst.checks import Checks
from supervisor.dst.faults import FaultLog
from supervisor.dst.trace import Trace


def _checks() -> Checks:
    return Checks(cast(Any, None), FaultLog(), Trace(trio.current_time))


async def test_two_daemons_acting_at_one_write_break_promise_7_once_per_overlap() -> None:
    checks = _checks()
    checks.wrote(["daemon-1"])
    checks.wrote(["daemon-2"])  # a takeover: one at a time
    assert checks.violations == []
    checks.wrote(["daemon-1", "daemon-2"])
    checks.wrote(["daemon-1", "daemon-2"])
    checks.wrote(["daemon-2"])
    checks.wrote(["daemon-2", "daemon-1"])
    assert [v.promise for v in checks.violations] == ["7 at most one daemon acts"] * 2


async def test_what_a_client_may_try_again_is_said_in_poseidons_codes() -> None:
    assert Checks.for_now(503, '{"errorCode":"STANDBY"}')
    assert Checks.for_now(500, '{"errorCode":"NOMAD_UNREACHABLE"}')
    assert not Checks.for_now(500, '{"message":"internal error"}')
    assert not Checks.for_now(404, '{"errorCode":"STANDBY"}')
