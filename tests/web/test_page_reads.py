"""Page-shaped reads: the server page and the compare page each in one answer, decided on the
server; and the graph and matrix exports the server page links to."""

from __future__ import annotations

import csv
import io

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tests.web.conftest import (
    H200,
    RTX6000,
    RTX6000_P2P,
    V100,
    V100_OTHER_MESH,
    add,
    fixture_text,
)
from topoweb.analysis import services as analysis_services
from topoweb.analysis.models import Analysis
from topoweb.fleet.models import Server
from topoweb.fleet.services import BenchmarkInput
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db

L40S = "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt"


def analyse() -> None:
    """What the workers do after these ingests: each class analysed, then each server
    assessed (the assessment shows its class analysis)."""
    for pk in Analysis.objects.filter(status=Analysis.Status.PENDING).values_list("pk", flat=True):
        assert analysis_services.run_analysis(pk) == "done"
    for pk in Server.objects.values_list("pk", flat=True):
        evaluate_server(pk)


@pytest.fixture
def fleet() -> None:
    add("h200-01", H200, "HGX H200", "NVIDIA H200")
    add("v100-01", V100, "DGX-1V", "Tesla V100-SXM2-32GB")
    add("l40s-01", L40S, "L40S box", "NVIDIA L40S")
    add(
        "rtx-01",
        RTX6000,
        "ESC8000A",
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
    )
    analyse()


@pytest.fixture
def signed_in(client: Client, django_user_model) -> Client:  # type: ignore[no-untyped-def]
    client.force_login(django_user_model.objects.create_user("viewer"))
    return client


def test_the_server_page_reads_everything_it_shows_in_one_answer(
    reader: APIClient, fleet: None
) -> None:
    body = reader.get("/api/v1/servers/h200-01/page/").json()

    assert body["server"]["hostname"] == "h200-01"
    assert body["analysis"]["status"] == "done"
    assert len(body["graph"]["paths"]["GPU0"]) == 1 + 12  # its NVSwitch peers, then 12 NICs
    assert body["matrix"]["classes"][0][:2] == ["X", "NV18"]
    gpu0 = dict(body["devices"]["GPU0"]["rows"])
    assert gpu0["NUMA node"] == "NUMA node 0"
    assert gpu0["Nearest NIC"].endswith("(PXB)")
    assert gpu0["GPU peers"] == "NV18: 7"
    assert body["affinity"]["cuda_visible_devices"]
    # Layouts that fit in memory first, each group fastest first.
    order = [(doc["fits"] is False, doc["predicted_step_time_us"]) for doc in body["best_layouts"]]
    assert order == sorted(order) and 0 < len(order) <= 5
    assert set(body["recommendations"]) >= {"llama-7b"}
    assert [s["kind"] for s in body["plot"]["series"]][:1] == ["modelled"]
    assert body["history"][0]["changes"] is None  # the first snapshot
    assert {p["key"] for p in body["presets"]} >= {"llama-7b"}


def test_the_matrix_grades_measured_against_expected_on_the_server(
    reader: APIClient, fleet: None
) -> None:
    matrix = reader.get("/api/v1/servers/rtx-01/page/").json()["matrix"]
    uni = matrix["directions"]["uni"]
    gpus = [i for i, d in enumerate(matrix["devices"]) if d.startswith("GPU")]
    a, b = gpus[0], gpus[1]
    assert uni["measured_gbps"][a][b] > 0
    ratio = uni["measured_gbps"][a][b] / uni["expected_gbps"][a][b]
    assert uni["ratio"][a][b] == round(ratio, 3)
    assert uni["grade"][a][b] == ("good" if ratio >= 0.8 else "fair" if ratio >= 0.5 else "poor")
    assert uni["measured_gbps"][a][a] is None


def test_compare_decides_differences_and_which_side_is_ahead(
    reader: APIClient, fleet: None
) -> None:
    body = reader.get("/api/v1/compare/", {"a": "HGX H200", "b": "l40s-01"}).json()

    assert [s["heading"] for s in body["sides"]] == [
        "HGX H200 (SKU, via h200-01)",
        "l40s-01 (server)",
    ]
    rows = {r["label"]: r for r in body["rows"]}
    assert rows["GPU count"]["a"] == "8" and rows["GPU count"]["ahead"] == "a"
    assert rows["GPU count"]["ahead_mark"] == "▲ higher"
    assert rows["Largest NVLink domain"]["b"] == "none (no NVLink)"
    assert body["differences"] == sum(r["differs"] for r in body["rows"])
    assert all(s["graph"]["elements"] for s in body["sides"])
    assert body["sides"][0]["curve"]


