"""The daemon's tree, written as data: each child with how it starts (from the parts of the running
daemon), its restart type, how it stops and within what share of the stop's budget, in tiers that
start in order and stop in reverse. ``draw_tree`` draws it as the README and ``daemon.py`` show it;
a test holds both drawings to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Final

from .supervision import ChildSpec, Lifetime, Restart, Shutdown, TierSpec

__all__ = ["TREE", "draw_tree"]


def _term_of(parts: Any) -> Any:
    """The term's runner service, which a term's child runs with."""
    assert parts.service is not None, "a term's child runs in a term"
    return parts.service


TREE: Final = (
    TierSpec(
        "platform",
        Lifetime.DAEMON,
        (
            ChildSpec(
                "systemd notifier",
                lambda p: p.daemon.tell_systemd,
                Restart.TRANSIENT,
                role="READY=1, STATUS=, WATCHDOG=1",
            ),
            ChildSpec(
                "stop budget",
                lambda p: p.daemon.enforce_budget,
                role="cuts what is left when the budget ends",
            ),
        ),
    ),
    TierSpec(
        "intake",
        Lifetime.DAEMON,
        (
            ChildSpec(
                "api server",
                lambda p: partial(p.daemon.serve_api, p.nursery),
                Restart.TRANSIENT,
                Shutdown.DRAIN,
                share=1.0,
                ask=lambda p: p.daemon.server.stop,
                role="/api/v1, /metrics; 503 between terms",
            ),
        ),
    ),
    TierSpec(
        "executions",
        Lifetime.TERM,
        (
            ChildSpec(
                "execution deadline",
                lambda p: partial(p.daemon.end_executions_in_time, _term_of(p)),
                Restart.TRANSIENT,
                Shutdown.DRAIN,
                share=1.0,
                role="ends executions before the budget",
            ),
        ),
    ),
    TierSpec(
        "knowledge",
        Lifetime.TERM,
        (
            ChildSpec("informer", lambda p: _term_of(p).informer.run, role="list + watch Nomad -> evidence"),
            ChildSpec(
                "node tracker",
                lambda p: _term_of(p).informer.watch_silence,
                role="agents silent while others report",
            ),
        ),
    ),
    TierSpec(
        "effects",
        Lifetime.TERM,
        (
            ChildSpec("factory", lambda p: _term_of(p).factory.run, role="Nomad's writes, paced and spread"),
            ChildSpec(
                "inactivity expiry",
                lambda p: _term_of(p).effects.expiry.run,
                role="claims past their timeout",
            ),
            ChildSpec(
                "prewarming-pool alerter", lambda p: _term_of(p).alerter.run, role="depleting pools relisted"
            ),
        ),
    ),
    TierSpec(
        "acting",
        Lifetime.TERM,
        (
            ChildSpec(
                "configured environments",
                lambda p: partial(p.daemon.ensure_configured_environments, _term_of(p)),
                Restart.TRANSIENT,
                role="[[environments]] ensured in Nomad",
            ),
            ChildSpec(
                "lock hold",
                lambda p: p.daemon.hold_lock,
                Restart.TEMPORARY,
                ha_only=True,
                role="renews the lock; its end ends the term",
            ),
        ),
    ),
)


def draw_tree(tree: Sequence[TierSpec] = TREE) -> str:
    """The tree as the README and ``daemon.py`` draw it: the daemon's tiers, then a term's."""
    width = max(len(child.name) for tier in tree for child in tier.children)
    lines = ["Daemon.run"]

    def tier_lines(tier: TierSpec, indent: str, last: bool) -> None:
        lines.append(f"{indent}{'└── ' if last else '├── '}{tier.name}")
        inner = indent + ("    " if last else "│   ")
        children = list(tier.children)
        for n, child in enumerate(children):
            how = child.restart.value + (", drains" if child.shutdown is Shutdown.DRAIN else "")
            how += ", [ha]" if child.ha_only else ""
            end = n == len(children) - 1 and tier.name != "executions"
            name = f"{inner}{'└── ' if end else '├── '}{child.name}"
            lines.append(f"{name:<{width + 12}}  {how:<18}  {child.role}")
        if tier.name == "executions":
            lines.append(f"{inner}└── one task per execution, each in its own cancel scope")

    daemon = [tier for tier in tree if tier.lifetime is Lifetime.DAEMON]
    term = [tier for tier in tree if tier.lifetime is Lifetime.TERM]
    for tier in daemon:
        tier_lines(tier, "", last=False)
    lines.append("└── term: from the start to the stop; with [ha], one per election won")
    for n, tier in enumerate(term):
        tier_lines(tier, "    ", last=n == len(term) - 1)
    return "\n".join(lines)
