"""The daemon's safety mechanisms, each with a mutant that switches it off (``scripts/mutants.py``).

A mutant is a few exact text replacements in the package's source, applied to a scratch copy of the
project, never to the checkout: the product has no flag for any of them. Each switches its
mechanism off in the smallest way that keeps the daemon running. Applying one fails loudly
(``CatalogueDrift``) when an old text is not in its file exactly once, so the catalogue cannot
silently drift from the code it mutates: ``tests/test_mutant_catalogue.py`` applies every mutant.

Each mutant names the scenario under ``scenarios/`` that tells its mechanism's story, with its
arguments at full size (as ``scenarios/run_all.py`` runs it), or none where no scenario does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["MUTANTS", "CatalogueDrift", "Mutant", "Replacement", "apply", "by_name"]


class CatalogueDrift(Exception):
    """A mutant's old text is not in its file exactly once: the code moved under the catalogue."""


@dataclass(frozen=True)
class Replacement:
    """``old`` becomes ``new`` in the file at ``path`` (relative to the project's root)."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    """A mechanism (``name``: what it does, ``purpose``: what it is for) switched off by
    ``replacements`` (``patch``: how, in one line), and the scenario that tells its story."""

    name: str
    purpose: str
    patch: str
    replacements: tuple[Replacement, ...]
    scenario: str | None
    arguments: tuple[str, ...] = ()


def apply(mutant: Mutant, root: Path) -> None:
    """Apply ``mutant`` to the copy of the project at ``root``; CatalogueDrift if any old text is
    not in its file exactly once (nothing is written then)."""
    texts: dict[Path, str] = {}
    for replacement in mutant.replacements:
        path = root / replacement.path
        text = texts.get(path)
        if text is None:
            text = path.read_text()
        found = text.count(replacement.old)
        if found != 1:
            raise CatalogueDrift(
                f"{mutant.name}: {replacement.path} holds its old text {found} times, not once: "
                f"{replacement.old.strip().splitlines()[0]!r}"
            )
        texts[path] = text.replace(replacement.old, replacement.new)
    for path, text in texts.items():
        path.write_text(text)


def by_name(names: list[str]) -> list[Mutant]:
    """The mutants named, in the catalogue's order; KeyError for a name it does not hold."""
    known = {mutant.name: mutant for mutant in MUTANTS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise KeyError(f"no such mutant: {', '.join(unknown)} (known: {', '.join(known)})")
    return [mutant for mutant in MUTANTS if mutant.name in names]


_POOL: Final = "supervisor/core/pool.py"
_LISTING: Final = "supervisor/core/listing.py"
_FACTORY: Final = "supervisor/effects/factory.py"

MUTANTS: Final[tuple[Mutant, ...]] = (
    Mutant(
        "suspect_after_agent_restart",
        "after an agent restarts, its runners are not handed out until evidence newer than the "
        "restart proves them (the first field report's story)",
        "RunnerPool._node_restarted marks nothing suspect (its body returns)",
        (
            Replacement(
                _POOL,
                "        for runner in self.runners.values():\n"
                "            if runner.node_id == node_id:\n"
                "                runner.suspect_since = max(runner.suspect_since, index)\n"
                "                self._set_state(runner, runner.state)\n",
                "        return\n",
            ),
        ),
        "all_agents_restart",
        ("--runners", "100"),
    ),
    Mutant(
        "tombstones",
        "a removed runner (released, expired, gone) never comes back from a listing taken before its purge",
        "ListingReconcile.reconcile ignores tombstones: a tombstoned job is reconciled (adopted) "
        "like any other",
        (
            Replacement(
                _LISTING,
                "            if job.id in self.tombstones:\n"
                "                actions += self._listed_after_removal(job.id, index)\n",
                "            if False:\n"
                "                actions += self._listed_after_removal(job.id, index)\n",
            ),
        ),
        "stream_flapping",
        ("--runners", "20"),
    ),
    Mutant(
        "live_only_relist",
        "a relist reads live allocations only: a runner whose known allocation is not listed live has ended",
        "ListingReconcile._reconcile_job keeps a runner whose allocation the live-only listing no "
        "longer shows",
        (
            Replacement(
                _LISTING,
                "        if runner.alloc_id and runner.alloc_create_index <= index:\n"
                "            return self._remove(runner, REASON_ALLOCATION_STOPPED, found=found)\n",
                "        if False:\n"
                "            return self._remove(runner, REASON_ALLOCATION_STOPPED, found=found)\n",
            ),
        ),
        "all_agents_restart",
        ("--runners", "100"),
    ),
    Mutant(
        "admission_gate",
        "losing the event stream pauses new claims and executions (they wait at the gate, then "
        "NOMAD_UNREACHABLE) while running executions go on",
        "AdmissionGate.admit always admits at once",
        (
            Replacement(
                "supervisor/informer/admission.py",
                "        if self._level.value is StreamState.UP:\n            return\n",
                "        if True:\n            return\n",
            ),
        ),
        "stream_flapping",
        ("--runners", "20"),
    ),
    Mutant(
        "claim_waits_for_its_mark",
        "a claim is answered only once its runner's 'used' mark is in Nomad, so that no daemon "
        "that takes over (a restart, an HA standby) takes the runner for an idle one",
        "Desk._claim takes the mark as landed without waiting for it",
        (
            Replacement(
                "supervisor/desk/desk.py",
                "landed = await self._effects.factory.marked(runner_id)",
                "landed = True",
            ),
        ),
        "ha_failover",
        ("--runners", "20"),
    ),
    Mutant(
        "drain_fence",
        "no runner on a draining node is handed out: its idle runners are replaced elsewhere at once "
        "(Poseidon issue #659)",
        "RunnerPool keeps idle runners of a draining node: neither a drain's start nor an allocation "
        "on a draining node removes them",
        (
            Replacement(
                _POOL,
                '                actions += self._remove(runner, "its node is draining")\n',
                "                pass\n",
            ),
            Replacement(
                _POOL,
                "        if self.nodes.draining(alloc.node_id):\n"
                '            return self._remove(runner, "its node is draining")\n',
                '        if False:\n            return self._remove(runner, "its node is draining")\n',
            ),
        ),
        "agent_drain_restart",
        ("--runners", "30"),
    ),
    Mutant(
        "factory_pace",
        "new runner jobs are registered at factory.registrations_per_second at most: a burst of "
        "placements is what fed the field's 25-minute storm",
        "RunnerFactory registers new runner jobs without waiting for a turn (_rate_limit skipped)",
        (
            Replacement(
                _FACTORY, "        await self._rate_limit()\n", "        await trio.lowlevel.checkpoint()\n"
            ),
        ),
        "rolling_agent_restart_storm",
        ("--runners", "200"),
    ),
    Mutant(
        "factory_per_agent_cap",
        "no agent is given more than factory.max_starting new runner jobs starting at once (an agent "
        "starting too many tasks crashes, and crashes again as it restores them)",
        "RunnerFactory neither waits for room (_room_to_start skipped) nor steers new jobs away from "
        "full agents (_avoided names none full)",
        (
            Replacement(
                _FACTORY,
                "        await self._room_to_start()\n",
                "        await trio.lowlevel.checkpoint()\n",
            ),
            Replacement(
                _FACTORY,
                "full = tuple(n for n, count in placed.items() "
                "if count + unplaced >= most and n not in away)",
                "full: tuple[str, ...] = ()",
            ),
        ),
        "rolling_agent_restart_storm",
        ("--runners", "200"),
    ),
    Mutant(
        "heartbeat_deadline",
        "a silent event stream (no event and no heartbeat within watcher.heartbeat_timeout) is "
        "taken for lost and reconnected, and the gate closes meanwhile",
        "EventStream._next_chunk waits for the server for ever",
        (
            Replacement(
                "supervisor/nomad/events.py",
                "        with trio.move_on_after(self._heartbeat_timeout):\n            try:\n",
                '        with trio.move_on_after(float("inf")):\n            try:\n',
            ),
        ),
        "server_restart",
        ("--runners", "20"),
    ),
    Mutant(
        "ha_fence",
        "with [ha], at most one daemon acts: the active steps down before its lock can lapse when "
        "no renewal got through, and when the lock is lost",
        "LockElector.hold takes every renewal as accepted now, so the active never steps down",
        (
            Replacement(
                "supervisor/tree/election.py",
                "            renewed = await self._renew_before(step_down_at)\n",
                "            renewed = await self._renew_before(step_down_at) or trio.current_time()\n",
            ),
        ),
        "ha_failover",
        ("--runners", "20"),
    ),
    Mutant(
        "inactivity_expiry",
        "a claimed runner that no client uses for its inactivity timeout is destroyed",
        "InactivityExpiry.run finds nothing expired and sets no deadline",
        (
            Replacement(
                "supervisor/effects/expiry.py",
                "for runner_id in self._pool.expired(trio.current_time()):",
                "for runner_id in ():",
            ),
            Replacement(
                "supervisor/effects/expiry.py",
                "deadline = self._pool.next_expiry()",
                "deadline = None",
            ),
        ),
        "daemon_restart",
        ("--runners", "30"),
    ),
    Mutant(
        "workspace_link_checks",
        "file copies, listings, deletes and downloads never follow a link planted in the workspace "
        "out of it (docs/workspace-security.md)",
        "the file commands' shell prelude takes every directory for inside the workspace, and a "
        "download follows a link anywhere",
        (
            Replacement(
                "supervisor/desk/workspace.py",
                """'inside() { case $(pwd -P) in "$W"|"$W"/*) return 0;; esac; return 1; }; '""",
                "'inside() { return 0; }; '",
            ),
            Replacement(
                "supervisor/desk/workspace.py",
                """f'case $t in "$W"/*) ;; *) echo""",
                "f'case $t in *) ;; *) echo",
            ),
        ),
        "hostile_workspace",
        ("--runners", "20"),
    ),
    Mutant(
        "stop_budget",
        "a graceful stop ends within its budget: when it has passed, the connections left and the "
        "command stops under way are cut, then everything else is cancelled",
        "StopBudget.run never wakes: nothing is cut when the budget has passed",
        (
            Replacement(
                "supervisor/tree/stop_budget.py",
                "        await stop.wait()\n",
                "        await trio.sleep_forever()\n",
            ),
        ),
        "socket_restart",
        ("--runners", "20", "--clients", "12"),
    ),
    Mutant(
        "cut_session_stops",
        "a command whose exec session ended before it (a client's socket cut, a time limit) is "
        "stopped, since Nomad leaves it running",
        "CommandStops.stop_in_runner reports every stop done without running it",
        (
            Replacement(
                "supervisor/effects/stopping.py",
                "        outcome = await stop()\n        if outcome.retry:\n",
                "        outcome = StopOutcome.STOPPED\n        if outcome.retry:\n",
            ),
        ),
        "socket_restart",
        ("--runners", "20", "--clients", "12"),
    ),
    Mutant(
        "leftover_sweep",
        "the commands a killed daemon left running in its claimed runners are stopped by the next "
        "run before any new work starts there",
        "LeftoverSweep.adopt sweeps nothing",
        (
            Replacement(
                "supervisor/effects/leftovers.py",
                '        """Sweep these runners, claimed by a previous run, in the background."""\n',
                '        """Sweep these runners, claimed by a previous run, in the background."""\n'
                "        return\n",
            ),
        ),
        "daemon_restart",
        ("--runners", "30"),
    ),
    Mutant(
        "periodic_relist",
        "Nomad can lose jobs without an event (all agents restarting): a relist every "
        "watcher.resync_interval shows it, the bound of promise 2's silent case",
        "Informer._request_periodically never asks for a relist",
        (
            Replacement(
                "supervisor/informer/informer.py",
                '            self.relists.request("periodic")\n',
                "            pass\n",
            ),
        ),
        "all_agents_restart",
        ("--runners", "100"),
    ),
    Mutant(
        "replaced_allocation_ends_claim",
        "a claimed runner whose container is replaced (rescheduled, migrated, its node lost) is gone "
        "for its client (410): its files went with the container",
        "RunnerPool.apply_allocation moves a used runner to its replacement allocation",
        (
            Replacement(
                _POOL,
                "            if replaced:\n"
                "                return self._remove(runner, REASON_REPLACED, found=found)\n",
                "            if False:\n"
                "                return self._remove(runner, REASON_REPLACED, found=found)\n",
            ),
        ),
        "node_down",
        ("--runners", "30"),
    ),
)
