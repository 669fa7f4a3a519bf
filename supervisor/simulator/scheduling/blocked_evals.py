"""Blocked evaluations, as Nomad's blocked-evals tracker and state store keep them
(``nomad/blocked_evals.go``, ``state_store.go`` ``nestedUpsertEval``, ``leader.go``
``reapDupBlockedEvaluations``).

An evaluation that could not place everything completes with its failures, and a blocked
evaluation (``queued-allocs``, "created to place remaining allocations") takes them over. A job has
at most one: of two, the older is cancelled ("existing blocked evaluation exists for job"). A
successful evaluation of the job cancels its blocked ones (``evaluation "<id>" successful``).
Capacity coming back unblocks them: a node ready or eligible again, or a drain cancelled, every
one; an allocation the client ended, those that could use a node of its class (all whose
constraints escaped the classes). Run again, a blocked evaluation stays blocked while anything is
left unplaced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ..state.objects import SimEval
from ..state.store import ClusterState, JobKey, Write
from .placement import Unplaced

__all__ = ["BlockedEvals"]

_BLOCKED_DESCRIPTION: Final = "created to place remaining allocations"


class BlockedEvals:
    """The blocked evaluation of each job; ``run`` runs one that capacity unblocked."""

    def __init__(self, state: ClusterState, run: Callable[[SimEval], None]) -> None:
        self.state = state
        # In the order they blocked.
        self.by_job: dict[JobKey, SimEval] = {}
        self._run = run
        state.after_write.append(self._unblock_on_freed_capacity)

    def block(self, tx: Write, evaluation: SimEval, unplaced: Unplaced, snapshot: int) -> SimEval:
        """Nomad's CreateBlockedEval: the evaluation's job, priority and failures, waiting."""
        blocked = self.state.new_eval(
            tx,
            (evaluation.namespace, evaluation.job_id),
            "queued-allocs",
            type=evaluation.type,
            priority=evaluation.priority,
            job_modify_index=evaluation.job_modify_index,
            status="blocked",
            status_description=_BLOCKED_DESCRIPTION,
            previous_eval=evaluation.id,
            failed_tg_allocs=unplaced.failed,
            class_eligibility={} if unplaced.escaped else unplaced.class_eligibility,
            escaped_computed_class=unplaced.escaped,
            snapshot_index=snapshot,
        )
        self._track(tx, blocked)
        return blocked

    def reblock(self, tx: Write, evaluation: SimEval, unplaced: Unplaced, snapshot: int) -> None:
        """A blocked evaluation run again that still left something unplaced waits again."""
        self.state.eval_changed(
            tx,
            evaluation,
            class_eligibility={} if unplaced.escaped else unplaced.class_eligibility,
            escaped_computed_class=unplaced.escaped,
            snapshot_index=snapshot,
        )
        self._track(tx, evaluation)

    def _track(self, tx: Write, evaluation: SimEval) -> None:
        key = (evaluation.namespace, evaluation.job_id)
        existing = self.by_job.get(key)
        self.by_job[key] = evaluation
        if existing is None or existing is evaluation or existing.terminal:
            return
        if self._latest_index(existing) > self._latest_index(evaluation):
            existing, self.by_job[key] = evaluation, existing
        description = f'existing blocked evaluation exists for job "{evaluation.job_id}"'
        self.state.eval_changed(tx, existing, status="canceled", status_description=description)

    def _latest_index(self, evaluation: SimEval) -> int:
        return max(evaluation.create_index or self.state.index + 1, evaluation.snapshot_index)

    def cancel(self, tx: Write, key: JobKey, *, succeeded: SimEval) -> None:
        """The job's evaluation ``succeeded``: its blocked ones are cancelled."""
        description = f'evaluation "{succeeded.id}" successful'
        for eval_id in sorted(self.state.open_eval_ids(key)):
            evaluation = self.state.evals[eval_id]
            if evaluation.status == "blocked" and evaluation is not succeeded:
                self.state.eval_changed(tx, evaluation, status="canceled", status_description=description)
        tracked = self.by_job.get(key)
        if tracked is not None and (tracked is succeeded or tracked.terminal):
            del self.by_job[key]

    def forget(self, key: JobKey) -> None:
        """Drop the job's blocked evaluation, if any, without running it."""
        self.by_job.pop(key, None)

    def unblock_all(self) -> None:
        """Run every blocked evaluation again."""
        blocked = list(self.by_job.values())
        self.by_job.clear()
        for evaluation in blocked:
            self._run(evaluation)

    def _unblock_on_freed_capacity(self, tx: Write) -> None:
        if not self.by_job or tx.message_type != "AllocationUpdated":
            return
        classes = {
            node.computed_class
            for topic, obj in tx.touched.values()
            if topic == "Allocation" and obj.client_terminal and (node := self.state.node(obj.node_id))
        }
        if not classes:
            return
        for key, evaluation in list(self.by_job.items()):
            if evaluation.escaped_computed_class or any(
                evaluation.class_eligibility.get(node_class, True) for node_class in classes
            ):
                del self.by_job[key]
                self._run(evaluation)
