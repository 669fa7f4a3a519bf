"""The prewarming-pool alerter's decisions: ok -> depleting -> due for a reload."""

from __future__ import annotations

from supervisor.core.runners import PoolStats
from supervisor.effects.alerter import AlertStates


def stats(idle: int, size: int = 10) -> dict[int, PoolStats]:
    return {10: PoolStats(environment_id=10, size=size, idle=idle, used=0)}


def test_depleting_for_the_reload_timeout_makes_it_due() -> None:
    states = AlertStates(threshold=0.5, reload_timeout=300)
    assert states.update(stats(9), now=0) == []
    assert states.depleting_since == {}
    assert states.update(stats(4), now=10) == []
    assert states.depleting_since == {10: 10}
    assert states.update(stats(4), now=309) == []
    assert states.update(stats(4), now=310) == [10]
    states.reloaded(10, now=311)
    assert states.update(stats(4), now=312) == [], "the clock starts again after a reload"
    assert states.update(stats(5), now=313) == []
    assert states.depleting_since == {}, "back at the threshold"


def test_no_alert_without_a_timeout_a_pool_or_an_environment() -> None:
    assert AlertStates(threshold=0.5, reload_timeout=0).update(stats(0), now=1000) == []
    states = AlertStates(threshold=0.5, reload_timeout=1)
    assert states.update(stats(0, size=0), now=1000) == [], "a pool of size 0 never alerts"
    states.update(stats(0), now=0)
    assert states.update({}, now=5) == []
    assert states.depleting_since == {}, "a deleted environment is forgotten"
