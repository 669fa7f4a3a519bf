"""The monitoring files hold together without a Prometheus: the dashboard is one Grafana imports
(its data source a variable, every query scoped by the job and environment variables, no panel on
another), and every alert rule has promtool tests and a section in docs/monitoring.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
MONITORING: Final = ROOT / "scripts" / "monitoring"
DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
# Families with an environment label: a panel over one of them follows the environment variable.
BY_ENVIRONMENT: Final = re.compile(
    r"supervisor_(runners|runners_target|executions_total|execution_duration_seconds|claims_total|"
    r"claim_duration_seconds|file_transfer_bytes_total|file_transfers_total)(_bucket|_sum|_count)?\{"
)
# Panels of the whole deployment, whatever environments are chosen.
ALL_ENVIRONMENTS: Final = {"Environments"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return loaded


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


def test_the_dashboard_is_of_grafana_10_and_11(dashboard: dict[str, Any]) -> None:
    # Grafana 10.4 and 11 write schema 39, and migrate older ones on import.
    assert dashboard["schemaVersion"] == 39
    assert dashboard["uid"] == "nomad-runner-supervisor"
    assert dashboard["id"] is None  # an import gets a fresh id


def test_the_data_source_and_the_environment_are_variables(dashboard: dict[str, Any]) -> None:
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    environment = variables["environment"]
    assert environment["type"] == "query"
    assert environment["datasource"] == DATASOURCE
    assert environment["definition"].startswith("label_values(supervisor_runners_target")
    assert environment["multi"]
    assert environment["includeAll"]
    assert variables["job"]["definition"] == "label_values(supervisor_build_info, job)"


def test_every_query_reads_the_variables(dashboard: dict[str, Any]) -> None:
    for panel in panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            expr = target["expr"]
            assert 'job=~"$job"' in expr, (panel["title"], expr)
            if panel["title"] in ALL_ENVIRONMENTS:
                continue
            for selector in BY_ENVIRONMENT.finditer(expr):
                rest = expr[selector.end() : expr.index("}", selector.end())]
                assert 'environment=~"$environment"' in rest, (panel["title"], expr)


def test_panels_tile_the_grid(dashboard: dict[str, Any]) -> None:
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        place = panel["gridPos"]
        assert place["x"] + place["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(place["x"], place["x"] + place["w"])
            for y in range(place["y"], place["y"] + place["h"])
        }
        assert not cells & taken, f"{panel['title']} lies on another panel"
        taken |= cells


def test_every_rule_is_tested_and_documented() -> None:
    rules = re.findall(r"^\s+- alert: (\w+)$", (MONITORING / "alerts.yml").read_text(), flags=re.MULTILINE)
    tested = set(re.findall(r"alertname: (\w+)", (MONITORING / "alerts.test.yml").read_text()))
    documented = set(
        re.findall(r"^### `(\w+)`", (ROOT / "docs" / "monitoring.md").read_text(), flags=re.MULTILINE)
    )
    assert len(rules) == len(set(rules)) >= 9
    assert set(rules) == tested
    assert set(rules) == documented
