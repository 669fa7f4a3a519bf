"""A pytest plugin for mutation runs (``-p tests.mutation_profile``, set in ``[tool.mutmut]``):
Hypothesis draws the same examples in every run and keeps no database, so that a mutant is killed or
survives alike however often and in whatever order the mutants run; and the property tests draw 25
examples each instead of hundreds (``HYPOTHESIS_MAX_EXAMPLES``, read when their modules are
imported, after this plugin), since each mutant runs them again.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

os.environ.setdefault("HYPOTHESIS_MAX_EXAMPLES", "25")
settings.register_profile("mutation", derandomize=True, database=None)


def pytest_configure(config: pytest.Config) -> None:
    settings.load_profile("mutation")
