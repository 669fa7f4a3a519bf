"""A canonical job's validation as Nomad 1.10.5's server does it at registration (the node pool hook,
``jobValidate``: ``structs.Job.Validate`` with its groups' and tasks' checks, then core type,
payload and priority), and go-multierror 1.1's text for the result.

Texts and order are the source's, for the checks that concern what the simulator models; a group's
errors are one error ``Task group g validation failed: <its own multierror text>``, a task's
likewise inside its group's. Checks of blocks the simulator keeps opaque (services, volumes,
vault, scaling, …) are not made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ..http.query import go_quote
from ..state.encode import go_duration

__all__ = ["job_problems", "multierror_text"]

_JOB_TYPES: Final = frozenset({"_core", "service", "batch", "system", "sysbatch"})
_NODE_POOLS: Final = frozenset({"default", "all"})
_DELAY_FUNCTIONS: Final = ("constant", "exponential", "fibonacci")
_SECOND: Final = 1_000_000_000
_MAX_PRIORITY: Final = 100


def multierror_text(errors: Sequence[str]) -> str:
    """go-multierror 1.1's ``ListFormatFunc``."""
    if len(errors) == 1:
        return f"1 error occurred:\n\t* {errors[0]}\n\n"
    points = "\n\t".join(f"* {e}" for e in errors)
    return f"{len(errors)} errors occurred:\n\t{points}\n\n"


def _restart_problems(policy: dict[str, Any]) -> list[str]:
    problems = []
    mode, attempts = policy["Mode"], policy["Attempts"]
    interval, delay = policy["Interval"], policy["Delay"]
    if mode not in ("delay", "fail"):
        problems.append(f"Unsupported restart mode: {go_quote(mode)}")
    if attempts == 0 and mode != "fail":
        problems.append(f"Restart policy {go_quote(mode)} with {attempts} attempts is ambiguous")
    if interval < 5 * _SECOND:
        problems.append(f"Interval can not be less than 5s (got {go_duration(interval)})")
    if attempts * delay > interval:
        problems.append(
            f"Nomad can't restart the TaskGroup {attempts} times in an interval of "
            f"{go_duration(interval)} with a delay of {go_duration(delay)}"
        )
    return problems