def test_compare_marks_what_its_figures_assume(reader: APIClient, fleet: None) -> None:
    """Issue 27: every assumed fact on a page is marked. topo -m names neither the PCIe
    generation nor, without a reported model, the GPU: the rows say what was assumed."""
    add("v100-alt-01", V100_OTHER_MESH)  # no GPU model reported
    analyse()
    body = reader.get("/api/v1/compare/", {"a": "h200-01", "b": "v100-alt-01"}).json()
    rows = {r["label"]: r for r in body["rows"]}
    assert rows["GPU model"]["a"] == "H200"  # the part's one name; as reported in detail
    assert rows["GPU model"]["detail"]["a"] == "NVIDIA H200"
    assert rows["GPU model"]["b"].startswith("not reported (assuming ")
    assert rows["GPU model"]["b"].endswith(", assumed)")
    assert rows["PCIe generation"]["a"].startswith("Gen5 x16")
    for side in ("a", "b"):
        assert rows["PCIe generation"][side].endswith(", assumed from the GPU generation")


def test_compare_names_each_sides_own_gpus_where_two_skus_share_a_class(
    reader: APIClient, fleet: None
) -> None:
    """An HGX H100 and an HGX H200 are wired alike: one class, analysed for the H200 that
    came first. Each side of the comparison names its own GPUs, and its layout is its own."""
    add("h100-01", H200, "HGX H100", "NVIDIA H100 80GB HBM3")
    analyse()
    assert Server.objects.get(hostname="h100-01").topology_class_id == (
        Server.objects.get(hostname="h200-01").topology_class_id
    )
    body = reader.get("/api/v1/compare/", {"a": "HGX H100", "b": "HGX H200"}).json()
    rows = {r["label"]: r for r in body["rows"]}
    assert (rows["GPU model"]["a"], rows["GPU model"]["b"]) == ("H100", "H200")
    assert rows["GPU model"]["detail"]["a"] == "NVIDIA H100 80GB HBM3"
    assert rows["GPU model"]["differs"]


def test_compare_never_reads_a_servers_health_documents(reader: APIClient, fleet: None) -> None:
    # A 576-GPU server's health row holds megabytes (its page's document, every pair's
    # expectation): the compare page counts findings, it never reads them.
    with CaptureQueriesContext(connection) as queries:
        body = reader.get("/api/v1/compare/", {"a": "h200-01", "b": "l40s-01"}).json()
    rows = {r["label"]: r for r in body["rows"]}
    assert rows["Findings"]["a"] is not None and rows["Findings"]["b"] is not None
    health = [q["sql"] for q in queries.captured_queries if '"health_serverhealth"' in q["sql"]]
    assert health  # it asks whether each server was evaluated
    for column in ("document", "acceptance", "expectations"):
        assert not any(f'"health_serverhealth"."{column}"' in sql for sql in health), column


def test_compare_without_two_names_answers_the_choices_only(reader: APIClient, fleet: None) -> None:
    body = reader.get("/api/v1/compare/", {"a": "HGX H200"}).json()
    assert body["sides"] == [] and body["rows"] == []
    assert {"name": "HGX H200", "server_count": 1} in body["skus"]


def test_the_graph_exports_as_the_same_svg_every_time(signed_in: Client, fleet: None) -> None:
    first = signed_in.get("/servers/v100-01/graph.svg")
    again = signed_in.get("/servers/v100-01/graph.svg")

    assert first["Content-Type"].startswith("image/svg+xml")
    assert first.content == again.content
    assert first.content.decode().count('class="node gpu"') == 8


def test_the_matrix_exports_as_csv_in_each_mode(signed_in: Client, fleet: None) -> None:
    classes = signed_in.get("/servers/h200-01/matrix.csv")
    rows = list(csv.reader(io.StringIO(classes.content.decode())))
    assert rows[0][:3] == ["", "GPU0", "GPU1"]
    assert rows[1][:3] == ["GPU0", "X", "NV18"]

    measured = signed_in.get("/servers/rtx-01/matrix.csv", {"mode": "measured"})
    rows = list(csv.reader(io.StringIO(measured.content.decode())))
    assert float(rows[1][2]) > 0

    bad = signed_in.get("/servers/h200-01/matrix.csv", {"mode": "nonsense"})
    assert bad.status_code == 400
    assert b"mode must be" in bad.content


def test_exports_of_a_server_without_topology_are_404(signed_in: Client) -> None:
    assert signed_in.get("/servers/nobody/graph.svg").status_code == 404
