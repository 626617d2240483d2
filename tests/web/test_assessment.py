"""A server's assessment: one stored document per server, computed by the worker, that every
page, export and API answer reads. One GPU pair has one expectation wherever it is shown."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.web.conftest import H200 as H200_TOPO
from tests.web.conftest import add, fixture_text, report, wait_for
from topoweb.analysis import selectors as analysis_selectors
from topoweb.analysis import services as analysis_services
from topoweb.analysis.models import Analysis
from topoweb.fleet.models import Benchmark, Server
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db


def _demo_fleet() -> list[Server]:
    call_command("load_demo", stdout=io.StringIO(), stderr=io.StringIO())
    for pk in Analysis.objects.filter(status=Analysis.Status.PENDING).values_list("pk", flat=True):
        analysis_services.run_analysis(pk)
    servers = list(Server.objects.filter(labels__has_key="fixture").order_by("hostname"))
    for server in servers:
        evaluate_server(server.pk)
    return servers


def _finding_expectations(findings: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Each ordered pair's expected GB/s as a below-expected finding states it."""
    out = {}
    for f in findings:
        if f["kind"] != "below_expected_bandwidth" or "directions" not in f["evidence"]:
            continue
        for pair, ev in f["evidence"]["directions"].items():
            a, b = pair.split("->")
            if ev.get("expected_gbps") is not None:
                out[(a, b)] = ev["expected_gbps"]
    return out


def test_every_gpu_pair_of_every_demo_server_has_one_expectation_on_every_page(
    reader: APIClient,
) -> None:
    compared = 0
    for server in _demo_fleet():
        host = server.hostname
        page = reader.get(f"/api/v1/servers/{host}/page/").json()
        acceptance = reader.get(f"/api/v1/servers/{host}/acceptance/").json()
        rows = {
            tuple(r["devices"]): r
            for r in acceptance["rows"]
            if r["kind"] == "p2p" and r["expected_gbps"] is not None
        }
        for pair, expected in _finding_expectations(page["findings"]).items():
            assert rows[pair]["expected_gbps"] == expected, (host, pair, "finding vs acceptance")
            compared += 1
        matrix = page["matrix"]
        ids = matrix["devices"]
        uni = matrix["directions"].get("uni")
        if uni is None:
            continue
        for (a, b), row in rows.items():
            i, j = ids.index(a), ids.index(b)
            if uni["measured_gbps"][i][j] is None:
                continue
            assert uni["expected_gbps"] is not None, (host, "matrix without expectations")
            assert uni["expected_gbps"][i][j] == row["expected_gbps"], (host, a, b, "matrix")
            assert uni["ratio"][i][j] == row["ratio"], (host, a, b, "matrix ratio")
            compared += 1
    # The demo's measured pairs (the GTX rig, the RTX 6000 Ada servers) were all compared.
    assert compared >= 40


A100_TOPO = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
A100_NCCL = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"


def _served(reader: APIClient, host: str, ready: Any) -> Any:
    """The page once its stored assessment is current and `ready(page)` holds."""

    def page() -> Any:
        body = reader.get(f"/api/v1/servers/{host}/page/").json()
        assessed = "assessment" not in body["left_out"] and not body["stale"]
        return body if assessed and body["analysis"] and ready(body) else None

    return wait_for(page, timeout=180)


def _curves(page: dict[str, Any]) -> list[str]:
    return [s["label"] for s in page["plot"]["series"]]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_benchmark_uploaded_after_the_class_analysis_changes_the_served_analysis_and_curves(
    celery_worker: Any, collector_client: Any, person: APIClient, reader: APIClient
) -> None:
    host = "dgx-a100-w01"
    sent = collector_client(host).post("/api/v1/reports", report(host, A100_TOPO), format="json")
    assert sent.status_code == 201
    before = _served(reader, host, lambda p: p["analysis"]["status"] == "done")
    assert before["analysis"]["calibrated_by"] == []
    assert not any("calibrated" in label for label in _curves(before))

    upload = person.post(
        "/api/v1/uploads/", {"hostname": host, "text": fixture_text(A100_NCCL)}, format="json"
    )
    assert upload.status_code == 201, upload.content
    run = Benchmark.objects.get(server__hostname=host)

    # The run queued the class's analysis again; its servers' assessments follow it.
    after = _served(reader, host, lambda p: p["analysis"]["calibrated_by"] == [run.pk])
    assert after["analysis"]["status"] == "done"
    curves = _curves(after)
    assert "modelled all_reduce, calibrated on measurements" in curves
    assert f"measured all_reduce, 8 GPUs (run {run.pk})" in curves
    analysis = Analysis.objects.get(topology_class__servers__hostname=host)
    assert analysis.result["calibration"]["benchmarks"] == [run.pk]
    assert analysis.attempts == 1  # queued again once, not once per reader


def test_a_server_of_other_gpus_than_its_class_analysis_priced_gets_advice_for_its_own(
    reader: APIClient,
) -> None:
    """An H100 board and an H200 board are wired alike: one class, whose analysis prices the
    GPU of its first server. The H200 server's layouts and recommendations are priced for
    H200s (141 GB each), not the class's H100s."""
    add("hgx-h100-01", H200_TOPO, model="NVIDIA H100 80GB HBM3")
    add("hgx-h200-01", H200_TOPO, model="NVIDIA H200")
    servers = list(Server.objects.order_by("hostname"))
    assert len({s.topology_class_id for s in servers}) == 1
    for pk in Analysis.objects.values_list("pk", flat=True):
        analysis_services.run_analysis(pk)
    for server in servers:
        evaluate_server(server.pk)
    priced = {}
    for host in ("hgx-h100-01", "hgx-h200-01"):
        page = reader.get(f"/api/v1/servers/{host}/page/").json()
        names = {layout["gpu"]["name"] for layout in page["best_layouts"]}
        names |= {rec["gpu"]["name"] for rec in page["recommendations"].values()}
        priced[host] = names
    assert priced == {"hgx-h100-01": {"H100 SXM"}, "hgx-h200-01": {"H200"}}


