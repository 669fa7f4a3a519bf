"""A pytest plugin for mutation runs (``-p tests.mutation_profile``, set in ``[tool.mutmut]``):
Hypothesis draws the same examples in every run and keeps no database, so that a mutant is killed or
survives alike however often and in whatever order the mutants run.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

settings.register_profile("mutation", derandomize=True, database=None)


def pytest_configure(config: pytest.Config) -> None:
    settings.load_profile("mutation")
