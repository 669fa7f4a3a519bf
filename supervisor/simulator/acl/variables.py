"""Nomad Variables and their locks, as Nomad's Variables endpoint and state store keep them.

Writes (``nomad/variables_endpoint.go``, ``nomad/state/state_store_variables.go``): every apply is a
Raft write, so it takes an index, and it emits no event (Nomad has no Variables topic). A write
that cannot be applied to the current variable is a *conflict*, answered 409 with that variable:

- a check-and-set index that is not the variable's ModifyIndex (index 0: "only if it does not
  exist"; an index for a variable that does not exist conflicts with a zero variable);
- a set or delete of a variable that holds a lock, without that lock's ID (a delete carries none);
- an acquire of a variable that holds a lock, and a release with another lock's ID.

Validation (``canonicalizeAndValidate``): a variable that Nomad refuses is a 400 whose body still
carries one layer of the RPC error's code, ``RPC Error:: 400,<message>`` (the endpoint wraps the
validation error twice, the agent unwraps once): a bad or reserved path, the namespace ``*``, items
over 64 KiB, a lock's TTL outside [10 s, 24 h] (the lock checks in go-multierror's text).

Locks (the leader's ``CreateVariableLockTTLTimer``, ``RenewTTLTimer``, ``invalidateVariableLock``
and ``restoreLockTTLTimers``): the TTL must lie in [10 s, 24 h] (0 means 15 s) and LockDelay
defaults to 15 s. The leader keeps a timer of *twice* the TTL per lock, reset by each renewal. When
it fires, the lock is lost: renewals are refused, but the lock stays on the variable, so nobody can
acquire it, until LockDelay has passed too; then a write removes it. A release removes the lock at
once, with no delay. The timers live in the leader's memory: a new leader starts a full timer for
every lock it finds in the state, and a lock in its delay on the old leader becomes renewable again.

The variables themselves are in ``ClusterState`` (Raft state): a server's restart loses nothing.
Code here is synchronous and does no I/O; time passes through the state's ``Timers``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from attrs import frozen

from ..http.errors import NomadError
from ..scheduling.validation import multierror_text
from ..state.encode import variable_full, variable_metadata
from ..state.objects import SimVariable, SimVariableLock
from ..state.store import ClusterState, Write

__all__ = [
    "DEFAULT_LOCK_DELAY_NS",
    "DEFAULT_LOCK_TTL_NS",
    "MAX_LOCK_TTL_NS",
    "MIN_LOCK_TTL_NS",
    "Answer",
    "VariableService",
    "path_problem",
]

_SECOND: Final = 1_000_000_000
MIN_LOCK_TTL_NS: Final = 10 * _SECOND
MAX_LOCK_TTL_NS: Final = 24 * 3600 * _SECOND
DEFAULT_LOCK_TTL_NS: Final = 15 * _SECOND
DEFAULT_LOCK_DELAY_NS: Final = 15 * _SECOND
# The leader's timer runs this many TTLs, a grace for the client's network and processing delays.
_TTL_TIMER_FACTOR: Final = 2
_MAX_ITEMS_SIZE: Final = 65536
_VALID_PATH: Final = re.compile(r"^[a-zA-Z0-9\-_~/]{1,128}$")
# The Raft message every variable write is (``VarApplyStateRequestType``); it names no event.
_MESSAGE: Final = "VarApplyStateRequest"

VariableKey = tuple[str, str]


@frozen
class Answer:
    """A variables write as the HTTP layer answers it: status, JSON body (None: no body), and the
    ``X-Nomad-Index`` header."""

    status: int
    body: dict[str, Any] | None
    index: int


def path_problem(path: str) -> str | None:
    """What Nomad's ``ValidatePath`` says of a variable path, None when it is valid."""
    if not path:
        return "variable requires path"
    if not _VALID_PATH.match(path):
        return f'invalid path "{path}"'
    parts = path.split("/")
    if parts[0] != "nomad":
        return None
    if len(parts) == 1:
        return (
            '"nomad" is a reserved top-level directory path, but you may write variables to '
            '"nomad/jobs", "nomad/job-templates", or below'
        )
    if parts[1] == "jobs" or (parts[1] == "job-templates" and len(parts) == 3):
        return None
    if parts[1] == "job-templates":
        return (
            '"nomad/job-templates" is a reserved directory path, but you may write variables at the '
            'level below it, for example, "nomad/job-templates/template-name"'
        )
    return (
        'only paths at "nomad/jobs" or "nomad/job-templates" and below are valid paths under the '
        'top-level "nomad" directory'
    )


def _refused(message: str) -> NomadError:
    """A validation error as Nomad's agent answers it: 400, one RPC code layer left in the text."""
    return NomadError(400, f"RPC Error:: 400,{message}")


_WILDCARD: Final = 'can not target wildcard ("*")namespace'
_TOO_LARGE: Final = "variables are limited to 64KiB in total size"


def _items_size(items: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in items.items())


