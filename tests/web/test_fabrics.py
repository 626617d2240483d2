"""Fabrics over HTTP on real PostgreSQL, Redis and a real Celery worker: an ibnetdiscover capture
uploaded by name, analysed by the worker after commit, served with its findings; the history
and the diff between captures; hosts matched to servers by hostname and by the HCA GUIDs their
collectors sent; bad captures refused naming the line, nothing stored."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.web.conftest import FIXTURES, collector_client_for, keep_tasks_here, report, wait_for
from topoweb.fleet import fabric_services
from topoweb.fleet.access import create_api_token
from topoweb.fleet.models import Fabric, FabricCapture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

IBNET_01 = (FIXTURES / "ibnet_01_dgx-h100-ndr-fabric-40-switches-582-hcas.txt").read_text()
IBNET_02 = (FIXTURES / "ibnet_02_gb200-fabric-partial-bad.txt").read_text()


@pytest.fixture
def uploading() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {create_api_token('ops', 'upload')}")
    return client


def analysed(name: str, reader: APIClient, capture: int | None = None) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        query = f"?capture={capture}" if capture else ""
        body: dict[str, Any] = reader.get(f"/api/v1/fabrics/{name}/{query}").json()
        return body if body["status"] == "done" else None

    result: dict[str, Any] = wait_for(done, timeout=60)
    return result


def downtrained(text: str) -> str:
    """ibnet_01 with IBLEAF-04-04 port 37 - IBSPINE-03 port 31 trained at 4xHDR at both ends."""
    text = text.replace(
        '[37]\t"S-2c5eab0300c26380"[31]\t\t# "MF0;A10-P1-IBSPINE-03:MQM9701/U1" lid 233 4xNDR',
        '[37]\t"S-2c5eab0300c26380"[31]\t\t# "MF0;A10-P1-IBSPINE-03:MQM9701/U1" lid 233 4xHDR',
    )
    return re.sub(
        r'(\[31\]\t"S-2c5eab0300b87b40"\[37\]\t\t# "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" '
        r"lid 73 )4xNDR",
        r"\g<1>4xHDR",
        text,
    )


def test_an_upload_is_stored_once_analysed_by_the_worker_and_served(
    celery_worker: Any, uploading: APIClient, reader: APIClient
) -> None:
    response = uploading.post(
        "/api/v1/fabrics/", {"name": "dgx-ndr", "text": IBNET_01}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["created"] is True and response.json()["warnings"] == []

    body = analysed("dgx-ndr", reader)
    summary = body["analysis"]["summary"]
    assert summary["switches"] == {"leaf": 31, "spine": 9} and summary["tiers"] == 2
    assert summary["hosts"] == 122 and summary["links"] == 1114
    kinds = {f["kind"] for f in body["analysis"]["findings"]}
    assert {"missing_uplinks", "off_rail_hca", "unnamed_hcas"} <= kinds
    assert body["capture"]["switch_count"] == 40 and body["captures"] == 1

    again = uploading.post("/api/v1/fabrics/", {"name": "dgx-ndr", "text": IBNET_01}, format="json")
    assert again.status_code == 200 and again.json()["created"] is False
    assert FabricCapture.objects.count() == 1
    # A duplicate message changes nothing: the stored analysis was made from the same inputs.
    capture = FabricCapture.objects.get()
    assert fabric_services.analyse_capture(capture.pk) == "skipped"

    from topoweb.fleet.models import AuditEvent

    events = AuditEvent.objects.filter(kind="upload", subject="fabric dgx-ndr")
    assert [e.actor for e in events] == ["ops", "ops"]
    listed = reader.get("/api/v1/fabrics/").json()
    assert [f["name"] for f in listed["results"]] == ["dgx-ndr"]
    assert listed["results"][0]["latest_capture"]["status"] == "done"


def test_a_file_upload_of_a_cut_off_capture_is_refused_naming_the_line(
    uploading: APIClient,
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = uploading.post(
        "/api/v1/fabrics/",
        {"name": "gb200", "file": SimpleUploadedFile("ibnet.txt", IBNET_02.encode())},
        format="multipart",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "parse_error" and error["line"] == 10
    assert "'dgx-gb200-n01-c1 HCA-1' with no port line and holds no switch" in error["message"]
    assert not Fabric.objects.exists() and not FabricCapture.objects.exists()
    bad_name = uploading.post("/api/v1/fabrics/", {"name": "a b", "text": IBNET_01}, format="json")
    assert bad_name.status_code == 400 and "name" in str(bad_name.json()["error"])


def test_reading_needs_the_read_rule_and_uploading_the_upload_scope(reader: APIClient) -> None:
    refused = reader.post("/api/v1/fabrics/", {"name": "x", "text": IBNET_01}, format="json")
    assert refused.status_code == 403
    assert APIClient().get("/api/v1/fabrics/").status_code == 401
    assert reader.get("/api/v1/fabrics/nope/").status_code == 404


def test_history_and_diff_between_captures(
    celery_worker: Any, uploading: APIClient, reader: APIClient
) -> None:
    first = uploading.post("/api/v1/fabrics/", {"name": "f", "text": IBNET_01}, format="json")
    second = uploading.post(
        "/api/v1/fabrics/", {"name": "f", "text": downtrained(IBNET_01)}, format="json"
    )
    assert (first.status_code, second.status_code) == (201, 201)
    latest = analysed("f", reader)
    assert latest["capture"]["id"] == second.json()["capture"]
    down = [f for f in latest["analysis"]["findings"] if f["kind"] == "downtrained_link"]
    assert [f["switches"] for f in down] == [["A09-P1-IBLEAF-04-04", "A10-P1-IBSPINE-03"]]

    history = reader.get("/api/v1/fabrics/f/captures/").json()["results"]
    assert [c["id"] for c in history] == [second.json()["capture"], first.json()["capture"]]
    diff = reader.get("/api/v1/fabrics/f/diff/").json()
    assert diff["links"]["rate_changed"]["count"] == 1
    (changed,) = diff["links"]["rate_changed"]["items"]
    assert (changed["a"], changed["b"], changed["rate"], changed["was"]) == (
        "A09-P1-IBLEAF-04-04", "A10-P1-IBSPINE-03", "4xHDR", "4xNDR"
    )  # fmt: skip
    assert diff["links"]["added"]["count"] == diff["links"]["removed"]["count"] == 0
    assert reader.get("/api/v1/fabrics/f/diff/?from=x").status_code == 400


def test_hosts_are_matched_to_servers_by_hostname_and_by_collector_guids(
    celery_worker: Any, uploading: APIClient, reader: APIClient
) -> None:
    # a08-p1-dgx-04-c01 is named in the capture; gpu-b07 is the host whose HCAs kept the
    # default NodeDescription on port 6 of the SU-2 leaves, known only by its collector's GUIDs.
    nics = [
        {"device": dev, "port": 1, "node_guid": guid}
        for dev, guid in (("mlx5_0", "e09d:7303:0085:8d88"), ("mlx5_1", "0000:0000:0000:0001"))
    ]
    for hostname, host in (("a08-p1-dgx-04-c01", None), ("gpu-b07", {"rdma_nics": nics})):
        extra = {"host": host} if host else {}
        response = collector_client_for(hostname).post(
            "/api/v1/reports", report(hostname, **extra), format="json"
        )
        assert response.status_code == 201, response.content
    uploading.post("/api/v1/fabrics/", {"name": "m", "text": IBNET_01}, format="json")
    hosts = {h["hostname"]: h for h in analysed("m", reader)["analysis"]["hosts"]}
    assert hosts["a08-p1-dgx-04-c01"]["server"] == "a08-p1-dgx-04-c01"
    assert hosts["gpu-b07"]["server"] == "gpu-b07"
    ((hca,),) = [[c for c in hosts["gpu-b07"]["hcas"]]]
    assert (hca["name"], hca["switch"], hca["port"]) == ("mlx5_0", "A09-P1-IBLEAF-04-02", 6)
    assert hosts["a06-p1-dgx-02-c01"]["server"] is None

    from topoweb.fleet.fabric_selectors import server_rails

    (rails,) = server_rails("a08-p1-dgx-04-c01")
    assert rails["fabric"] == "m"
    assert {c["name"]: c["switch"] for c in rails["hcas"]} == {
        "mlx5_0": "A09-P1-IBLEAF-01-04",
        "mlx5_1": "A09-P1-IBLEAF-02-04",
        "mlx5_4": "A09-P1-IBLEAF-03-04",
        "mlx5_5": "A09-P1-IBLEAF-04-04",
    }


def test_a_collector_sends_its_fabric_with_its_token(celery_worker: Any, reader: APIClient) -> None:
    client = collector_client_for("gpu-a01")
    body = {"name": "ndr", "captured_at": "2026-11-29T10:00:00Z", "text": IBNET_01}
    response = client.post("/api/v1/fabric-reports/", body, format="json")
    assert response.status_code == 201, response.content
    capture = FabricCapture.objects.get()
    assert (capture.source, capture.hostname) == ("collector", "gpu-a01")
    assert analysed("ndr", reader)["analysis"]["summary"]["switches"]["leaf"] == 31
    assert APIClient().post("/api/v1/fabric-reports/", body, format="json").status_code == 401


def test_a_fabric_uploaded_as_a_server_file_is_refused_with_where_it_goes(
    uploading: APIClient,
) -> None:
    response = uploading.post(
        "/api/v1/uploads/",
        {"hostname": "gpu-a01", "text": IBNET_01, "create": True},
        format="json",
    )
    assert response.status_code == 400
    assert "POST /api/v1/fabrics/" in response.json()["error"]["message"]


def test_exports_name_servers_and_their_nvlink_domains(
    celery_worker: Any, uploading: APIClient, reader: APIClient
) -> None:
    fabric = {"state": "completed", "status": 0, "clique_id": 3,
              "cluster_uuid": "5b0f3c52-9a1e-4c55-8d1e-0c5a3f9e7b21"}  # fmt: skip
    nvml = {"available": True, "gpus": [{"index": i, "fabric": fabric} for i in range(4)]}
    body = report(
        "a07-p1-dgx-03-c02", "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt", nvml=nvml
    )
    client = collector_client_for("a07-p1-dgx-03-c02")
    assert client.post("/api/v1/reports", body, format="json").status_code == 201
    uploading.post("/api/v1/fabrics/", {"name": "x", "text": IBNET_01}, format="json")
    assert reader.get("/api/v1/fabrics/x/export/topology.conf/").status_code in (200, 409)
    analysed("x", reader)

    conf = reader.get("/api/v1/fabrics/x/export/topology.conf/")
    assert conf.status_code == 200 and conf["Content-Type"].startswith("text/plain")
    assert "SwitchName=A09-P1-IBLEAF-01-03 Nodes=a07-p1-dgx-03-c[01-18]" in conf.content.decode()
    labels = reader.get("/api/v1/fabrics/x/export/labels.json/").json()
    key = "network.topology.nvidia.com/accelerator"
    assert labels["a07-p1-dgx-03-c02"][key] == "5b0f3c52-9a1e-4c55-8d1e-0c5a3f9e7b21.3"
    assert key not in labels["a07-p1-dgx-03-c01"]
    assert reader.get("/api/v1/fabrics/x/export/pdf/").status_code == 404


def test_an_export_before_the_analysis_is_a_409(uploading: APIClient, reader: APIClient) -> None:
    from django.db import transaction

    with transaction.atomic():  # no worker here: the capture stays pending
        fabric_services.ingest_fabric(name="p", text=IBNET_01, source="upload")
    FabricCapture.objects.update(status="pending", analysis=None)
    response = reader.get("/api/v1/fabrics/p/export/topology.yaml/")
    assert response.status_code == 409 and "not analysed yet" in response.json()["error"]["message"]


def test_the_fabric_analysis_runs_on_the_heavy_queue() -> None:
    from topoweb.config.celery_app import app

    route = app.amqp.router.route({}, fabric_services.ANALYSE_TASK)
    assert route["queue"].name == "analysis"
    assert app.amqp.router.route({}, "fleet.sweep_fabrics")["queue"].name == "default"


def test_a_job_over_servers_takes_the_ones_whose_rails_share_leaves(
    celery_worker: Any, uploading: APIClient, reader: APIClient
) -> None:
    """Four H200 servers named as ibnet_01's hosts: by name a05/a06 (two units apart) come
    first; the fabric puts the two b05 hosts (one unit: the same leaves) together."""
    hosts = ("a05-p1-dgx-01-c01", "a06-p1-dgx-02-c01", "b05-p1-dgx-05-c01", "b05-p1-dgx-05-c02")
    for host in hosts:
        body = report(host)
        assert (
            collector_client_for(host).post("/api/v1/reports", body, format="json").status_code
            == 201
        )
    question = {"k": 16, "servers": [{"hostname": h} for h in hosts]}
    blind = reader.post("/api/v1/placement/job/", question, format="json").json()
    assert {s["server"] for s in blind["selections"][0]["servers"]} == set(hosts[:2])

    uploading.post("/api/v1/fabrics/", {"name": "ndr", "text": IBNET_01}, format="json")
    analysed("ndr", reader)
    answer = reader.post("/api/v1/placement/job/", question, format="json").json()
    best = answer["selections"][0]
    assert {s["server"] for s in best["servers"]} == set(hosts[2:])
    assert "leaf-local in fabric ndr (4 NICs at 400 Gb/s per server)" in best["reason"]
    apart = next(
        s for s in answer["selections"] if {p["server"] for p in s["servers"]} == set(hosts[:2])
    )
    assert "through the spines of fabric ndr" in apart["reason"]
    assert apart["inter_node_us"] > best["inter_node_us"]
    # Asked of the whole fleet (no servers named), the same two come first.
    fleet = reader.post("/api/v1/placement/job/", {"k": 16}, format="json").json()
    assert {s["server"] for s in fleet["selections"][0]["servers"]} == set(hosts[2:])
    assert "leaf-local in fabric ndr" in fleet["selections"][0]["reason"]


def test_without_a_broker_an_upload_is_analysed_in_process(
    uploading: APIClient, reader: APIClient
) -> None:
    """The embedded default (no REDIS_URL) runs tasks in the web process (off the request's
    thread): the fabric task is registered there, not only in a worker that discovered it."""
    from django.test import override_settings

    from topoweb.config.celery_app import app, wait_for_background

    assert fabric_services.ANALYSE_TASK in app.tasks
    with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
        response = uploading.post(
            "/api/v1/fabrics/", {"name": "e", "text": IBNET_01}, format="json"
        )
        assert wait_for_background(60)
    assert response.status_code == 201
    page = reader.get("/api/v1/fabrics/e/page/").json()
    assert page["status"] == "done" and page["summary"]["switches"] == {"leaf": 31, "spine": 9}
    assert page["page"]["switches"] and "findings" not in page["page"]


def test_a_large_fabric_page_comes_folded_and_hands_out_hosts_per_unit(
    celery_worker: Any, uploading: APIClient, reader: APIClient
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    from bench.fabric import generate

    big = SimpleUploadedFile("big.txt", generate(400).encode())
    response = uploading.post("/api/v1/fabrics/", {"name": "big", "file": big}, format="multipart")
    assert response.status_code == 201, response.content
    analysed("big", reader)
    page = reader.get("/api/v1/fabrics/big/page/").json()["page"]
    assert page["collapsed"] is True and page["hosts"] is None
    assert len(page["units"]) == 13 and page["units"][0]["hosts"] == 32  # 400 = 12 x 32 + 16
    unit = page["units"][0]["unit"]
    one = reader.get(f"/api/v1/fabrics/big/page/?unit={unit}").json()
    assert one["unit"] == unit and len(one["hosts"]) == 32
    assert len(one["hosts"][0]["rails"]) == 8
    found = reader.get("/api/v1/fabrics/big/page/?host=node00400").json()
    assert found["unit"] == page["units"][-1]["unit"] and len(found["hosts"]) == 16
    every = reader.get("/api/v1/fabrics/big/page/?unit=*").json()
    assert len(every["hosts"]) == 400


def test_one_message_out_per_capture_and_none_for_a_capture_given_up(
    uploading: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploads go through fleet.work like every task kind: a capture whose analysis is queued
    is not sent again (sweep or new request), one given up is left alone by the sweep."""
    from topoweb.fleet.models import QueuedWork

    # The message stays out: the session's worker, started by an earlier test, would consume
    # it (and clear the claim) between the upload and the second send.
    sent = keep_tasks_here(monkeypatch)
    response = uploading.post("/api/v1/fabrics/", {"name": "q", "text": IBNET_01}, format="json")
    capture = response.json()["capture"]
    queued = QueuedWork.objects.get(kind=fabric_services.FABRIC_WORK, key=capture)
    assert queued.queued_at is not None  # sent after commit; no worker consumes it here
    assert sent == [(fabric_services.ANALYSE_TASK, (capture,))]
    assert fabric_services.send_analysis(capture) is False
    assert capture in fabric_services.stale_captures()  # still pending: the sweep would try
    QueuedWork.objects.filter(pk=queued.pk).update(gave_up="gave up after 3 attempts: test")
    assert capture not in fabric_services.stale_captures()
