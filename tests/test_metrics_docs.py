"""docs/metrics.md lists every family a scrape of the active daemon serves, and names none that it
does not: the alert rules and dashboards are written against that page.

Rules of these tests: they run in trio (pytest-trio's ``trio_mode``) with no I/O: the runner service
stands on a Nomad double.
"""

from __future__ import annotations

import re
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

from supervisor.core.config import Settings
from supervisor.desk.service import RunnerService
from supervisor.ops.metrics import DaemonMetrics

from .nomad_double import NomadDouble

_PAGE = Path(__file__).parents[1] / "docs" / "metrics.md"
_SUFFIXES = {"counter": "_total", "info": "_info"}


async def test_the_page_lists_every_family_of_ours_and_no_other(nursery: trio.Nursery) -> None:
    service = RunnerService(NomadDouble(), Settings(), execution_nursery=nursery)
    text = DaemonMetrics(lambda: service).exposition().decode()
    served = {
        family.name + _SUFFIXES.get(family.type, "")
        for family in text_string_to_metric_families(text)
        if family.name.startswith("supervisor_")
    }
    page = _PAGE.read_text()
    documented = set(re.findall(r"`(supervisor_[a-z_]+)(?:\{[^}]*\})?`", page))
    assert served - documented == set(), "served, not documented"
    assert documented - served == set(), "documented, not served"
