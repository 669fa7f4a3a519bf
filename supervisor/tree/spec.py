"""The daemon's tree, written as data: each child with how it starts (from the typed parts of the
running daemon, or of a term), its restart type, how it stops and within what share of the stop's
budget, in tiers that start in order and stop in reverse. ``draw_tree`` draws it as the README and
``daemon.py`` show it; a test holds both drawings to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from attrs import frozen

from .api_serving import ApiServing
from .configured_environments import ConfiguredEnvironments
from .execution_deadline import ExecutionDeadline
from .lock_hold import LockHold
from .parts import DaemonParts, TermParts
from .stop_budget import StopBudget
from .supervision import ChildSpec, PartsT, Restart, Shutdown, TierSpec
from .systemd_reporting import SystemdReporting

__all__ = ["TREE", "Tree", "draw_tree"]


@frozen
class Tree:
    """The daemon's tiers, which live as long as it runs, then a term's, which live for one term
    as the active daemon (the first of them outermost)."""

    daemon: tuple[TierSpec[DaemonParts], ...]
    term: tuple[TierSpec[TermParts], ...]

    def __iter__(self) -> Iterator[TierSpec[DaemonParts] | TierSpec[TermParts]]:
        """Every tier, in the order they start."""
        yield from self.daemon
        yield from self.term


TREE: Final = Tree(
    daemon=(
        TierSpec(
            "platform",
            (
                ChildSpec[DaemonParts](
                    "systemd notifier",
                    lambda p, _: SystemdReporting(p.systemd, p.stop, p.endpoint.serving, p.terms).run,
                    Restart.TRANSIENT,
                    role="READY=1, STATUS=, WATCHDOG=1",
                ),
                ChildSpec[DaemonParts](
                    "stop budget",
                    lambda p, _: StopBudget(p.stop, p.server, p.terms, p.everything).run,
                    role="cuts what is left when the budget ends",
                ),
            ),
        ),
        TierSpec(
            "intake",
            (
                ChildSpec[DaemonParts](
                    "api server",
                    lambda p, tier: (
                        ApiServing(
                            p.server, p.network, p.settings.server.address, p.endpoint, connections=tier
                        ).run
                    ),
                    Restart.TRANSIENT,
                    Shutdown.DRAIN,
                    share=1.0,
                    ask=lambda p: p.server.stop,
                    role="/api/v1, /metrics; 503 between terms",
                ),
            ),
        ),
    ),
    term=(
        TierSpec(
            "executions",
            (
                ChildSpec[TermParts](
                    "execution deadline",
                    lambda p, _: ExecutionDeadline(p.term, p.service, p.stop).run,
                    Restart.TRANSIENT,
                    Shutdown.DRAIN,
                    share=1.0,
                    role="ends executions before the budget",
                ),
            ),
            also_runs="one task per execution, each in its own cancel scope",
        ),
        TierSpec(
            "knowledge",
            (
                ChildSpec[TermParts](
                    "informer", lambda p, _: p.service.informer.run, role="list + watch Nomad -> evidence"
                ),
                ChildSpec[TermParts](
                    "node tracker",
                    lambda p, _: p.service.informer.watch_silence,
                    role="agents silent while others report",
                ),
            ),
        ),
        TierSpec(
            "effects",
            (
                ChildSpec[TermParts](
                    "factory", lambda p, _: p.service.factory.run, role="Nomad's writes, paced and spread"
                ),
                ChildSpec[TermParts](
                    "inactivity expiry",
                    lambda p, _: p.service.effects.expiry.run,
                    role="claims past their timeout",
                ),
                ChildSpec[TermParts](
                    "prewarming-pool alerter",
                    lambda p, _: p.service.alerter.run,
                    role="depleting pools relisted",
                ),
            ),
        ),
        TierSpec(
            "acting",
            (
                ChildSpec[TermParts](
                    "configured environments",
                    lambda p, _: ConfiguredEnvironments(p.service, p.settings.environments).run,
                    Restart.TRANSIENT,
                    role="[[environments]] ensured in Nomad",
                ),
                ChildSpec[TermParts](
                    "lock hold",
                    lambda p, _: LockHold(p.term, p.elector).run,
                    Restart.TEMPORARY,
                    ha_only=True,
                    role="renews the lock; its end ends the term",
                ),
            ),
        ),
    ),
)


def draw_tree(tree: Tree = TREE) -> str:
    """The tree as the README and ``daemon.py`` draw it: the daemon's tiers, then a term's."""
    width = max(len(child.name) for tier in tree for child in tier.children)
    lines = ["Daemon.run"]
    for tier in tree.daemon:
        lines += _tier_lines(tier, "", width, last=False)
    lines.append("└── term: from the start to the stop; with [ha], one per election won")
    for n, term_tier in enumerate(tree.term):
        lines += _tier_lines(term_tier, "    ", width, last=n == len(tree.term) - 1)
    return "\n".join(lines)


def _tier_lines(tier: TierSpec[PartsT], indent: str, width: int, *, last: bool) -> list[str]:
    lines = [f"{indent}{'└── ' if last else '├── '}{tier.name}"]
    inner = indent + ("    " if last else "│   ")
    for n, child in enumerate(tier.children):
        how = child.restart.value + (", drains" if child.shutdown is Shutdown.DRAIN else "")
        how += ", [ha]" if child.ha_only else ""
        end = n == len(tier.children) - 1 and not tier.also_runs
        name = f"{inner}{'└── ' if end else '├── '}{child.name}"
        lines.append(f"{name:<{width + 12}}  {how:<18}  {child.role}")
    if tier.also_runs:
        lines.append(f"{inner}└── {tier.also_runs}")
    return lines
