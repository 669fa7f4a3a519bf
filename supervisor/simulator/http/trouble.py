"""Servers in trouble: for a window, Nomad's HTTP API answers a drawn share of requests with the
500s a real cluster gives while its leader is lost, overloaded or out of reach, and answers slowly.

The texts are Nomad's own: ``No cluster leader`` (``structs.ErrNoLeader``), hashicorp/raft's
``timed out enqueuing operation`` and ``leadership lost while committing log``, which the write
endpoints return as they are, and on a follower, which forwards to the leader, ``helper/pool``'s
``rpc error: …`` around what the call to the leader met (``failed to get conn: dial tcp …``,
``EOF``, or the leader's own error). Most leave no doubt that a write did not apply: it never
reached Raft. Two do not: ``EOF`` (the forwarded call's connection dropped after it was sent) and
``leadership lost while committing log`` (the entry may still commit under the next leader). Only
these answer a write that did apply, and only by a draw of its own (``Trouble.applied``): a client
that retries such a write must find it done.

The event stream (served from each server's own broker, never forwarded) and exec sessions are
left alone; the routes under ``/sim/`` are the test's own, not Nomad's, and are left alone too.
"""

from __future__ import annotations

import random
from typing import Final

import trio
from attrs import define, field, frozen

__all__ = ["ServerTrouble", "Trouble", "Verdict"]

_NO_LEADER: Final = "No cluster leader"
_ENQUEUE_TIMEOUT: Final = "timed out enqueuing operation"
_LEADERSHIP_LOST: Final = "leadership lost while committing log"
_RPC: Final = "rpc error: "
_UNREACHABLE: Final = _RPC + "failed to get conn: dial tcp {leader}: i/o timeout"
_EOF: Final = _RPC + "EOF"


@frozen
class _Texts:
    reads: tuple[str, ...]
    # A write that did not apply; some texts would not rule its effect out either.
    writes: tuple[str, ...]
    # A write that applied, answered 500 all the same.
    applied: tuple[str, ...]


_LEADER: Final = _Texts(
    reads=(_NO_LEADER,),
    writes=(_NO_LEADER, _ENQUEUE_TIMEOUT, _LEADERSHIP_LOST),
    applied=(_LEADERSHIP_LOST,),
)
_FOLLOWER: Final = _Texts(
    reads=(_NO_LEADER, _UNREACHABLE, _EOF),
    writes=(_NO_LEADER, _UNREACHABLE, _EOF, _RPC + _ENQUEUE_TIMEOUT, _RPC + _LEADERSHIP_LOST),
    applied=(_EOF, _RPC + _LEADERSHIP_LOST),
)
_WRITES: Final = frozenset({"PUT", "POST", "DELETE"})
_UNTOUCHED: Final = ("/v1/event/stream", "/v1/client/")


@frozen
class Trouble:
    """One window of trouble, as drawn: how long, how bad."""

    duration: float
    # The share of requests answered 500.
    errors: float
    # The share of requests answered late, each by up to ``max_delay`` seconds (uniform).
    slow: float
    max_delay: float
    # The share of writes answered 500 that applied first ("applied, answer lost").
    applied: float
    # The per-request draws' seed.
    seed: int

    def describe(self) -> str:
        """One line for the trace and the report."""
        return (
            f"errors={self.errors:.2f} slow={self.slow:.2f} max_delay={self.max_delay:.1f} "
            f"applied={self.applied:.2f}"
        )


@frozen
class Verdict:
    """What trouble does to one request: wait ``delay`` seconds, then answer 500 ``error`` (if
    any), after applying it when ``applied``."""

    delay: float = 0.0
    error: str | None = None
    applied: bool = False


@define(eq=False)
class _Window:
    trouble: Trouble
    server: str | None
    start: float
    end: float
    rng: random.Random


@define(eq=False)
class ServerTrouble:
    """The windows of trouble of one cluster's servers; each heals at its end."""

    windows: list[_Window] = field(factory=list)

    def begin(self, trouble: Trouble, *, server: str | None = None) -> None:
        """Trouble from now on, for ``trouble.duration`` seconds, on every server, or on ``server``
        alone (a follower that lost its leader, or an overloaded one)."""
        now = trio.current_time()
        rng = random.Random(trouble.seed)
        self.windows.append(_Window(trouble, server, now, now + trouble.duration, rng))

    def verdict(
        self, server: str, method: str, path: str, *, leader_rpc: str, leading: bool
    ) -> Verdict | None:
        """What trouble does to this request on ``server``, which leads the cluster or forwards to
        the leader at ``leader_rpc`` (none: ""); None: nothing."""
        if not path.startswith("/v1/") or path.startswith(_UNTOUCHED):
            return None
        window = self._window(server)
        if window is None:
            return None
        trouble, rng = window.trouble, window.rng
        delay = rng.uniform(0.0, trouble.max_delay) if rng.random() < trouble.slow else 0.0
        if rng.random() >= trouble.errors:
            return Verdict(delay) if delay else None
        write = method in _WRITES
        applied = write and rng.random() < trouble.applied
        texts = _LEADER if leading else _FOLLOWER
        text = rng.choice(texts.applied if applied else texts.writes if write else texts.reads)
        if not leader_rpc and not applied:
            text = _NO_LEADER
        return Verdict(delay, text.format(leader=leader_rpc), applied)

    def _window(self, server: str) -> _Window | None:
        now = trio.current_time()
        self.windows = [w for w in self.windows if w.end > now]
        return next((w for w in self.windows if w.start <= now and w.server in (None, server)), None)