def test_a_class_analysis_reads_the_calibrations_fitted_at_ingest_and_names_its_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.utils import timezone

    from topoweb.fleet.models import Source
    from topoweb.fleet.services import BenchmarkInput, ingest_report

    done = ingest_report(
        hostname="dgx-a100-c01",
        topo_text=fixture_text(A100_TOPO),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        benchmarks=[BenchmarkInput("nccl-tests", fixture_text(A100_NCCL))],
    )
    run = Benchmark.objects.get()
    assert run.calibration is not None and "scale" in run.calibration  # fitted at ingest

    def no_fitting(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a run was fitted again after ingest")

    monkeypatch.setattr("topoweb.core.analysis.calibration_from", no_fitting)
    analysis = analysis_services.current_analysis_for(done.server.topology_class)
    assert analysis_services.run_analysis(analysis.pk) == "done"

    analysis.refresh_from_db()
    assert analysis.result["calibration"]["applied"] is True
    assert analysis.result["calibration"]["scale"] == run.calibration["scale"]
    assert analysis.result["calibration"]["benchmarks"] == [run.pk]
    # Its runs are what it was computed from: nothing to queue until they change.
    assert list(analysis_selectors.analyses_behind_their_runs()) == []
    Benchmark.objects.filter(pk=run.pk).delete()
    assert list(analysis_selectors.analyses_behind_their_runs()) == [analysis]


def test_a_placement_answer_is_kept_in_djangos_cache(
    reader: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.cache import cache, caches
    from django.utils import timezone

    from topoweb.analysis import questions
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report

    ingest_report(
        hostname="dgx-a100-p01",
        topo_text=fixture_text(A100_TOPO),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    computed: list[int] = []
    real = questions.place

    def counted(*args: Any, **kwargs: Any) -> Any:
        computed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(questions, "place", counted)
    ask = {"tp": 4, "pp": 2, "dp": 1}
    url = "/api/v1/servers/dgx-a100-p01/placement"
    first = reader.post(url, ask, format="json")
    again = reader.post(url, ask, format="json")

    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() and computed == [1]
    # The cache framework holds it (each process's own copy in front of the shared cache):
    # both cleared, it is computed again.
    cache.clear()
    caches["answers"].clear()
    assert reader.post(url, ask, format="json").json() == first.json()
    assert computed == [1, 1]


def test_the_acceptance_report_of_a_large_server_counts_what_it_does_not_list(
    reader: APIClient, client: Any, django_user_model: Any
) -> None:
    from django.utils import timezone

    from tests import synthetic
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report
    from topoweb.health.assessment import ACCEPTANCE_ROWS, PAIRS_NAMED

    done = ingest_report(
        hostname="nvl72-01",
        topo_text=synthetic.nvswitch_domain(72),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    evaluate_server(done.server.pk)

    body = reader.get("/api/v1/servers/nvl72-01/acceptance/").json()

    pairs = 72 * 71
    assert pairs > ACCEPTANCE_ROWS
    assert all(r["kind"] == "busbw" for r in body["rows"])  # nothing measured: no pair listed
    assert body["rows_left_out"]["count"] == pairs
    assert (
        f"{pairs:,} of {pairs + len(body['rows']):,} rows not listed"
        in (body["rows_left_out"]["note"])
    )
    (nv18,) = [g for g in body["not_measured"] if g["kind"] == "p2p"]
    assert nv18["count"] == pairs and len(nv18["pairs"]) == PAIRS_NAMED
    assert nv18["pairs_left_out"] == pairs - PAIRS_NAMED
    assert body["summary"]["not_measured"] >= pairs
    client.force_login(django_user_model.objects.create_user("viewer"))
    page = client.get("/servers/nvl72-01/acceptance/")
    assert page.status_code == 200 and b"rows not listed" in page.content


def test_a_large_servers_graph_is_never_drawn_in_a_request(
    reader: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.cache import cache
    from django.utils import timezone

    from tests import synthetic
    from topoweb.fleet import selectors as fleet_selectors
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report

    done = ingest_report(
        hostname="nvl72-02",
        topo_text=synthetic.nvswitch_domain(72),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    cache.clear()
    real = fleet_selectors.graph_document
    drawn: list[int] = []
    monkeypatch.setattr(
        fleet_selectors,
        "graph_document",
        lambda topo, **kw: drawn.append(1) or real(topo, **kw),
    )

    before = reader.get("/api/v1/servers/nvl72-02/graph/")
    assert before.status_code == 409 and "not drawn yet" in before.json()["error"]["message"]
    assert drawn == []
    evaluate_server(done.server.pk)  # the worker draws it once
    assert drawn == [1]
    after = reader.get("/api/v1/servers/nvl72-02/graph/")
    assert after.status_code == 200
    assert sum(e["data"].get("kind") == "gpu" for e in after.json()["elements"]) == 72
    assert drawn == [1]
