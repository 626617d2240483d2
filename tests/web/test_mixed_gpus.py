"""A server whose GPUs differ says so wherever its model is named (fleet list row, server page
header, compare page, advice's `assumed` list), and its advice is priced on its smallest-memory,
slowest part. The GTX rig (topo_04 + p2p_01) carries six GTX 1070s and one GTX 1080."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import fixture_text
from topoweb.analysis import services as analysis_services
from topoweb.analysis.models import Analysis
from topoweb.fleet.models import Server, Snapshot, Source
from topoweb.fleet.services import BenchmarkInput, ingest_benchmark, ingest_report
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db

GTX = "topo_04_gtx1070x6-1080-7gpu-pix-phb.txt"
GTX_P2P = "p2p_01_gtx1070x6-1080-7gpu-pcie-x1.txt"
SKU = "GTX 1070/1080 7-GPU rig"
MIX = "6x GeForce GTX 1070 + 1x GeForce GTX 1080"


def _report(hostname: str, benchmarks: list[BenchmarkInput], hint: str = "") -> Server:
    ingest_report(
        hostname=hostname,
        topo_text=fixture_text(GTX),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
        benchmarks=benchmarks,
        gpu_model_hint=hint,
        host={"product_name": SKU},
    )
    return Server.objects.get(hostname=hostname)


def _judged() -> None:
    for pk in Analysis.objects.filter(status=Analysis.Status.PENDING).values_list("pk", flat=True):
        analysis_services.run_analysis(pk)
    for pk in Server.objects.values_list("pk", flat=True):
        evaluate_server(pk)


def test_the_gtx_rig_names_both_its_gpu_models_and_prices_advice_on_the_weaker(
    reader: APIClient,
) -> None:
    p2p = BenchmarkInput("p2p-bandwidth-latency", fixture_text(GTX_P2P))
    _report("gtx-rig-a01", [p2p])
    _judged()

    snap: Snapshot = Server.objects.get(hostname="gtx-rig-a01").latest_snapshot  # type: ignore[assignment]
    assert snap.gpu_model == "GeForce GTX 1070"  # the priced part: 8 GB like the 1080, slower
    assert snap.gpu_models == {
        "models": [["GeForce GTX 1070", 6], ["GeForce GTX 1080", 1]],
        "source": "benchmark",
    }
    (row,) = reader.get("/api/v1/servers/").json()["results"]
    assert row["gpu_models"] == [
        {"name": "GeForce GTX 1070", "family": "GTX 1070", "count": 6},
        {"name": "GeForce GTX 1080", "family": "GTX 1080", "count": 1},
    ]
    assert row["gpu_models_source"] == "benchmark"
    page = reader.get("/api/v1/servers/gtx-rig-a01/page/").json()
    assert page["server"]["gpu_models"] == row["gpu_models"]
    # The advice says which model it priced for all seven, wherever it is given.
    said = f"GPU model: GeForce GTX 1070 for every GPU, the smallest-memory, slowest part of {MIX}"
    rec = page["recommendations"]["llama-7b"]
    assert rec["assumed"][0].startswith(said)
    assert page["best_layouts"] and all(
        d["assumed"][0].startswith(said) for d in page["best_layouts"]
    )
    live = reader.post(
        "/api/v1/servers/gtx-rig-a01/recommendation/", {"model": "llama-7b"}, format="json"
    ).json()
    assert live["assumed"][0].startswith(said)
    assert live["gpu"]["name"] == "GTX 1070"


def test_a_run_uploaded_later_and_an_uploaders_mix_name_the_models_too(reader: APIClient) -> None:
    _report("gtx-rig-a02", [])
    ingest_benchmark(
        hostname="gtx-rig-a02",
        kind="p2p-bandwidth-latency",
        text=fixture_text(GTX_P2P),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
    )
    # The capture alone cannot tell which GPU is which: a person's word, kept as theirs.
    _report("gtx-rig-a03", [], hint="6x GeForce GTX 1070 + 1x GTX 1080")
    later = Server.objects.get(hostname="gtx-rig-a02").latest_snapshot
    said = Server.objects.get(hostname="gtx-rig-a03").latest_snapshot
    assert later is not None and said is not None
    assert (later.gpu_model, later.gpu_models["source"]) == ("GeForce GTX 1070", "benchmark")
    assert said.gpu_model == "GeForce GTX 1070"
    assert said.gpu_models == {
        "models": [["GeForce GTX 1070", 6], ["GTX 1080", 1]],
        "source": "uploader",
    }


def test_the_compare_page_names_one_part_per_side_with_the_reported_names_in_detail(
    reader: APIClient,
) -> None:
    _report("gtx-rig-a01", [BenchmarkInput("p2p-bandwidth-latency", fixture_text(GTX_P2P))])
    ingest_report(
        hostname="hgx-h200-a01",
        topo_text=fixture_text("topo_01_h200-8gpu-12nic-numaid.txt"),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
        gpu_model_hint="NVIDIA H200",
    )
    ingest_report(
        hostname="della-a100-a01",
        topo_text=fixture_text("topo_20_a100sxm80-4gpu-nv4-mlx5-della.txt"),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
        gpu_model_hint="A100 SXM4",
    )
    rows = {
        r["label"]: r
        for r in reader.get("/api/v1/compare/?a=della-a100-a01&b=hgx-h200-a01").json()["rows"]
    }
    model = rows["GPU model"]
    assert (model["a"], model["b"]) == ("A100", "H200")  # as the fleet list names them
    assert model["detail"] == {"a": "A100 SXM4", "b": "NVIDIA H200"}
    rows = {
        r["label"]: r
        for r in reader.get("/api/v1/compare/?a=gtx-rig-a01&b=hgx-h200-a01").json()["rows"]
    }
    assert rows["GPU model"]["a"] == "6x GTX 1070 + 1x GTX 1080"
    assert rows["GPU model"]["detail"]["a"] == MIX


def test_the_list_finds_a_mixed_server_by_any_of_its_gpu_models(reader: APIClient) -> None:
    """The rig prices its GTX 1070s; asking for its one GTX 1080 finds it too."""
    _report("gtx-rig-a01", [BenchmarkInput("p2p-bandwidth-latency", fixture_text(GTX_P2P))])

    def listed(**wanted: str) -> list[str]:
        results = reader.get("/api/v1/servers/", wanted).json()["results"]
        return [row["hostname"] for row in results]

    assert listed(gpu_model="gtx 1080") == ["gtx-rig-a01"]
    assert listed(gpu_model="1070") == ["gtx-rig-a01"]
    assert listed(search="GTX 1080") == ["gtx-rig-a01"]
    assert listed(gpu_model="H200") == []
