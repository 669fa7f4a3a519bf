"""The runner job's template file (``[nomad] job_template``) read, and the runner jobs it makes
checked by Nomad, once at startup and by ``supervisor check``.

A ``.json`` file holds a job in Nomad's API JSON, bare or as ``{"Job": ...}``; any other file is an
HCL2 jobspec, which Nomad itself parses (``POST /v1/jobs/parse``), so that the parsing is exactly
Nomad's, as Poseidon's ``templatejobfile`` is. Whatever cannot be read, parsed or made to carry a
runner is a ConfigError that names the file and what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson
import trio
from loguru import logger

from ..base.backoff import Backoff, BackoffPolicy
from ..base.errors import (
    ConfigError,
    NomadNotFound,
    NomadPermissionDenied,
    NomadRequestError,
    TerminalError,
    TransientError,
)
from ..core.config import Settings
from ..core.environments import ExecutionEnvironment, runner_job, template_job
from ..core.job_template import POSEIDON_TEMPLATE, JobShape, checked_template
from ..nomad.boundary import in_one_line

__all__ = ["JobChecker", "job_refusals", "job_shape", "read_job_template", "startup_job_shape"]

# The environment whose jobs stand for the template's when the configuration declares none.
SAMPLE_ENVIRONMENT = ExecutionEnvironment(
    0, "busybox:1", 0, 10.0, 64, network_access=True, exposed_ports=(80,)
)


def job_shape(settings: Settings, template: Mapping[str, Any] | None = None) -> JobShape:
    """The shape of the settings' runner jobs: ``template`` (the job template file's job, already
    read) or Poseidon's, ``[nomad.network]`` and ``[nomad] disable_force_pull``."""
    network = settings.nomad_network
    return JobShape.of(
        POSEIDON_TEMPLATE if template is None else template,
        network_mode=network.mode,
        dns_servers=network.dns_servers,
        dns_searches=network.dns_searches,
        dns_options=network.dns_options,
        disable_force_pull=settings.nomad.disable_force_pull,
    )


class JobChecker(Protocol):
    """The Nomad calls a job template needs."""

    async def parse_job(self, hcl: str) -> dict[str, Any]:
        """Nomad's parse of an HCL2 jobspec."""
        ...

    async def validate_job(self, job: Mapping[str, Any]) -> list[str]:
        """What Nomad finds wrong with the job."""
        ...


async def read_job_template(client: JobChecker, path: str) -> dict[str, Any]:
    """The template job of the file at ``path``, checked (``checked_template``)."""
    where = f"nomad.job_template {path}"
    try:
        text = await trio.Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: {getattr(exc, 'strerror', None) or exc}") from None
    if path.endswith(".json"):
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON: {exc}") from None
    else:
        try:
            document = await client.parse_job(text)
        except NomadPermissionDenied as exc:
            raise ConfigError(
                f"{where}: the token may not have Nomad parse it (parse-job): {in_one_line(exc.body) or exc}"
            ) from None
        except NomadRequestError as exc:
            raise ConfigError(f"{where}: Nomad cannot parse it: {in_one_line(exc.body) or exc}") from None
    return checked_template(document, where)


async def _parsed_with_patience(client: JobChecker, path: str) -> dict[str, Any]:
    """``read_job_template``, tried again while Nomad does not answer (an HCL file needs it)."""
    backoff = Backoff(BackoffPolicy(1.0, 30.0))
    while True:
        try:
            return await read_job_template(client, path)
        except TransientError as exc:
            delay = backoff.failed(trio.current_time())
            logger.warning("nomad.job_template {} not parsed yet ({}); retry in {:.1f}s", path, exc, delay)
            await trio.sleep(delay)


async def job_refusals(
    client: JobChecker, shape: JobShape, environments: tuple[ExecutionEnvironment, ...]
) -> list[str]:
    """For each environment's runner job and template job (of a sample environment with none),
    Nomad's first objection, as one line naming the job; empty when Nomad takes them all."""
    refusals = []
    for environment in environments or (SAMPLE_ENVIRONMENT,):
        what = f"environment {environment.id}" if environments else "the job template"
        runner = runner_job(environment, f"{environment.id}-check", force_pull=True, shape=shape)
        for job in (runner, template_job(environment, shape)):
            errors = await _objections(client, job)
            if errors:
                refusals.append(f"Nomad refuses the job {job['ID']} of {what}: {in_one_line(errors[0])}")
                break
    return refusals


async def _objections(client: JobChecker, job: Mapping[str, Any]) -> list[str]:
    """What Nomad finds wrong with the job; a job it cannot even decode (400) is refused too. A
    Nomad that cannot be asked (403, 404, 405) raises."""
    try:
        return await client.validate_job(job)
    except (NomadPermissionDenied, NomadNotFound):
        raise
    except NomadRequestError as exc:
        if exc.status_code == 405:
            raise
        return [exc.body or str(exc)]


async def startup_job_shape(client: JobChecker, settings: Settings) -> JobShape:
    """The shape of the daemon's runner jobs, its template file read (waiting for Nomad to parse
    HCL), and the jobs of the configured environments checked by Nomad: a job Nomad refuses is a
    ConfigError. A Nomad that cannot be asked (not answering, no such endpoint, no right to it)
    leaves them unchecked: the factory still reports a refused job as a fault."""
    path = settings.nomad.job_template
    shape = job_shape(settings, await _parsed_with_patience(client, path) if path else None)
    try:
        refusals = await job_refusals(client, shape, settings.environments)
    except (TransientError, TerminalError) as exc:
        logger.warning("the runner jobs were not checked by Nomad at startup: {}", exc)
        return shape
    if refusals:
        raise ConfigError(refusals[0])
    return shape
