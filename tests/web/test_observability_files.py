"""deploy/: the Prometheus alert rules and the Grafana dashboard, loaded by the tools that read
them (promtool from Debian's prometheus package checks and unit-tests the rules, and parses
every dashboard query), the dashboard checked against a schema, and every topoweb series either
names checked against a real scrape of /metrics."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import FIXTURES, report
from tests.web.test_health_api import scaled_busbw
from topoweb.analysis.services import publish_analysis_counts
from topoweb.fleet.models import Server
from topoweb.health import tasks
from topoweb.health.services import evaluate_server

ROOT = Path(__file__).resolve().parent.parent.parent
RULES = ROOT / "deploy" / "prometheus" / "topoweb-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "topoweb-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "topoweb-fleet.json"
PROMTOOL = "/usr/bin/promtool"  # Debian's prometheus package (`make test` installs it)
TOKEN = "metrics-token-for-observability-tests"
OURS = re.compile(r"\b((?:topoweb|django_http)_[a-z_]+)\b")

# What Grafana needs of an imported dashboard, and what this one promises: every panel reads
# the chosen Prometheus through the `datasource` variable, with a query and a place.
DASHBOARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "templating"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name", "type"]},
                    "contains": {
                        "properties": {
                            "name": {"const": "datasource"},
                            "type": {"const": "datasource"},
                            "query": {"const": "prometheus"},
                        }
                    },
                }
            },
        },
        "panels": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["id", "type", "title", "gridPos", "datasource", "targets"],
                "properties": {
                    "id": {"type": "integer"},
                    "type": {"enum": ["stat", "table", "timeseries", "gauge", "bargauge"]},
                    "datasource": {"$ref": "#/$defs/datasource"},
                    "gridPos": {
                        "type": "object",
                        "required": ["h", "w", "x", "y"],
                        "properties": {
                            "w": {"type": "integer", "minimum": 1, "maximum": 24},
                            "x": {"type": "integer", "minimum": 0, "maximum": 23},
                        },
                    },
                    "targets": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["refId", "expr", "datasource"],
                            "properties": {
                                "expr": {"type": "string", "minLength": 1},
                                "datasource": {"$ref": "#/$defs/datasource"},
                            },
                        },
                    },
                },
            },
        },
    },
    "$defs": {
        "datasource": {
            "type": "object",
            "required": ["type", "uid"],
            "properties": {"type": {"const": "prometheus"}, "uid": {"const": "${datasource}"}},
        }
    },
}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def dashboard_queries() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


def alert_queries() -> list[str]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule["expr"] for group in document["groups"] for rule in group["rules"]]


def test_the_alert_rules_load_in_promtool() -> None:
    checked = promtool("check", "rules", RULES.name, cwd=RULES.parent)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout
    names = [rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"]
             for rule in group["rules"]]  # fmt: skip
    assert names == [
        "TopowebCollectorSilent",
        "TopowebCriticalFinding",
        "TopowebAnalysisBacklog",
        "TopowebIngestErrors",
        "TopowebSweepsStopped",
    ]


def test_each_alert_fires_on_the_series_that_should_raise_it_and_not_otherwise() -> None:
    tested = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)

    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_dashboard_matches_its_schema() -> None:
    jsonschema.validate(dashboard(), DASHBOARD_SCHEMA)
    ids = [panel["id"] for panel in dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def test_every_dashboard_query_parses_as_promql(tmp_path: Path) -> None:
    # promtool parses PromQL in rule files: each query becomes a recording rule, with the
    # dashboard's variable as Grafana would expand "All".
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{n}", "expr": expr.replace("$Hostname", ".*")}
                    for n, expr in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    (tmp_path / "dashboard-rules.yml").write_text(yaml.safe_dump(rules), encoding="utf-8")

    checked = promtool("check", "rules", "dashboard-rules.yml", cwd=tmp_path)

    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.django_db
def test_every_topoweb_series_the_rules_and_dashboard_read_is_one_topoweb_serves(
    settings: Any, client: Any, collector_client: Any
) -> None:
    settings.TOPOWEB_METRICS_TOKEN = TOKEN
    body = json.loads(
        (FIXTURES / "device_01_h200-1gpu-firecracker-vm-collector-dryrun.json").read_text()
    )
    collector_client(body["hostname"]).post("/api/v1/reports", body, format="json")
    collector_client("gpu-o01").post("/api/v1/reports", report("gpu-o02"), format="json")  # refused
    evaluate_server(Server.objects.get(hostname=body["hostname"]).pk)
    # A measured collective at half its expected busbw: a finding, and bandwidth series.
    sweep = (FIXTURES / "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt").read_text()
    collector_client("gpu-o03").post(
        "/api/v1/reports",
        report(
            "gpu-o03",
            "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt",
            benchmarks=[{"kind": "nccl-tests", "text": scaled_busbw(sweep, 0.5)}],
        ),
        format="json",
    )
    evaluate_server(Server.objects.get(hostname="gpu-o03").pk)
    tasks.sweep()
    publish_analysis_counts()

    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    served = {
        sample.name
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }

    read = {name for expr in dashboard_queries() + alert_queries() for name in OURS.findall(expr)}
    assert read - served == set()
    # And the other way: no family of the fleet's gauges is left off the dashboard.
    fleet = {name for name in served if name.startswith(("topoweb_server_", "topoweb_gpu_"))}
    assert fleet - read <= {"topoweb_server_gpus", "topoweb_server_nics"}


@pytest.mark.django_db
def test_every_served_metric_name_passes_promtools_lint_but_the_dcgm_exporter_labels(
    settings: Any, client: Any, collector_client: Any
) -> None:
    """`promtool check metrics` lints a scrape for Prometheus' naming conventions (units as
    suffixes, `_total` on counters, no `_count`/`_sum` gauges, snake_case). The one thing it
    may say is that the per-GPU series carry dcgm-exporter's own label names (`modelName`,
    `UUID`): kept on purpose, so that PromQL joins them with dcgm-exporter's series."""
    settings.TOPOWEB_METRICS_TOKEN = TOKEN
    body = json.loads(
        (FIXTURES / "device_01_h200-1gpu-firecracker-vm-collector-dryrun.json").read_text()
    )
    collector_client(body["hostname"]).post("/api/v1/reports", body, format="json")
    evaluate_server(Server.objects.get(hostname=body["hostname"]).pk)
    tasks.sweep()
    publish_analysis_counts()
    scraped = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    families = {f.name: f.type for f in text_string_to_metric_families(scraped)}
    assert "topoweb_gpu_nvlinks_up" in families  # the per-GPU series is in what is linted

    linted = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=scraped, capture_output=True, text=True, timeout=60
    )

    problems = set((linted.stdout + linted.stderr).splitlines())
    assert problems <= {
        "topoweb_gpu_nvlinks_up label names should be written in 'snake_case' not 'camelCase'"
    }, sorted(problems)
    # The two conventions issue 29 names: a point in time ends `_timestamp_seconds`, and the
    # request series are HTTP's.
    ours = [name for name in families if name.startswith("topoweb_")]
    assert [n for n in ours if re.search(r"time|_at(_|$)", n)] == [
        n for n in ours if n.endswith("_timestamp_seconds")
    ]
    assert "django_http_requests_latency_seconds_by_view_method" in families
    assert families["django_http_requests_latency_seconds_by_view_method"] == "histogram"
