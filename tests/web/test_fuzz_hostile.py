"""Fuzzing ingest end to end (issue 24 item 13): reports drawn by Hypothesis over the report
and upload schemas (times, NVML and host facts, names and cells in the matrix, benchmark
numbers), plus the named hostile cases of the issue. Each is posted; when it is stored, the
host's evaluation and class analysis run as the worker runs them, then every page, export and
question for the host is read. Any 5xx, or any read over 2 s, fails."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from tests import synthetic
from tests.web.conftest import collector_client_for, fixture_text, report, uploader
from topoweb.analysis import services as analysis_services
from topoweb.analysis.models import Analysis
from topoweb.fleet.models import Server
from topoweb.health import services as health_services

pytestmark = pytest.mark.django_db

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
NCCL = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"
READ_LIMIT_S = 2.0
EXPORTS = ("nccl-xml", "gres", "k8s-labels", "kubectl")


@pytest.fixture
def clients(django_user_model: Any) -> Iterator[tuple[APIClient, Client]]:
    from topoweb.fleet.access import create_api_token

    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {create_api_token('fuzz')}")
    person = Client()
    person.force_login(
        uploader(django_user_model.objects.create_user("fuzz-person", password="pw"))
    )
    yield reader, person


def timed(call: Any, what: str, limit: float = READ_LIMIT_S) -> Any:
    started = time.monotonic()
    response = call()
    took = time.monotonic() - started
    assert response.status_code < 500, (what, response.status_code, response.content[:300])
    assert took < limit, f"{what} took {took:.2f} s"
    return response


# The workers' part is run here for servers this small (larger ones are read as the pages
# serve them before their worker has run: pending); the suite must stay well under a minute.
ANALYSE_UP_TO_GPUS = 8
EVALUATE_UP_TO_GPUS = 48


def work_done(hostname: str) -> None:
    """What the workers would do after the report: the class analysis and the evaluation."""
    server = Server.objects.select_related("latest_snapshot").get(hostname=hostname)
    gpus = server.latest_snapshot.gpu_count if server.latest_snapshot else 0
    if gpus <= ANALYSE_UP_TO_GPUS:
        for analysis in Analysis.objects.filter(status=Analysis.Status.PENDING):
            analysis_services.run_analysis(analysis.pk)
    if gpus <= EVALUATE_UP_TO_GPUS:
        started = time.monotonic()
        health_services.evaluate_server(server.pk)
        assert time.monotonic() - started < 30, "the evaluation ran away"


def read_everything(hostname: str, reader: APIClient, person: Client) -> None:
    api = f"/api/v1/servers/{hostname}"
    for path in (
        f"{api}/",
        f"{api}/page/",
        f"{api}/graph/",
        f"{api}/snapshots/",
        f"{api}/affinity/",
        f"{api}/cost-tables/",
        f"{api}/acceptance/",
        f"{api}/recommendation/",
        *(f"{api}/export/{fmt}/" for fmt in EXPORTS),
        "/api/v1/servers/",
        "/api/v1/skus/",
        "/api/v1/exports/topology.conf/",
    ):
        timed(lambda path=path: reader.get(path), path)
    for path in (
        f"/servers/{hostname}/",
        f"/servers/{hostname}/graph.svg",
        f"/servers/{hostname}/matrix.csv",
        f"/servers/{hostname}/acceptance/",
        "/",
    ):
        timed(lambda path=path: person.get(path), path)
    for path, body in (
        (f"{api}/cost/", {"collective": "all_reduce", "gpus": [0, 1], "bytes": 1 << 20}),
        (f"{api}/placement/", {}),
        ("/api/v1/placement/select/", {"k": 2}),
    ):
        timed(lambda path=path, body=body: reader.post(path, body, format="json"), path)


def post_and_read(body: dict[str, Any], reader: APIClient, person: Client) -> int:
    hostname = body["hostname"]
    client = collector_client_for(hostname)
    # The upload itself is judged for errors only here; its time is bench/ingest_large.py's.
    # Encoded as a careless collector would (Python's json writes Infinity for an infinite
    # float, which is not JSON): the API must refuse that, not the test's own encoder.
    response = timed(
        lambda: client.post("/api/v1/reports", json.dumps(body), content_type="application/json"),
        "report",
        limit=60.0,
    )
    if response.status_code in (200, 201):
        work_done(hostname)
        read_everything(hostname, reader, person)
    return int(response.status_code)


# --- drawn reports ------------------------------------------------------------------------

MARKUP = st.sampled_from(["<b>", "</x>", '"', "&amp;", "\n", "x" * 300, "-1", "0-99999999999"])
ODD_TEXT = st.one_of(MARKUP, st.text(max_size=20))
ODD_NUMBER = st.one_of(
    st.integers(-(2**90), 2**90), st.floats(allow_nan=False), st.sampled_from([0, -16, 2**80])
)
ODD_VALUE = st.one_of(ODD_NUMBER, ODD_TEXT, st.none(), st.booleans())
TIMES = st.one_of(
    st.sampled_from(
        ["0001-01-01T00:00:00Z", "2026-11-29T10:00:00", "2026-11-29T10:00:00Z", "9999-12-31"]
    ),
    st.datetimes().map(lambda d: d.isoformat()),
)


@st.composite
def reports(draw: st.DrawFn) -> dict[str, Any]:
    text = fixture_text(H200)
    # One cell, affinity or name of the matrix replaced by something odd.
    target = draw(st.sampled_from(["0-55,112-167", "mlx5_0", "NV18", "NIC11", "PXB", "\t0\t"]))
    text = text.replace(target, draw(ODD_TEXT) or target, 1)
    gpu = {
        key: draw(ODD_VALUE)
        for key in draw(
            st.sets(
                st.sampled_from(["index", "memory_total_bytes", "name", "pci_bus_id", "uuid"]),
                max_size=3,
            )
        )
    }
    gpus = [{"index": i, "name": "NVIDIA H200"} for i in range(draw(st.integers(0, 9)))]
    if gpus:
        gpus[0] |= gpu
        gpus[0]["pcie"] = {"current_width": draw(ODD_VALUE)}
    body = report(
        "fuzz-01",
        topo_text=text,
        captured_at=draw(TIMES),
        nvml={"available": True, "gpus": gpus},
        host={
            "product_name": draw(ODD_TEXT),
            "rdma_nics": [
                {"device": draw(ODD_TEXT), "numa_node": draw(ODD_VALUE)}
                for _ in range(draw(st.integers(0, 3)))
            ],
        },
    )
    if draw(st.booleans()):
        row = "16384          4096     float     sum      -1    32.48    0.50    0.88"
        nccl = fixture_text(NCCL).replace(row, row.replace("0.88", draw(MARKUP)), 1)
        body["benchmarks"] = [{"kind": "nccl-tests", "text": nccl}]
    return body


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=reports())
def test_a_drawn_report_is_refused_or_stored_and_then_read_without_a_5xx(
    body: dict[str, Any], clients: tuple[APIClient, Client]
) -> None:
    post_and_read(body, *clients)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=st.one_of(st.text(max_size=200), st.sampled_from(["<system>", "GPU0\tX\n"])))
def test_a_drawn_upload_or_preview_never_answers_5xx(
    text: str, clients: tuple[APIClient, Client]
) -> None:
    _, person = clients
    for path, data in (
        ("/api/v1/uploads/preview/", {"text": text}),
        ("/api/v1/uploads/", {"hostname": "fuzz-up", "text": text, "create": True}),
    ):
        timed(lambda path=path, data=data: person.post(path, data), path, limit=60.0)


# --- the named cases ----------------------------------------------------------------------


def named_cases() -> dict[str, list[dict[str, Any]]]:
    """The issue's cases, each a sequence of reports for one host."""
    h200 = fixture_text(H200)
    return {
        "8 GPUs then 24": [
            report("named-01", topo_text=synthetic.nvswitch_domain(8)),
            report(
                "named-01",
                topo_text=synthetic.nvswitch_domain(24),
                captured_at="2026-11-29T11:00:00Z",
            ),
        ],
        "another SKU's product name": [
            report("named-02", H200, host={"product_name": "HGX H200 8-GPU"}),
            report(
                "named-03",
                topo_text=synthetic.nvswitch_domain(45),
                host={"product_name": "HGX H200 8-GPU"},
            ),
        ],
        "an XML of 256 GPUs x 18 NVLinks": [
            report("named-04", topo_text=synthetic.nccl_xml(256, nvlinks=18))
        ],
        "CPU affinity 0-999999999999": [
            report("named-05", topo_text=h200.replace("0-55,112-167", "0-999999999999"))
        ],
        "a legend name with markup": [
            report("named-06", topo_text=h200.replace("NIC0: mlx5_0", "NIC0: <mlx5_0>"))
        ],
        "2^80-byte GPU memory": [
            report("named-07", H200, nvml={"gpus": [{"index": 0, "memory_total_bytes": 2**80}]})
        ],
        "10,000 rdma_nics": [
            report("named-08", H200, host={"rdma_nics": [{"device": "mlx5_0"}] * 10_000})
        ],
    }


@pytest.mark.parametrize(
    "case",
    list(named_cases()),
)
def test_a_named_hostile_case_never_answers_5xx_nor_reads_slowly(
    case: str, clients: tuple[APIClient, Client]
) -> None:
    for body in named_cases()[case]:
        post_and_read(body, *clients)


def test_a_report_holding_an_infinite_number_is_refused_not_a_5xx(
    clients: tuple[APIClient, Client],
) -> None:
    # What Hypothesis drew once: Python's json writes an infinite float as Infinity, which
    # is not JSON; the API answers 400 and stores nothing.
    gpus = [{"index": 0, "name": "NVIDIA H200", "memory_total_bytes": float("inf")}]
    body = report("fuzz-inf", topo_text=fixture_text(H200), nvml={"available": True, "gpus": gpus})
    assert post_and_read(body, *clients) == 400
    assert not Server.objects.filter(hostname="fuzz-inf").exists()