def _viable_attempts(policy: dict[str, Any]) -> tuple[bool, int, int]:
    """``ReschedulePolicy.viableAttempts``: ok, the attempts that fit, the interval they need."""
    attempts, interval, delay = policy["Attempts"], policy["Interval"], policy["Delay"]
    max_delay, function = policy["MaxDelay"], policy["DelayFunction"]
    if function == "constant":
        needed = attempts * delay
        return interval >= needed, (interval // delay if interval < needed else 0), needed
    if function == "exponential":
        possible, needed = 0, 0
        for i in range(attempts):
            next_delay = 2**i * delay
            if next_delay > max_delay:
                needed += max_delay
            else:
                needed = next_delay
            possible += needed < interval
        return possible >= attempts, possible, needed
    slots = [delay, delay]
    ceiling = False
    for i in range(2, attempts):
        step = slots[i - 1] + (max_delay if ceiling else slots[i - 2])
        if not ceiling and step > max_delay:
            step, ceiling = max_delay, True
        slots.append(step)
    needed = slots[-1]
    if interval >= needed:
        return True, 0, needed
    return False, next((i for i, s in enumerate(slots) if s > interval), 0), needed


def _reschedule_delay_problems(policy: dict[str, Any]) -> list[str]:
    ok, possible, needed = _viable_attempts(policy)
    if ok:
        return []
    interval, delay = go_duration(policy["Interval"]), go_duration(policy["Delay"])
    function = go_quote(policy["DelayFunction"])
    if policy["DelayFunction"] == "constant":
        first = (
            f"Nomad can only make {possible} attempts in {interval} with initial delay {delay} "
            f"and delay function {function}"
        )
    else:
        first = (
            f"Nomad can only make {possible} attempts in {interval} with initial delay {delay}, "
            f"delay function {function}, and delay ceiling {go_duration(policy['MaxDelay'])}"
        )
    rounded = (needed + _SECOND // 2) // _SECOND * _SECOND
    attempts = policy["Attempts"]
    return [first, f"Set the interval to at least {go_duration(rounded)} to accommodate {attempts} attempts"]


def _reschedule_problems(policy: dict[str, Any]) -> list[str]:
    attempts, unlimited = policy["Attempts"], policy["Unlimited"]
    if not (attempts > 0 or unlimited):
        return []
    problems = []
    interval, delay, max_delay = policy["Interval"], policy["Delay"], policy["MaxDelay"]
    if attempts > 0:
        if interval <= 0:
            problems.append("Interval must be a non zero value if Attempts > 0")
        if unlimited:
            problems.append(
                f"Reschedule Policy with Attempts = {attempts}, Interval = {go_duration(interval)}, "
                f"and Unlimited = {'true' if unlimited else 'false'} is ambiguous"
            )
            problems.append("If Attempts >0, Unlimited cannot also be set to true")
    delays_valid = True
    if delay < 5 * _SECOND:
        problems.append(f"Delay cannot be less than 5s (got {go_duration(delay)})")
        delays_valid = False
    if policy["DelayFunction"] not in _DELAY_FUNCTIONS:
        listed = "[" + " ".join(go_quote(f) for f in _DELAY_FUNCTIONS) + "]"
        problems.append(
            f"Invalid delay function {go_quote(policy['DelayFunction'])}, must be one of {listed}"
        )
        delays_valid = False
    if policy["DelayFunction"] != "constant":
        if max_delay < 5 * _SECOND:
            problems.append(f"Max Delay cannot be less than 5s (got {go_duration(delay)})")
            delays_valid = False
        if max_delay < delay:
            problems.append(
                f"Max Delay cannot be less than Delay {go_duration(delay)} (got {go_duration(max_delay)})"
            )
            delays_valid = False
    if not unlimited:
        if interval < 15 * _SECOND:
            problems.append(f"Interval cannot be less than 15s (got {go_duration(interval)})")
        if delays_valid:
            problems += _reschedule_delay_problems(policy)
    return problems


def _update_problems(update: dict[str, Any]) -> list[str]:
    problems = []
    d = {k: go_duration(v) for k, v in update.items() if k.endswith(("Time", "Deadline")) or k == "Stagger"}
    if update["HealthCheck"] not in ("checks", "task_states", "manual"):
        problems.append(f"Invalid health check given: {go_quote(update['HealthCheck'])}")
    if update["MaxParallel"] < 0:
        problems.append(f"Max parallel can not be less than zero: {update['MaxParallel']} < 0")
    if update["Canary"] < 0:
        problems.append(f"Canary count can not be less than zero: {update['Canary']} < 0")
    if update["Canary"] == 0 and update["AutoPromote"]:
        problems.append("Auto Promote requires a Canary count greater than zero")
    if update["MinHealthyTime"] < 0:
        problems.append(f"Minimum healthy time may not be less than zero: {d['MinHealthyTime']}")
    if update["HealthyDeadline"] <= 0:
        problems.append(f"Healthy deadline must be greater than zero: {d['HealthyDeadline']}")
    if update["ProgressDeadline"] < 0:
        problems.append(f"Progress deadline must be zero or greater: {d['ProgressDeadline']}")
    if update["MinHealthyTime"] >= update["HealthyDeadline"]:
        problems.append(
            "Minimum healthy time must be less than healthy deadline: "
            f"{d['MinHealthyTime']} > {d['HealthyDeadline']}"
        )
    if update["ProgressDeadline"] != 0 and update["HealthyDeadline"] >= update["ProgressDeadline"]:
        problems.append(
            "Healthy deadline must be less than progress deadline: "
            f"{d['HealthyDeadline']} > {d['ProgressDeadline']}"
        )
    if update["Stagger"] <= 0:
        problems.append(f"Stagger must be greater than zero: {d['Stagger']}")
    return problems


def _migrate_problems(migrate: dict[str, Any]) -> list[str]:
    problems = []
    if migrate["MaxParallel"] < 0:
        problems.append(f"MaxParallel must be >= 0 but found {migrate['MaxParallel']}")
    check = migrate["HealthCheck"]
    if check == "" and migrate["MaxParallel"] > 0:
        problems.append("Missing HealthCheck")
    elif check not in ("", "checks", "task_states"):
        problems.append(f"Invalid HealthCheck: {go_quote(check)}")
    if migrate["MinHealthyTime"] < 0:
        problems.append(f"MinHealthyTime is {go_duration(migrate['MinHealthyTime'])} and must be >= 0")
    if migrate["HealthyDeadline"] < 0:
        problems.append(f"HealthyDeadline is {go_duration(migrate['HealthyDeadline'])} and must be >= 0")
    if migrate["MinHealthyTime"] > migrate["HealthyDeadline"]:
        problems.append("MinHealthyTime must be less than HealthyDeadline")
    return problems


def _resources_problems(resources: dict[str, Any]) -> list[str]:
    problems = []
    cpu, cores, memory = resources["CPU"], resources["Cores"], resources["MemoryMB"]
    memory_max, secrets = resources["MemoryMaxMB"], resources["SecretsMB"]
    if cores > 0 and cpu > 0:
        problems.append("Task can only ask for 'cpu' or 'cores' resource, not both.")
    minimum = []
    if cpu < 1 and cores == 0:
        minimum.append(f"minimum CPU value is 1; got {cpu}")
    if memory < 10:
        minimum.append(f"minimum MemoryMB value is 10; got {memory}")
    if minimum:
        problems.append(multierror_text(minimum))
    if memory_max not in (0, -1) and memory_max < memory:
        problems.append(f"MemoryMaxMB value ({memory_max}) should be larger than MemoryMB value ({memory})")
    if secrets > memory:
        problems.append(f"SecretsMB value ({secrets}) cannot be larger than MemoryMB value ({memory})")
    if secrets < 0:
        problems.append(f"SecretsMB value ({secrets}) cannot be negative")
    return problems


def _log_problems(logs: dict[str, Any], disk: dict[str, Any]) -> list[str]:
    problems = []
    files, size = logs["MaxFiles"], logs["MaxFileSizeMB"]
    if files < 1:
        problems.append(f"minimum number of files is 1; got {files}")
    if size < 1:
        problems.append(f"minimum file size is 1MB; got {size}")
    if disk["SizeMB"] <= files * size:
        problems.append(
            f"log storage ({files * size} MB) must be less than requested disk capacity ({disk['SizeMB']} MB)"
        )
    return problems


def _task_problems(task: dict[str, Any], job_type: str, group: dict[str, Any]) -> list[str]:
    problems = []
    name = task["Name"]
    if not name:
        problems.append("Missing task name")
    if "/" in name or "\\" in name:
        problems.append("Task name cannot include slashes")
    elif "\0" in name:
        problems.append("Task name cannot include null characters")
    if not task["Driver"]:
        problems.append("Missing task driver")
    kill_timeout, update = task["KillTimeout"], group["Update"]
    if kill_timeout < 0:
        problems.append("KillTimeout must be a positive value")
    elif job_type == "service" and update and 0 < update["ProgressDeadline"] < kill_timeout:
        problems.append(
            f"KillTimout ({go_duration(kill_timeout)}) longer than the group's ProgressDeadline "
            f"({go_duration(update['ProgressDeadline'])})"
        )
    if task["ShutdownDelay"] < 0:
        problems.append("ShutdownDelay must be a positive value")
    if resources := _resources_problems(task["Resources"]):
        problems.append(multierror_text(resources))
    if logs := _log_problems(task["LogConfig"], group["EphemeralDisk"]):
        problems.append(multierror_text(logs))
    for number, constraint in enumerate(task["Constraints"] or [], start=1):
        if constraint["Operand"] in ("distinct_hosts", "distinct_property"):
            problems.append(
                f"Constraint {number} has disallowed Operand at task level: {constraint['Operand']}"
            )
    if job_type == "system" and task["Affinities"] is not None:
        problems.append("System jobs may not have an affinity block")
    return problems


def _group_policy_problems(group: dict[str, Any], job_type: str) -> list[str]:
    problems = _restart_problems(group["RestartPolicy"])
    if job_type == "system" and group["Spreads"] is not None:
        problems.append("System jobs may not have a spread block")
    reschedule = group["ReschedulePolicy"]
    if job_type == "system":
        if reschedule is not None:
            problems.append("System jobs should not have a reschedule policy")
    elif reschedule is not None:
        problems += _reschedule_problems(reschedule)
    else:
        problems.append(f"Task Group {group['Name']} should have a reschedule policy")
    if group["EphemeralDisk"]["SizeMB"] < 10:
        problems.append(f"minimum DiskMB value is 10; got {group['EphemeralDisk']['SizeMB']}")
    if (update := group["Update"]) is not None:
        if job_type not in ("service", "system"):
            problems.append(f"Job type {go_quote(job_type)} does not allow update block")
        problems += _update_problems(update)
    if group["Migrate"] is not None:
        if job_type == "service":
            problems += _migrate_problems(group["Migrate"])
        else:
            problems.append(f"Job type {go_quote(job_type)} does not allow migrate block")
    return problems


def _group_problems(group: dict[str, Any], job_type: str) -> list[str]:
    problems = []
    name = group["Name"]
    if not name:
        problems.append("Missing task group name")
    elif "\0" in name:
        problems.append("Task group name contains null character")
    if group["Count"] < 0:
        problems.append("Task group count can't be negative")
    tasks = group["Tasks"] or []
    if not tasks:
        problems.append("Missing tasks for task group")
    if job_type == "system" and group["Affinities"] is not None:
        problems.append("System jobs may not have an affinity block")
    problems += _group_policy_problems(group, job_type)
    seen: dict[str, int] = {}
    for number, task in enumerate(tasks, start=1):
        if not task["Name"]:
            problems.append(f"Task {number} missing name")
        elif task["Name"] in seen:
            problems.append(f"Task {number} redefines '{task['Name']}' from task {seen[task['Name']]}")
        else:
            seen[task["Name"]] = number
    if sum(1 for t in tasks if t["Leader"]) > 1:
        problems.append("Only one task may be marked as leader")
    for task in tasks:
        if task_problems := _task_problems(task, job_type, group):
            problems.append(f"Task {task['Name']} validation failed: {multierror_text(task_problems)}")
    return problems


def _identity_problems(job: dict[str, Any]) -> list[str]:
    problems = []
    job_id, name = job["ID"], job["Name"]
    if not job_id:
        problems.append("Missing job ID")
    elif " " in job_id:
        problems.append("Job ID contains a space")
    elif "\0" in job_id:
        problems.append("Job ID contains a null character")
    if not name:
        problems.append("Missing job name")
    elif "\0" in name:
        problems.append("Job Name contains a null character")
    job_type = job["Type"]
    if job_type == "":
        problems.append("Missing job type")
    elif job_type not in _JOB_TYPES:
        problems.append(f"Invalid job type: {go_quote(job_type)}")
    problems += ["Job datacenter must be non-empty string" for dc in job["Datacenters"] if dc == ""]
    return problems


def _structs_job_problems(job: dict[str, Any]) -> list[str]:
    """``structs.Job.Validate``."""
    problems = _identity_problems(job)
    groups = job["TaskGroups"] or []
    job_type = job["Type"]
    if not groups:
        problems.append("Missing job task groups")
    if job_type == "system":
        if job["Affinities"] is not None:
            problems.append("System jobs may not have an affinity block")
        if job["Spreads"] is not None:
            problems.append("System jobs may not have a spread block")
    seen: dict[str, int] = {}
    for number, group in enumerate(groups, start=1):
        name = group["Name"]
        if not name:
            problems.append(f"Job task group {number} missing name")
        elif name in seen:
            problems.append(f"Job task group {number} redefines '{name}' from group {seen[name]}")
        else:
            seen[name] = number
        if (group["ShutdownDelay"] or 0) < 0:
            problems.append("ShutdownDelay must be a positive value")
        if job_type == "system" and group["Count"] > 1:
            problems.append(
                f"Job task group {name} has count {group['Count']}. "
                "Count cannot exceed 1 with system scheduler"
            )
    for group in groups:
        if group_problems := _group_problems(group, job_type):
            problems.append(
                f"Task group {group['Name']} validation failed: {multierror_text(group_problems)}"
            )
    periodic = job["Periodic"] or {}
    if periodic.get("Enabled") and job_type not in ("batch", "sysbatch"):
        problems.append('Periodic can only be used with "batch" or "sysbatch" scheduler')
    return problems


def job_problems(job: dict[str, Any]) -> list[str]:
    """Every reason Nomad refuses the canonical ``job``, in the order its validators give them
    (empty when it takes it); ``multierror_text`` makes Nomad's 500 of them."""
    problems = []
    if job["NodePool"] not in _NODE_POOLS:
        problems.append(f"job {go_quote(job['ID'])} is in nonexistent node pool {go_quote(job['NodePool'])}")
    problems += _structs_job_problems(job)
    if job["Type"] == "_core":
        problems.append("job type cannot be core")
    if job["Payload"]:
        problems.append("job can't be submitted with a payload, only dispatched")
    if not 1 <= job["Priority"] <= _MAX_PRIORITY:
        problems.append(f"job priority must be between [1, {_MAX_PRIORITY}]")
    return problems
