"""Ingest through HTTP: collector reports, manual uploads and the management commands, with the
database state each leaves behind."""

from __future__ import annotations

import functools
import importlib
import io
import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from tests.core.topo_fixtures import glued_h200
from tests.web.conftest import (
    H200,
    RTX6000,
    RTX6000_P2P,
    V100,
    V100_OTHER_MESH,
    collector_client_for,
    collector_tokens_last_used,
    fixture_text,
    keep_tasks_here,
    report,
    uploader,
)
from topoweb.analysis.models import Analysis
from topoweb.fleet import work
from topoweb.fleet.access import create_collector_token, revoke_collector_token
from topoweb.fleet.models import (
    AuditEvent,
    Benchmark,
    CollectorToken,
    QueuedWork,
    Server,
    Snapshot,
    Source,
    TopologyClass,
)
from topoweb.fleet.services import BenchmarkInput, ingest_report

pytestmark = pytest.mark.django_db

# The shape the collector sends (collector/nvml.py); one GPU's name call failed.
NVML_H200 = {
    "available": True,
    "driver_version": "560.35.03",
    "gpus": [{"index": i, "name": "NVIDIA H200"} for i in range(7)]
    + [{"index": 7, "name": "error: Unknown Error"}],
}


def post_report(client: APIClient, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/reports", body, format="json")


def test_a_new_report_answers_201_and_keeps_the_text_verbatim_with_its_summary(
    collector_client: Any,
) -> None:
    body = report("gpu-a01", H200, nvml=NVML_H200, host={"product_name": "HGX H200 8-GPU"})
    response = post_report(collector_client("gpu-a01"), body)

    assert response.status_code == 201
    snapshot = Snapshot.objects.get()
    assert response.json() == {
        "id": snapshot.pk,
        "kind": "topology",
        "hostname": "gpu-a01",
        "created": True,
        "warnings": [],
    }
    assert snapshot.raw_text == fixture_text(H200)
    assert snapshot.source == "collector"
    assert (snapshot.gpu_count, snapshot.nic_count) == (8, 12)
    assert snapshot.gpu_model == "NVIDIA H200"
    assert snapshot.has_nvlink is True
    assert snapshot.nvlink_summary == "NV18 x28"  # NVSwitch: every one of the 28 GPU pairs
    assert [d["id"] for d in snapshot.document["devices"]][:9] == [
        "GPU0",
        "GPU1",
        "GPU2",
        "GPU3",
        "GPU4",
        "GPU5",
        "GPU6",
        "GPU7",
        "NIC0",
    ]
    server = Server.objects.get()
    assert server.sku_name == "HGX H200 8-GPU"
    assert server.latest_snapshot == snapshot
    assert server.topology_class == snapshot.topology_class
    assert snapshot.topology_class.sku_name == "HGX H200 8-GPU"
    # The analysis waits for the commit to be enqueued; it exists, pending, from the start.
    assert Analysis.objects.get().status == "pending"


def test_the_same_report_again_answers_200_with_the_stored_snapshot(collector_client: Any) -> None:
    client = collector_client("gpu-a01")
    first = post_report(client, report("gpu-a01", H200))
    again = post_report(client, report("gpu-a01", H200, captured_at="2026-11-29T11:00:00Z"))

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["created"] is False
    assert Snapshot.objects.count() == 1
    assert TopologyClass.objects.count() == 1
    assert Analysis.objects.count() == 1


def test_servers_wired_the_same_share_one_topology_class(collector_client: Any) -> None:
    for host in ("gpu-a01", "gpu-a02"):
        assert post_report(collector_client(host), report(host, H200)).status_code == 201
    post_report(collector_client("gpu-v01"), report("gpu-v01", V100))

    assert Snapshot.objects.count() == 3
    assert TopologyClass.objects.count() == 2
    a01, a02, v01 = Server.objects.order_by("hostname")
    assert a01.topology_class == a02.topology_class != v01.topology_class


def test_it_rejects_a_report_for_another_server(collector_client: Any) -> None:
    response = post_report(collector_client("gpu-a01"), report("gpu-b02", H200))

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert "'gpu-a01'" in response.json()["error"]["message"]
    assert not Server.objects.exists()


@pytest.mark.parametrize("header", [None, "Bearer twc_not-a-real-token", "Token abc"])
def test_a_missing_or_unknown_token_answers_401(header: str | None) -> None:
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = post_report(client, report("gpu-a01", H200))

    assert response.status_code == 401
    assert response.json()["error"]["code"] in ("not_authenticated", "authentication_failed")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Snapshot.objects.exists()


def test_a_revoked_token_answers_401_and_the_token_records_its_last_use() -> None:
    token = create_collector_token("gpu-a01")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert post_report(client, report("gpu-a01", H200)).status_code == 201
    stored = CollectorToken.objects.get()
    assert stored.last_used_at is not None
    secret = token.partition(".")[2]  # the package's key: "<prefix>.<secret>"
    assert secret and secret not in stored.pk + stored.hashed_key

    revoke_collector_token(stored)
    response = post_report(client, report("gpu-a01", V100))

    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Unknown or revoked collector token."
    assert Snapshot.objects.count() == 1


def test_an_oversize_report_answers_413_and_stores_nothing(
    collector_client: Any, settings: Any
) -> None:
    settings.TOPOWEB_MAX_REPORT_BYTES = 2000
    response = post_report(collector_client("gpu-a01"), report("gpu-a01", H200))

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"
    assert "the limit is 2000" in response.json()["error"]["message"]
    assert not Server.objects.exists()


def test_a_truncated_matrix_answers_400_naming_the_line_and_stores_nothing(
    collector_client: Any,
) -> None:
    lines = fixture_text(H200).splitlines(keepends=True)
    truncated = "".join(lines[:5])  # the header and the first GPU rows only
    response = post_report(
        collector_client("gpu-a01"), report("gpu-a01", H200, topo_text=truncated)
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert error["line"] == 6  # just past the last row the paste kept
    assert error["message"].startswith("the matrix is truncated: the header on line 2 names GPU3")
    assert not Server.objects.exists()
    assert not Snapshot.objects.exists()
    assert not TopologyClass.objects.exists()


def test_an_unreadable_benchmark_rejects_the_whole_report(collector_client: Any) -> None:
    body = report(
        "gpu-r01",
        RTX6000,
        benchmarks=[{"kind": "p2p-bandwidth-latency", "text": "P2P Connectivity Matrix\n oops\n"}],
    )
    response = post_report(collector_client("gpu-r01"), body)

    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("benchmarks[0] (p2p-bandwidth-latency): ")
    assert not Server.objects.exists()
    assert not Benchmark.objects.exists()


def test_a_report_with_a_bad_field_answers_400_listing_the_field(collector_client: Any) -> None:
    body = report("gpu-a01", H200, captured_at="yesterday")
    response = post_report(collector_client("gpu-a01"), body)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert list(response.json()["error"]["details"]) == ["captured_at"]


@pytest.mark.parametrize("url", ["/api/v1/reports", "/api/v1/uploads"])
def test_a_body_nested_past_the_parsers_depth_answers_400_and_stores_nothing(
    collector_client: Any, django_user_model: Any, url: str
) -> None:
    client = collector_client("gpu-a01")
    if url == "/api/v1/uploads":
        client = APIClient()
        client.force_authenticate(uploader(django_user_model.objects.create_user("uploader")))
    client.raise_request_exception = False
    deep = "[" * 100_000 + "]" * 100_000
    body = json.dumps(report("gpu-a01", H200))[:-1] + f', "nvml": {deep}}}'

    response = client.post(url, body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"
    assert "nested too deeply" in response.json()["error"]["message"]
    assert not Server.objects.exists()


@pytest.mark.parametrize(
    ("field", "raw_json", "problem"),
    [
        ("nvml", '{"gpus": [{"name": "a\\u0000b"}]}', "Null characters"),
        ("nvml", '{"gpus": [{"name": "\\ud800"}]}', "surrogate"),
        ("host", '{"\\udfff": "x"}', "surrogate"),
        ("nvml", '{"pcie": {"gen": 1e999}}', "finite"),
        ("nvml", '{"a": ' + "[" * 100 + "]" * 100 + "}", "Nested more than 32"),
    ],
)
def test_facts_postgresql_cannot_store_answer_400_naming_the_field_and_store_nothing(
    collector_client: Any, field: str, raw_json: str, problem: str
) -> None:
    client = collector_client("gpu-a01")
    client.raise_request_exception = False
    body = json.dumps(report("gpu-a01", H200))[:-1] + f', "{field}": {raw_json}}}'

    response = client.post("/api/v1/reports", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert problem in response.json()["error"]["details"][field][0]
    assert not Server.objects.exists()


def test_names_longer_than_their_columns_are_stored_cut_to_fit(collector_client: Any) -> None:
    # The free-form texts fill summary columns of 200 (GPU model) and 64 (collective)
    # characters; past those, PostgreSQL refused the row with a 500.
    long_gpu = "NVIDIA H200 " + "x" * 300
    nccl = fixture_text("nccl_01_a100-40gb-2node-16gpu-allreduce-10G-single-size.txt")
    long_binary = "./build/" + "a" * 80 + "_perf"
    body = report(
        "gpu-a01",
        H200,
        nvml={"gpus": [{"index": 0, "name": long_gpu}]},
        benchmarks=[
            {"kind": "nccl-tests", "text": nccl.replace("./build/all_reduce_perf", long_binary)}
        ],
    )

    response = post_report(collector_client("gpu-a01"), body)

    assert response.status_code == 201
    assert Snapshot.objects.get().gpu_model == long_gpu[:200]
    assert Benchmark.objects.get().collective == "a" * 64
    assert Benchmark.objects.get().document["collective"] == "a" * 80  # the document keeps it


def test_benchmarks_in_a_report_are_stored_linked_to_its_snapshot(collector_client: Any) -> None:
    body = report(
        "gpu-r01",
        RTX6000,
        benchmarks=[{"kind": "p2p-bandwidth-latency", "text": fixture_text(RTX6000_P2P)}],
    )
    response = post_report(collector_client("gpu-r01"), body)

    assert response.status_code == 201
    benchmark = Benchmark.objects.get()
    assert benchmark.snapshot_id == response.json()["id"]
    assert benchmark.kind == "p2p-bandwidth-latency"
    assert benchmark.gpu_count == 4
    assert benchmark.raw_text == fixture_text(RTX6000_P2P)
    # With no NVML facts, the GPU model comes from the benchmark's own device list.
    assert Snapshot.objects.get().gpu_model == "NVIDIA RTX 6000 Ada Generation"


def test_the_captures_benchmarks_name_the_gpu_model_before_the_uploaders_field() -> None:
    ingest_report(
        hostname="gpu-r02",
        topo_text=fixture_text(RTX6000),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
        gpu_model_hint="RTX 6000 Ada 4-GPU server",  # a SKU-like guess typed by a person
    )

    assert Snapshot.objects.get().gpu_model == "NVIDIA RTX 6000 Ada Generation"


def test_a_benchmark_names_the_model_of_a_snapshot_that_had_none(person: APIClient) -> None:
    person.post(
        "/api/v1/uploads", {"hostname": "lab-r", "text": fixture_text(RTX6000), "create": True}
    )
    assert Snapshot.objects.get().gpu_model == ""
    person.post("/api/v1/uploads", {"hostname": "lab-r", "text": fixture_text(RTX6000_P2P)})

    assert Snapshot.objects.get().gpu_model == "NVIDIA RTX 6000 Ada Generation"
    assert TopologyClass.objects.get().gpu_model == "NVIDIA RTX 6000 Ada Generation"


def test_a_benchmark_upload_answers_with_its_readers_warnings(person: APIClient) -> None:
    person.post(
        "/api/v1/uploads", {"hostname": "lab-r", "text": fixture_text(RTX6000), "create": True}
    )
    nccl = fixture_text("nccl_11_rtx2080ti-2gpu-allreduce-g2-trailing-ws-stripped.txt")
    # A log holding a p2pBandwidthLatencyTest run and an nccl-tests run: the p2p one is read.
    pasted = fixture_text(RTX6000_P2P) + "\n" + nccl
    response = person.post("/api/v1/uploads", {"hostname": "lab-r", "text": pasted})

    assert response.status_code == 201 and response.json()["kind"] == "p2p-bandwidth-latency"
    line = (
        fixture_text(RTX6000_P2P).count("\n")
        + 2
        + nccl.split("\n").index(next(ln for ln in nccl.split("\n") if "nThread" in ln))
    )
    assert response.json()["warnings"] == [
        f"line {line} starts nccl-tests output, which was not read: upload it on its own"
    ]


def test_re_uploading_a_capture_keeps_the_gpu_model_nvml_gave(
    collector_client: Any, person: APIClient
) -> None:
    post_report(collector_client("gpu-a01"), report("gpu-a01", H200, nvml=NVML_H200))
    again = person.post("/api/v1/uploads", {"hostname": "gpu-a01", "text": fixture_text(H200)})

    assert again.status_code == 201  # a new snapshot: no NVML facts this time
    assert Server.objects.get().latest_snapshot.gpu_model == "NVIDIA H200"


def test_a_late_report_of_an_older_capture_does_not_replace_the_latest(
    collector_client: Any,
) -> None:
    client = collector_client("gpu-a01")
    new = post_report(client, report("gpu-a01", H200, captured_at="2026-11-29T10:00:00Z"))
    old = post_report(client, report("gpu-a01", V100, captured_at="2026-11-28T10:00:00Z"))

    assert (new.status_code, old.status_code) == (201, 201)
    assert Server.objects.get().latest_snapshot_id == new.json()["id"]


def test_a_server_wired_unlike_its_sku_siblings_is_a_finding(collector_client: Any) -> None:
    for host, topo in (("v-01", V100), ("v-02", V100), ("v-03", V100_OTHER_MESH)):
        body = report(host, topo, host={"product_name": "DGX-1V"})
        assert post_report(collector_client(host), body).status_code == 201

    differing = Server.objects.filter(differs_from_sku=True)
    assert [s.hostname for s in differing] == ["v-03"]


def test_ingest_is_throttled_per_token_counting_new_reports_only(
    collector_client: Any, settings: Any
) -> None:
    cache.clear()
    settings.TOPOWEB_INGEST_RATE = "2/min"
    client = collector_client("gpu-a01")
    kernels = ["6.8.0", "6.8.0", "6.8.0", "6.8.1", "6.8.1", "6.8.2"]
    codes = [
        post_report(client, report("gpu-a01", H200, host={"kernel": k})).status_code
        for k in kernels
    ]

    # Duplicates store nothing and are not counted; the third new report is over budget and
    # is not stored.
    assert codes == [201, 200, 200, 201, 200, 429]
    assert Snapshot.objects.filter(server__hostname="gpu-a01").count() == 2
    other = collector_client("gpu-a02")  # another token's budget is its own
    assert post_report(other, report("gpu-a02", H200)).status_code == 201
    cache.clear()


# --- manual upload -------------------------------------------------------------------------


def test_a_signed_in_user_uploads_a_topology_file(person: APIClient) -> None:
    upload = io.BytesIO(fixture_text(V100).encode())
    upload.name = "topo.txt"
    response = person.post(
        "/api/v1/uploads",
        {"hostname": "lab-v100", "file": upload, "gpu_model": "Tesla V100", "create": True},
    )

    assert response.status_code == 201
    snapshot = Snapshot.objects.get()
    assert response.json()["kind"] == "topology"
    assert snapshot.source == "upload"
    assert snapshot.uploaded_by.username == "ana"
    assert snapshot.gpu_model == "Tesla V100"
    assert snapshot.raw_text == fixture_text(V100)


def test_an_uploaded_p2p_output_is_recognised_and_linked_to_the_current_snapshot(
    person: APIClient,
) -> None:
    topo = person.post(
        "/api/v1/uploads", {"hostname": "lab-r", "text": fixture_text(RTX6000), "create": True}
    )
    p2p = person.post("/api/v1/uploads", {"hostname": "lab-r", "text": fixture_text(RTX6000_P2P)})

    assert (topo.status_code, p2p.status_code) == (201, 201)
    assert p2p.json()["kind"] == "p2p-bandwidth-latency"
    assert Benchmark.objects.get().snapshot_id == topo.json()["id"]


def test_an_upload_to_an_unknown_hostname_without_create_is_refused_naming_the_host(
    person: APIClient,
) -> None:
    response = person.post("/api/v1/uploads", {"hostname": "lab-v10O", "text": fixture_text(V100)})

    assert response.status_code == 400
    message = response.json()["error"]["details"]["hostname"][0]
    assert "No server named 'lab-v10O'" in message and "create" in message
    assert not Server.objects.exists()


def test_a_mistyped_hostname_is_refused_with_the_name_it_is_closest_to(
    person: APIClient,
) -> None:
    """Issue 27 item 7: Save said no without a "did you mean" (the preview says it too)."""
    made = person.post(
        "/api/v1/uploads", {"hostname": "lab-v100", "text": fixture_text(V100), "create": True}
    )
    response = person.post("/api/v1/uploads", {"hostname": "lab-v10O", "text": fixture_text(V100)})

    assert (made.status_code, response.status_code) == (201, 400)
    message = response.json()["error"]["details"]["hostname"][0]
    assert "No server named 'lab-v10O': did you mean 'lab-v100'?" in message
    assert list(Server.objects.values_list("hostname", flat=True)) == ["lab-v100"]


def test_the_preview_draws_for_the_gpu_model_the_upload_will_record(person: APIClient) -> None:
    """The L40S capture names no GPU: told it is a Tesla P40 box, the preview draws the
    socket link of the generation the saved page will show (Pascal's Intel QPI), not the
    guess from the matrix alone (Ada's AMD xGMI)."""
    text = fixture_text("topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt")

    def socket_link(**extra: str) -> str:
        answer = person.post("/api/v1/uploads/preview", {"text": text, **extra})
        assert answer.status_code == 200
        (label,) = [
            e["data"]["label"]
            for e in answer.json()["elements"]
            if e["data"].get("link_class") == "SYS"
        ]
        return str(label)

    assert socket_link() == "AMD xGMI (Zen3-4) (assumed)"
    assert socket_link(gpu_model="Tesla P40") == "Intel QPI (Broadwell) (assumed)"
    saved = person.post(
        "/api/v1/uploads",
        {"hostname": "p40-u01", "text": text, "gpu_model": "Tesla P40", "create": True},
    )
    assert saved.status_code == 201
    graph = person.get("/api/v1/servers/p40-u01/graph/").json()
    drawn = [e["data"]["label"] for e in graph["elements"] if e["data"].get("link_class") == "SYS"]
    assert drawn == ["Intel QPI (Broadwell) (assumed)"]


def test_an_upload_answers_the_readers_warnings_listed(person: APIClient) -> None:
    response = person.post(
        "/api/v1/uploads", {"hostname": "lab-h200", "text": glued_h200(), "create": True}
    )

    assert response.status_code == 201
    warnings = response.json()["warnings"]
    assert len(warnings) == 8
    assert "read as CPUs 0-45,92-137 on NUMA node 0" in warnings[0]
    again = person.post("/api/v1/uploads", {"hostname": "lab-h200", "text": glued_h200()})
    assert (again.status_code, again.json()["warnings"]) == (200, warnings)


def test_an_unreadable_upload_answers_400_with_the_line(person: APIClient) -> None:
    response = person.post(
        "/api/v1/uploads", {"hostname": "lab-x", "text": "hello\nthis is not a topology\n"}
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"
    assert not Server.objects.exists()


def test_a_binary_file_upload_answers_400_naming_the_line(person: APIClient) -> None:
    upload = io.BytesIO(b"GPU0\tGPU1\nabc\x00def\n")
    upload.name = "blob.bin"
    response = person.post("/api/v1/uploads", {"hostname": "lab-x", "file": upload})

    assert response.status_code == 400
    assert response.json()["error"]["line"] == 2


def test_an_anonymous_upload_answers_401() -> None:
    response = APIClient().post("/api/v1/uploads", {"hostname": "x", "text": fixture_text(V100)})

    assert response.status_code == 401
    assert not Server.objects.exists()


# --- management commands -----------------------------------------------------------------


def test_create_collector_token_prints_a_token_that_writes_that_host_only() -> None:
    out = io.StringIO()
    call_command("create_collector_token", "gpu-c01", stdout=out, stderr=io.StringIO())
    token = out.getvalue().strip().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    assert post_report(client, report("gpu-c01", H200)).status_code == 201
    assert post_report(client, report("gpu-c02", H200)).status_code == 403


def test_create_api_token_creates_the_user_and_the_token_reads_the_api(
    django_user_model: Any,
) -> None:
    out = io.StringIO()
    call_command("create_api_token", "slurm", stdout=out, stderr=io.StringIO())
    token = out.getvalue().strip().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    assert django_user_model.objects.get(username="slurm").has_usable_password() is False
    assert client.get("/api/v1/servers/").status_code == 200


def test_import_topo_prints_the_readers_warnings(tmp_path: Any) -> None:
    path = tmp_path / "topo.txt"
    path.write_text(glued_h200())
    out = io.StringIO()
    call_command("import_topo", str(path), "--host", "lab-h200", stdout=out)

    lines = out.getvalue().splitlines()
    assert len(lines) == 9
    assert lines[1].startswith(f"{path}: reader warning: line 3: GPU0: CPU Affinity and NUMA")


def test_import_topo_refuses_a_hostname_no_page_url_could_carry(tmp_path: Any) -> None:
    path = tmp_path / "topo.txt"
    path.write_text(fixture_text(V100))
    with pytest.raises(CommandError, match="--host 'rack 3/node 1': a hostname is letters"):
        call_command("import_topo", str(path), "--host", "rack 3/node 1", stdout=io.StringIO())
    assert not Server.objects.exists()


def test_import_topo_stores_a_snapshot_once(tmp_path: Any) -> None:
    path = tmp_path / "topo.txt"
    path.write_text(fixture_text(V100))
    out = io.StringIO()
    call_command("import_topo", str(path), "--host", "lab-v100", stdout=out)
    call_command("import_topo", str(path), "--host", "lab-v100", stdout=out)

    snapshot = Snapshot.objects.get()
    assert out.getvalue().splitlines() == [
        f"{path}: stored as new snapshot {snapshot.pk} of lab-v100",
        f"{path}: already stored as snapshot {snapshot.pk} of lab-v100",
    ]
    assert snapshot.gpu_count == 8


@pytest.mark.django_db(transaction=True)
def test_two_odd_servers_of_a_sku_reporting_at_once_both_get_201(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each ingest re-flags the SKU's odd servers while holding its own server row. Collectors
    report on the same schedule; two odd servers' transactions flagging each other's rows
    deadlocked, and PostgreSQL failed one of them (a 500). Ingests of one SKU now take turns:
    the second starts its SKU work only after the first committed."""

    from topoweb.fleet import services

    _keep_tasks_off_the_broker(monkeypatch)
    sku = {"product_name": "DGX-1V"}
    for name in ("usual-1", "usual-2", "usual-3"):
        post_report(collector_client_for(name), report(name, V100, host=sku))
    clients = {name: collector_client_for(name) for name in ("odd-1", "odd-2")}
    for name, client in clients.items():
        assert post_report(client, report(name, V100_OTHER_MESH, host=sku)).status_code == 201
    assert set(Server.objects.filter(differs_from_sku=True).values_list("hostname", flat=True)) == {
        "odd-1",
        "odd-2",
    }

    spans: list[tuple[str, float, float]] = []
    original = services.refresh_sku_drift

    def slow_refresh(sku_name: str) -> list[int]:
        # Runs with the SKU's turn held: a second ingest of the SKU must wait for it to end.
        started = time.monotonic()
        time.sleep(0.3)
        changed = original(sku_name)
        spans.append((threading.current_thread().name, started, time.monotonic()))
        return changed

    monkeypatch.setattr(services, "refresh_sku_drift", slow_refresh)
    statuses: dict[str, int] = {}

    def send(name: str) -> None:
        clients[name].raise_request_exception = False
        nvml = {"available": True, "driver_version": "570.1", "gpus": []}
        body = report(name, V100_OTHER_MESH, host=sku, nvml=nvml)
        statuses[name] = post_report(clients[name], body).status_code

    _at_once(*(functools.partial(send, name) for name in clients))

    first, second = sorted(spans, key=lambda span: span[1])
    assert second[1] >= first[2]  # the second refresh began after the first one ended
    assert statuses == {"odd-1": 201, "odd-2": 201}
    assert Snapshot.objects.filter(server__hostname__startswith="odd-").count() == 4


def _at_once(*works: Callable[[], None]) -> None:
    """Each of `works` in a thread of its own, all started before any is awaited; each thread
    has its own database connection, closed when its work ends."""
    from django.db import connections

    def run(work: Callable[[], None]) -> None:
        try:
            work()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(work,)) for work in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)


def _posted_twice_at_once(hostname: str, body: dict[str, Any]) -> list[tuple[int, int]]:
    """The same report posted by two threads at once (each with its own connection): their
    (status, snapshot id) answers."""
    answers: list[tuple[int, int]] = []

    def send() -> None:
        response = post_report(collector_client_for(hostname), body)
        answers.append((response.status_code, response.json()["id"]))

    _at_once(send, send)
    return answers


@pytest.mark.django_db(transaction=True)
def test_the_same_report_twice_at_once_stores_one_snapshot_and_answers_201_then_200(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both requests pass the "already stored?" check before either inserts; the unique
    constraint on (server, content) makes the second answer with the first one's snapshot."""

    from topoweb.fleet import services

    _keep_tasks_off_the_broker(monkeypatch)
    client = collector_client_for("gpu-a01")
    post_report(client, report("gpu-a01", H200))  # the server exists, as for any collector
    both_checked = threading.Barrier(2, timeout=10)
    # Both wait here, inside their transactions, then take the host's lock in turn: the
    # second stores after the first committed.
    original = services._one_ingest_per_host_at_a_time

    def after_both_checked(*args: Any) -> Any:
        both_checked.wait()
        return original(*args)

    monkeypatch.setattr(services, "_one_ingest_per_host_at_a_time", after_both_checked)
    answers = _posted_twice_at_once("gpu-a01", report("gpu-a01", H200, nvml=NVML_H200))

    assert sorted(status for status, _ in answers) == [200, 201]
    assert answers[0][1] == answers[1][1]
    assert Snapshot.objects.filter(nvml__isnull=False).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_new_hosts_first_report_twice_at_once_stores_one_server_and_one_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Neither request finds the server; the second's insert of it fails on the unique
    hostname, its transaction rolls back whole, and it answers with the first's snapshot."""

    from topoweb.fleet import services

    _keep_tasks_off_the_broker(monkeypatch)
    both_checked = threading.Barrier(2, timeout=10)
    original = services._stored_duplicate
    calls: list[int] = []

    def after_both_checked(*args: Any) -> Any:
        found = original(*args)
        calls.append(1)
        if len(calls) <= 2:  # the two checks before parsing; not the one after the race
            both_checked.wait()
        return found

    monkeypatch.setattr(services, "_stored_duplicate", after_both_checked)
    answers = _posted_twice_at_once("gpu-new", report("gpu-new", H200))

    assert sorted(status for status, _ in answers) == [200, 201]
    assert answers[0][1] == answers[1][1]
    assert Server.objects.filter(hostname="gpu-new").count() == 1
    assert Snapshot.objects.count() == 1
    assert Server.objects.get(hostname="gpu-new").latest_snapshot_id == answers[0][1]


def _keep_tasks_off_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    # These tests commit for real; the session's worker thread must not run their analyses
    # and health checks while the test database is truncated under it.
    keep_tasks_here(monkeypatch)


@pytest.mark.django_db(transaction=True)
def test_the_same_benchmark_uploaded_twice_at_once_is_stored_and_judged_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both uploads pass the "already stored?" check before either inserts; the second must
    answer with the first one's row (not created) and queue no second health check."""
    from django.utils import timezone

    from topoweb.fleet import services

    _keep_tasks_off_the_broker(monkeypatch)
    health_requests: list[int] = []
    monkeypatch.setattr(
        "topoweb.health.services.request_assessments", lambda ids: health_requests.append(1)
    )
    both_checked = threading.Barrier(2, timeout=10)
    original = services._store_benchmark

    def after_both_checked(*args: Any) -> Any:
        both_checked.wait()
        return original(*args)

    monkeypatch.setattr(services, "_store_benchmark", after_both_checked)
    text = fixture_text("nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt")
    Server.objects.create(hostname="gpu-a01")
    outcomes: list[tuple[bool, int]] = []

    def upload() -> None:
        done = services.ingest_benchmark(
            hostname="gpu-a01",
            kind="nccl-tests",
            text=text,
            captured_at=timezone.now(),
            source="upload",
        )
        assert done.benchmark is not None
        outcomes.append((done.created, done.benchmark.pk))

    _at_once(upload, upload)

    assert sorted(created for created, _ in outcomes) == [False, True]
    assert outcomes[0][1] == outcomes[1][1]
    assert Benchmark.objects.count() == 1
    assert health_requests == [1]


@pytest.mark.django_db
def test_a_report_with_malformed_nvml_facts_is_refused_naming_the_place(
    collector_client: Any,
) -> None:
    facts = {"available": True, "gpus": [{"index": 0, "pcie": {"max_width": "sixteen"}}]}

    response = post_report(collector_client("gpu-a01"), report("gpu-a01", H200, nvml=facts))

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert "gpus[0].pcie.max_width is 'sixteen'" in error["message"]
    assert not Snapshot.objects.exists()


def test_a_report_text_with_a_surrogate_is_refused_naming_the_first_as_drf_does(
    collector_client: Any,
) -> None:
    # The texts' surrogate check is a regex search, not DRF's loop: same message, same code
    # point (the first one), same place; and the serializer kept between requests is not
    # left holding the refused report (the next, valid one is stored).
    client = collector_client("gpu-a01")
    client.raise_request_exception = False
    body = json.dumps(report("gpu-a01", H200))[:-1] + ', "nccl_xml": "<a>\\udbff\\ud800</a>"}'

    response = client.post("/api/v1/reports", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "nccl_xml": ["Surrogate characters are not allowed: U+DBFF."]
    }
    assert not Server.objects.exists()
    assert client.post("/api/v1/reports", report("gpu-a01", H200), format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_a_new_reports_tasks_are_sent_together_once_it_commits(
    collector_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[list[tuple[str, tuple[Any, ...]]]] = []
    # The module, not the Celery app that topoweb.config exports under the same name.
    celery_app = importlib.import_module("topoweb.config.celery_app")
    monkeypatch.setattr(
        celery_app, "_send", lambda pending: sent.append([(n, a) for n, a, _ in pending])
    )
    client = collector_client("gpu-a01")
    assert client.post("/api/v1/reports", report("gpu-a01"), format="json").status_code == 201
    server = Server.objects.get(hostname="gpu-a01")
    analysis = Analysis.objects.get()
    assert sent == [[("analysis.run", (analysis.pk,)), ("health.evaluate", (server.pk,))]]

    # A duplicate enqueues nothing; a report that fails to parse stores and sends nothing.
    assert client.post("/api/v1/reports", report("gpu-a01"), format="json").status_code == 200
    bad = report("gpu-a01", topo_text="not a matrix")
    assert client.post("/api/v1/reports", bad, format="json").status_code == 400
    assert len(sent) == 1

    # While the server's evaluation is still queued, a new report queues no second one; once
    # a worker took it (and the class's analysis is done), the next sends the health task only.
    Analysis.objects.update(status=Analysis.Status.DONE)
    changed = report("gpu-a01", nvml=NVML_H200)
    assert client.post("/api/v1/reports", changed, format="json").status_code == 201
    assert len(sent) == 1
    assert work.begin("health", server.pk)
    again = report("gpu-a01", nvml=NVML_H200, host={"kernel": "6.8"})
    assert client.post("/api/v1/reports", again, format="json").status_code == 201
    assert sent[1:] == [[("health.evaluate", (server.pk,))]]


def test_a_report_asks_for_its_class_analysis_only_when_what_the_analysis_reads_changed(
    collector_client: Any,
) -> None:
    """A class's analysis reads its document and its servers' runs: the report that makes the
    class asks for it, and so does one that brings runs; another server of the class, or a
    known host's changed facts, ask nothing of it (nor claim its queued work again)."""

    dgx = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
    sweep = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"

    def analysis_asked() -> tuple[str, Any]:
        row = Analysis.objects.get()
        return row.status, QueuedWork.objects.get(kind="analysis", key=row.pk).queued_at

    assert post_report(collector_client("gpu-a01"), report("gpu-a01", dgx)).status_code == 201
    assert analysis_asked()[0] == Analysis.Status.PENDING
    # Its message consumed (the broker refused it, or a worker is about to claim it): the
    # sweep, not every report of the class's servers, sends it again.
    QueuedWork.objects.filter(kind="analysis").update(queued_at=None)
    taken = (Analysis.Status.PENDING, None)

    second = collector_client("gpu-a02")
    assert post_report(second, report("gpu-a02", dgx)).status_code == 201
    assert analysis_asked() == taken
    changed = report("gpu-a02", dgx, host={"kernel": "6.8.0"})
    assert post_report(second, changed).status_code == 201
    assert analysis_asked() == taken
    # Its evaluation was asked each time: a new server's only sent, a known one's marked stale.
    assert QueuedWork.objects.get(kind="health", key=Server.objects.get(hostname="gpu-a02").pk)

    Analysis.objects.update(status=Analysis.Status.DONE)
    runs = [{"kind": "nccl-tests", "text": fixture_text(sweep)}]
    assert post_report(second, report("gpu-a02", dgx, benchmarks=runs)).status_code == 201
    status, queued_at = analysis_asked()
    assert status == Analysis.Status.PENDING and queued_at is not None  # analysed again


def test_a_class_that_learns_the_gpu_or_cpu_model_it_prices_with_is_analysed_again() -> None:
    """A class first seen through a person's upload (no GPU model, no host facts) learns both
    from its first collector report: its finished analysis, priced on guesses, is queued again;
    a name it already has is not learned again."""
    topo = fixture_text("topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt")

    def store(hostname: str, **facts: Any) -> None:
        ingest_report(
            hostname=hostname,
            topo_text=topo,
            captured_at=timezone.now(),
            source=Source.COLLECTOR if facts else Source.UPLOAD,
            **facts,
        )

    store("l40s-01")
    Analysis.objects.update(status=Analysis.Status.DONE)
    store("l40s-02", host={"cpu_model": "AMD EPYC 9454 48-Core Processor"})
    learned = TopologyClass.objects.get()
    assert learned.cpu_model == "AMD EPYC 9454 48-Core Processor"
    assert Analysis.objects.get().status == Analysis.Status.PENDING
    Analysis.objects.update(status=Analysis.Status.DONE)
    store("l40s-03", host={"cpu_model": "Intel(R) Xeon(R) Gold 6442Y"})
    assert TopologyClass.objects.get().cpu_model == learned.cpu_model  # the first one stays
    assert Analysis.objects.get().status == Analysis.Status.DONE


def test_a_token_due_a_mark_is_marked_used_by_the_reports_own_statement(
    collector_client: Any, django_assert_num_queries: Any
) -> None:
    client = collector_client("gpu-a01")
    assert post_report(client, report("gpu-a01", H200)).status_code == 201
    long_ago = timezone.now() - timedelta(hours=1)
    collector_tokens_last_used(long_ago)

    # The token (kept in the cache: no query), then one statement: the duplicate found, its
    # server seen, the token marked and its use written to the audit trail (due, as the mark).
    used = AuditEvent.objects.filter(kind=AuditEvent.Kind.TOKEN_USED)
    with django_assert_num_queries(1):
        assert post_report(client, report("gpu-a01", H200)).status_code == 200
    assert CollectorToken.objects.get().last_used_at > long_ago
    assert used.count() == 2
    assert used.first().detail == {"token": "collector", "path": "/api/v1/reports"}

    # A new report marks it the same way.
    collector_tokens_last_used(long_ago)
    assert post_report(client, report("gpu-a01", V100)).status_code == 201
    assert CollectorToken.objects.get().last_used_at > long_ago
    assert used.count() == 3


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's duplicate check")
def test_a_new_hosts_first_report_neither_waits_for_its_host_nor_looks_for_its_server(
    collector_client: Any,
) -> None:
    """The duplicate check found no server of the host: the server is inserted at once (a
    second report racing it fails on the unique hostname and retries, as the race test
    shows). A known host's new report still takes its host's lock and reads its server."""
    client = collector_client("gpu-a01")
    with CaptureQueriesContext(connection) as first:
        assert post_report(client, report("gpu-a01", H200)).status_code == 201
    with CaptureQueriesContext(connection) as second:
        answer = post_report(client, report("gpu-a01", V100))
    assert answer.status_code == 201

    def looks(queries: CaptureQueriesContext) -> list[str]:
        sql = [q["sql"] for q in queries.captured_queries]
        return [s for s in sql if "pg_advisory_xact_lock" in s or "LEFT JOIN" in s]

    assert looks(first) == []
    assert len(looks(second)) == 2
    assert Server.objects.get().latest_snapshot_id == answer.json()["id"]


def test_a_refused_report_still_marks_its_token_used(collector_client: Any) -> None:
    client = collector_client("gpu-a01")
    long_ago = timezone.now() - timedelta(hours=1)
    for body, status in (
        (report("gpu-b02", H200), 403),  # another host's
        ({"hostname": "gpu-a01"}, 400),  # invalid
    ):
        collector_tokens_last_used(long_ago)
        used = AuditEvent.objects.filter(kind=AuditEvent.Kind.TOKEN_USED).count()
        assert post_report(client, body).status_code == status
        assert CollectorToken.objects.get().last_used_at > long_ago
        # Its use is in the audit trail, written by the endpoint as the mark is.
        assert AuditEvent.objects.filter(kind=AuditEvent.Kind.TOKEN_USED).count() == used + 1


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL setting")
@pytest.mark.django_db(transaction=True)
def test_a_duplicate_marks_its_server_seen_without_waiting_for_the_disk_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _keep_tasks_off_the_broker(monkeypatch)
    client = collector_client_for("gpu-a01")
    assert post_report(client, report("gpu-a01", H200)).status_code == 201
    long_ago = timezone.now() - timedelta(hours=1)
    Server.objects.update(last_seen_at=long_ago)
    collector_tokens_last_used(long_ago)

    with CaptureQueriesContext(connection) as queries:
        assert post_report(client, report("gpu-a01", H200)).status_code == 200
    assert Server.objects.get().last_seen_at > long_ago
    # Its own statement, its whole transaction, asks for a commit that does not wait for the
    # WAL flush, by either update (the server's; the token's, when it is due a mark and its
    # use an audit event, as here); the connection's later transactions (a new report) still
    # wait for it.
    (statement,) = [q["sql"] for q in queries.captured_queries]
    assert statement.count("'synchronous_commit', 'off', true") == 2
    assert _synchronous_commit() == "on"
    assert CollectorToken.objects.get().last_used_at > long_ago
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.TOKEN_USED).count() == 2

    # Inside a caller's transaction the setting would hold for the caller's writes too: left.
    with transaction.atomic():
        Server.objects.update(last_seen_at=long_ago)
        found = ingest_report(
            hostname="gpu-a01",
            topo_text=fixture_text(H200),
            captured_at=timezone.now(),
            source=Source.COLLECTOR,
            collector_version="0.1.0",
        )
        assert not found.created
        assert _synchronous_commit() == "on"
    assert Server.objects.get().last_seen_at > long_ago


def test_the_stored_topology_document_is_the_parsed_one_and_reads_back_equal(
    collector_client: Any,
) -> None:
    from topoweb.core.formats import parse_text
    from topoweb.fleet.statements import snapshot_document

    answer = post_report(collector_client("gpu-a01"), report("gpu-a01", H200))
    assert answer.status_code == 201

    parsed = parse_text(fixture_text(H200), expected="topology").to_document()
    assert Snapshot.objects.get().document == parsed
    assert TopologyClass.objects.get().document == parsed
    # Text orjson refuses goes to the field's own encoding, as a plain parameter.
    odd = {"devices": [{"nic_name": "mlx5_\ud800"}]}
    sql, params = snapshot_document(odd, "", None, None)
    assert (sql, len(params)) == ("%s", 1)


def test_a_known_hosts_changed_report_reads_its_previous_snapshot_with_its_server(
    collector_client: Any, django_assert_max_num_queries: Any
) -> None:
    """The previous snapshot's columns the ingest compares (model, models, wiring, warnings)
    come with the server's row: none is loaded on its own (a deferred column read later would
    be a query per report), and its health check is claimed in the report's transaction, in
    one statement; its class's analysis is not asked for (nothing it reads changed)."""
    client = collector_client("gpu-a01")
    assert post_report(client, report("gpu-a01", H200)).status_code == 201
    changed = report("gpu-a01", H200, host={"kernel": "6.8"})
    # 10 statements, and the savepoint and its release the test's transaction puts around the
    # report's own.
    with django_assert_max_num_queries(12) as stored:
        assert post_report(client, changed).status_code == 201
    statements = [" ".join(q["sql"].split()) for q in stored.captured_queries]
    assert not [s for s in statements if s.startswith('SELECT "fleet_snapshot"')], statements
    claims = [s for s in statements if s.startswith('INSERT INTO "fleet_queuedwork"')]
    assert len(claims) == 1 and "'health'" in claims[0]
    assert not [s for s in statements if '"analysis_analysis"' in s], statements