def _validate_set(namespace: str, path: str, items: dict[str, str]) -> None:
    """``VariableDecrypted.Validate``, for a plain write."""
    if namespace == "*":
        raise _refused(_WILDCARD)
    if _items_size(items) > _MAX_ITEMS_SIZE:
        raise _refused(_TOO_LARGE)
    if problem := path_problem(path):
        raise _refused(problem)


def _validate_lock(namespace: str, path: str, items: dict[str, str], ttl_ns: int, delay_ns: int) -> None:
    """``VariableDecrypted.ValidateForLock``, for an acquire (the lock's defaults applied)."""
    if namespace == "*":
        raise _refused(multierror_text([_WILDCARD]))
    if _items_size(items) > _MAX_ITEMS_SIZE:
        raise _refused(_TOO_LARGE)
    if problem := path_problem(path):
        raise _refused(problem)
    problems = []
    if ttl_ns < 0 or delay_ns < 0:
        problems.append("Lock delay and TTL must be positive")
    if not MIN_LOCK_TTL_NS <= ttl_ns <= MAX_LOCK_TTL_NS:
        problems.append("TTL must be between 10 seconds and 24 hours")
    if problems:
        raise _refused(multierror_text(problems))


def _zero(namespace: str, path: str) -> dict[str, Any]:
    """The conflict Nomad answers when a check-and-set expected a variable that does not exist,
    and for a variable someone else's lock holds (its data is not shown)."""
    return variable_metadata(SimVariable(namespace=namespace, path=path))


def _locked(variable: SimVariable) -> Answer:
    """A write refused by another's lock: 409 with the zero variable, and index 0."""
    return Answer(409, _zero(variable.namespace, variable.path), 0)


