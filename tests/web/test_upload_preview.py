"""POST /api/v1/uploads/preview: what an upload would read, answered without storing anything."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.core.topo_fixtures import glued_h200
from tests.web.conftest import fixture_text
from topoweb.fleet.models import Benchmark, Server, Snapshot

pytestmark = pytest.mark.django_db

URL = "/api/v1/uploads/preview"
H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
RTX6000 = "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt"
RTX6000_P2P = "p2p_05_rtx6000ada-4gpu-p2pwrites-gpu-cpu-latency.txt"
NCCL_A100 = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"
NVB_SUMS = "nvbandwidth_02_2gpu-v0.10-h2d-d2h-d2d-read-no-header.txt"


def nothing_stored() -> bool:
    return not (Server.objects.exists() or Snapshot.objects.exists() or Benchmark.objects.exists())


def test_a_topology_file_previews_as_the_graph_the_server_page_draws(person: APIClient) -> None:
    upload = io.BytesIO(fixture_text(RTX6000).encode())
    upload.name = "topo.txt"

    response = person.post(URL, {"file": upload})

    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "topology"
    assert body["summary"] == "nvidia-smi topo -m: 4 GPUs, 4 NICs, no NVLink"
    gpus = sorted(e["data"]["id"] for e in body["elements"] if e["data"].get("kind") == "gpu")
    assert gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert nothing_stored()


def test_the_preview_lists_each_reader_warning(person: APIClient) -> None:
    response = person.post(URL, {"text": glued_h200()})

    body = response.json()
    assert body["summary"].endswith("(8 reader warnings)")
    assert len(body["warnings"]) == 8
    assert "glued together ('0-45,92-1370')" in body["warnings"][0]


def test_pasted_h200_output_names_its_nvlink_class(person: APIClient) -> None:
    response = person.post(URL, {"text": fixture_text(H200)})

    assert response.json()["summary"] == "nvidia-smi topo -m: 8 GPUs, 12 NICs, NVLink NV18"


@pytest.mark.parametrize(
    ("fixture", "kind", "summary_start"),
    [
        (RTX6000_P2P, "p2p-bandwidth-latency", "p2pBandwidthLatencyTest: 4 GPUs, matrices: "),
        (NCCL_A100, "nccl-tests", "nccl-tests all_reduce: "),
        # Output filtered to its SUM lines: each line a testcase measured, no version known.
        (NVB_SUMS, "nvbandwidth", "nvbandwidth: 3 testcase(s) measured"),
    ],
)
def test_benchmark_outputs_preview_their_kind_without_a_graph(
    person: APIClient, fixture: str, kind: str, summary_start: str
) -> None:
    text = fixture_text(fixture)
    if kind == "nvbandwidth":
        text = "\n".join(line for line in text.split("\n") if line.startswith("SUM "))
    body = person.post(URL, {"text": text}, format="json").json()

    assert (body["kind"], body["elements"]) == (kind, [])
    assert body["summary"].startswith(summary_start)
    assert nothing_stored()


@pytest.mark.parametrize("fixture", [RTX6000_P2P, NCCL_A100])
def test_a_benchmark_preview_lists_its_readers_warnings(person: APIClient, fixture: str) -> None:
    twice = fixture_text(fixture) + "\n" + fixture_text(fixture)  # a second run pasted after
    alone = person.post(URL, {"text": fixture_text(fixture)}, format="json").json()
    body = person.post(URL, {"text": twice}, format="json").json()

    # Each reader reads the first run and says where the second starts.
    assert alone["warnings"] == []
    (warning,) = body["warnings"]
    second = fixture_text(fixture).count("\n") + 2
    assert warning.startswith("line ") and warning.endswith(
        " starts a second run; only the first run was read"
    )
    assert int(warning.split()[1]) >= second
    assert body["summary"] == alone["summary"]


def test_a_truncated_matrix_answers_the_parse_error_with_its_line(person: APIClient) -> None:
    truncated = "".join(fixture_text(H200).splitlines(keepends=True)[:5])

    response = person.post(URL, {"text": truncated})

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["line"]) == ("parse_error", 6)
    assert error["message"].startswith("the matrix is truncated")
    assert nothing_stored()


def test_a_binary_file_answers_400_naming_its_line(person: APIClient) -> None:
    upload = io.BytesIO(b"GPU0\tGPU1\nabc\x00def\n")
    upload.name = "blob.bin"

    response = person.post(URL, {"file": upload})

    assert response.status_code == 400
    assert response.json()["error"]["line"] == 2


def test_text_and_file_together_answer_400(person: APIClient) -> None:
    upload = io.BytesIO(b"x")
    upload.name = "x.txt"

    response = person.post(URL, {"text": "x", "file": upload})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"


def test_an_oversize_preview_answers_413(person: APIClient, settings: Any) -> None:
    settings.TOPOWEB_MAX_REPORT_BYTES = 2000

    response = person.post(URL, {"text": fixture_text(H200)})

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"


def test_an_anonymous_preview_answers_401(settings: Any) -> None:
    settings.TOPOWEB_PUBLIC_READ = True  # reading is open; previewing an upload is not

    response = APIClient().post(URL, {"text": fixture_text(H200)})

    assert response.status_code == 401