class VariableService:
    """Variable writes and the leader's lock timers; one owner of ``state.variables``."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        # The leader's TTL timers and the delays of lapsed locks, by lock ID: cancel functions.
        self._ttl_timers: dict[str, Callable[[], None]] = {}
        self._delays: dict[str, Callable[[], None]] = {}

    # -- reads ----------------------------------------------------------------------------------

    def get(self, namespace: str, path: str) -> SimVariable | None:
        """The variable at ``path``, if any."""
        return self.state.variable((namespace, path))

    def listing(self, namespace: str, prefix: str) -> list[SimVariable]:
        """Variables whose path starts with ``prefix``, in one namespace or ``*`` for all, in
        (namespace, path) order as Nomad's index keeps them."""
        return sorted(
            (
                v
                for (ns, path), v in self.state.every_variable()
                if (namespace == "*" or ns == namespace) and path.startswith(prefix)
            ),
            key=lambda v: (v.namespace, v.path),
        )

    # -- plain writes ---------------------------------------------------------------------------

    def upsert(
        self, namespace: str, path: str, items: dict[str, str], *, lock_id: str, cas: int | None
    ) -> Answer:
        """Set the variable's items (``PUT /v1/var/:path``); ``lock_id`` is the caller's lock, ""
        if none; ``cas`` the check-and-set index, if any."""
        _validate_set(namespace, path, items)
        variable = self.get(namespace, path)
        if cas is not None and (conflict := self._cas_conflict(namespace, path, variable, cas)):
            return conflict
        if variable is not None and variable.lock is not None and variable.lock.id != lock_id:
            return _locked(variable)
        if lock_id and (variable is None or variable.lock is None):
            raise NomadError(400, "variable should not contain lock definition")
        with self.state.write(_MESSAGE) as tx:
            variable = self._write(tx, namespace, path, variable, items)
        return Answer(200, variable_full(variable), variable.modify_index)

    def delete(self, namespace: str, path: str, *, cas: int | None) -> Answer:
        """Delete the variable (``DELETE /v1/var/:path``): 204, also when there was none."""
        variable = self.get(namespace, path)
        if cas is not None and (conflict := self._cas_conflict(namespace, path, variable, cas)):
            return conflict
        if variable is not None and variable.lock is not None:
            return _locked(variable)
        with self.state.write(_MESSAGE) as tx:
            tx.applied = True
            if variable is not None:
                del self.state.variables[(namespace, path)]
                tx.variable_deleted = True
        return Answer(204, None, self.state.index)

    def _cas_conflict(
        self, namespace: str, path: str, variable: SimVariable | None, cas: int
    ) -> Answer | None:
        if variable is None:
            return Answer(409, _zero(namespace, path), 0) if cas != 0 else None
        return None if cas == variable.modify_index else self._conflict(variable)

    @staticmethod
    def _conflict(variable: SimVariable) -> Answer:
        return Answer(409, variable_full(variable), variable.modify_index)

    def _write(
        self,
        tx: Write,
        namespace: str,
        path: str,
        variable: SimVariable | None,
        items: dict[str, str] | None,
    ) -> SimVariable:
        """Create or update the variable in ``tx``: its items (None keeps them) and times."""
        now = self.state.now_ns()
        if variable is None:
            variable = SimVariable(namespace=namespace, path=path, create_time=now)
            self.state.variables[(namespace, path)] = variable
        if items is not None:
            variable.items = dict(items)
        variable.modify_time = now
        tx.touch_variable(variable)
        return variable

    # -- locks ----------------------------------------------------------------------------------

    def acquire(
        self,
        namespace: str,
        path: str,
        items: dict[str, str],
        *,
        ttl_ns: int,
        lock_delay_ns: int,
        lock_id: str = "",
    ) -> Answer:
        """Lock the variable, creating it if need be (``?lock-acquire``). Items given replace the
        variable's; none keep them. 409 with the variable while any lock is on it."""
        ttl_ns = ttl_ns or DEFAULT_LOCK_TTL_NS
        lock_delay_ns = lock_delay_ns or DEFAULT_LOCK_DELAY_NS
        _validate_lock(namespace, path, items, ttl_ns, lock_delay_ns)
        variable = self.get(namespace, path)
        if variable is not None and variable.lock is not None:
            return _locked(variable)
        lock = SimVariableLock(lock_id or self.state.new_id(), ttl_ns, lock_delay_ns)
        with self.state.write(_MESSAGE) as tx:
            variable = self._write(tx, namespace, path, variable, items or None)
            variable.lock = lock
        self._start_ttl_timer(variable)
        # The answer carries the items of the request, as Nomad's does.
        return Answer(200, variable_full(variable, items), variable.modify_index)

    def renew(self, namespace: str, path: str, lock_id: str) -> Answer:
        """Extend the lock's lease (``?lock-renew``): no Raft write, the leader's timer starts
        over. Refused once the lock lapsed, even while it still sits on the variable."""
        variable = self.get(namespace, path)
        if variable is None:
            raise NomadError(404, "variable doesn't exist")
        if variable.lock is None:
            raise NomadError(409, "variable doesn't hold a lock")
        if variable.lock.id != lock_id or lock_id not in self._ttl_timers:
            raise NomadError(409, "attempting to modify locked variable")
        self._ttl_timers.pop(lock_id)()
        self._start_ttl_timer(variable)
        return Answer(200, variable_metadata(variable), variable.modify_index)

    def release(self, namespace: str, path: str, lock_id: str) -> Answer:
        """Remove the lock (``?lock-release``) at once: LockDelay applies only to a lapsed lock. A
        bad path is Nomad's 400 with the bare message (the endpoint wraps this one only once)."""
        if problem := path_problem(path):
            raise NomadError(400, problem)
        variable = self.get(namespace, path)
        if variable is None:
            raise NomadError(404, "variable doesn't exist")
        if variable.lock is None:
            raise NomadError(409, "variable doesn't hold a lock")
        if variable.lock.id != lock_id:
            return _locked(variable)
        self._forget_timers(lock_id)
        with self.state.write(_MESSAGE) as tx:
            self._write(tx, namespace, path, variable, None)
            variable.lock = None
        return Answer(200, variable_full(variable, {}), variable.modify_index)

    # -- the leader's timers --------------------------------------------------------------------

    def _start_ttl_timer(self, variable: SimVariable) -> None:
        lock = variable.lock
        assert lock is not None
        key = (variable.namespace, variable.path)
        self._ttl_timers[lock.id] = self.state.call_later(
            _TTL_TIMER_FACTOR * lock.ttl_ns / _SECOND, lambda: self._lapse(key, lock)
        )

    def _lapse(self, key: VariableKey, lock: SimVariableLock) -> None:
        """The TTL timer fired: the lock is lost, and is removed once its delay has passed."""
        self._ttl_timers.pop(lock.id, None)
        self._delays[lock.id] = self.state.call_later(
            lock.lock_delay_ns / _SECOND, lambda: self._invalidate(key, lock.id)
        )

    def _invalidate(self, key: VariableKey, lock_id: str) -> None:
        """Remove a lapsed lock (its holder's ModifyTime is kept, as Nomad's expiry write keeps it)."""
        self._delays.pop(lock_id, None)
        variable = self.state.variable(key)
        if variable is None or variable.lock is None or variable.lock.id != lock_id:
            return
        with self.state.write(_MESSAGE) as tx:
            variable.lock = None
            tx.touch_variable(variable)

    def _forget_timers(self, lock_id: str) -> None:
        for timers in (self._ttl_timers, self._delays):
            cancel = timers.pop(lock_id, None)
            if cancel is not None:
                cancel()

    def stop_lock_timers(self) -> None:
        """The leader is gone: its timers (and the delays they started) go with its memory."""
        for lock_id in [*self._ttl_timers, *self._delays]:
            self._forget_timers(lock_id)

    def restore_lock_timers(self) -> None:
        """A new leader: a full TTL timer for every lock in the state, as ``restoreLockTTLTimers``."""
        for _, variable in self.state.every_variable():
            if variable.lock is not None and variable.lock.id not in self._ttl_timers:
                self._forget_timers(variable.lock.id)
                self._start_ttl_timer(variable)
