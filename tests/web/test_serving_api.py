"""Serving and training advice through HTTP on real fixtures: a server's serving answer, the
fleet-wide form, the levers and assumptions a recommendation names, and layouts refused."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.web import conftest
from topoweb.core.costs import build_model
from topoweb.core.formats import parse_text
from topoweb.core.ledger import PRESETS
from topoweb.core.model import Topology
from topoweb.core.placement.serving import serve
from topoweb.core.steptime import gpu_spec

H100 = "topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt"
L40S = "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt"
NO_NAME = "topo_34_4gpu-all-node-single-socket-no-nic-agent-log.txt"


@pytest.mark.django_db
class TestServing:
    @pytest.fixture(autouse=True)
    def fleet(self) -> None:
        conftest.add("h100-01", H100, model="NVIDIA H100 80GB HBM3")
        conftest.add("l40s-01", L40S, model="NVIDIA L40S")
        conftest.add("anon-01", NO_NAME)

    def test_a_servers_serving_answer_is_the_cores_for_its_gpus(self, reader: APIClient) -> None:
        response = reader.post(
            "/api/v1/servers/h100-01/serving/",
            {"model": "llama-70b", "context_tokens": 8192, "concurrency": 16},
            format="json",
        )
        assert response.status_code == 200, response.content
        doc = response.json()
        best = doc["recommended"]
        assert best["tp"] in (4, 8) and best["replicas"] == 8 // best["tp"]
        assert doc["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 2
        parsed = parse_text(conftest.fixture_text(H100))
        assert isinstance(parsed, Topology)
        model = build_model(parsed, "NVIDIA H100 80GB HBM3")
        core = serve(
            model, PRESETS["llama-70b"], 8192, 16, spec=gpu_spec("NVIDIA H100 80GB HBM3")
        ).to_document()
        assert best == core["recommended"] and doc["assumed"] == []

    def test_the_fleet_form_ranks_servers_by_replicas_and_marks_guesses(
        self, reader: APIClient
    ) -> None:
        doc = reader.post(
            "/api/v1/serving/",
            {"model": "llama-7b", "context_tokens": 4096, "dtype": "fp8"},
            format="json",
        ).json()
        names = [s["hostname"] for s in doc["servers"]]
        assert names[0] == "h100-01" and set(names) == {"h100-01", "l40s-01", "anon-01"}
        assert doc["servers"][0]["recommended"]["replicas"] == 8
        anon = next(s for s in doc["servers"] if s["hostname"] == "anon-01")
        assert any(a.startswith("memory:") for a in anon["assumed"])
        assert anon["gpu"]["usable_fraction"] == 0.85
        named = reader.post(
            "/api/v1/serving/",
            {"model": "llama-7b", "servers": [{"hostname": "l40s-01", "free": [0, 1]}]},
            format="json",
        ).json()
        assert [s["hostname"] for s in named["servers"]] == ["l40s-01"]
        assert named["servers"][0]["free"] == [0, 1]

    def test_bad_serving_questions_are_400s_naming_the_field(self, reader: APIClient) -> None:
        bad = reader.post("/api/v1/servers/h100-01/serving/", {"dtype": "fp4"}, format="json")
        assert bad.status_code == 400 and "dtype" in bad.content.decode()
        shape = {"name": "no heads", "layers": 2, "hidden": 64, "seq": 16, "micro_batch": 1,
                 "micro_batches": 1, "params": 1e6}  # fmt: skip
        headless = reader.post("/api/v1/servers/h100-01/serving/", {"model": shape}, format="json")
        assert headless.status_code == 400 and "heads" in headless.content.decode()
        missing = reader.post("/api/v1/servers/nope/serving/", {}, format="json")
        assert missing.status_code == 404

    def test_a_layout_whose_tp_does_not_divide_the_heads_is_refused(
        self, reader: APIClient
    ) -> None:
        response = reader.post(
            "/api/v1/servers/h100-01/placement/",
            {"tp": 3, "pp": 1, "dp": 1, "model": "llama-7b"},
            format="json",
        )
        assert response.status_code == 400
        assert "TP 3 does not divide the 32 attention heads" in response.content.decode()

    def test_a_custom_shapes_mlp_and_context_window_are_rules_too(self, reader: APIClient) -> None:
        shape = {"name": "13B-like", "layers": 40, "hidden": 5120, "seq": 4096, "micro_batch": 1,
                 "micro_batches": 8, "params": 13e9, "heads": 40, "ffn_hidden": 13824,
                 "context_window": 4096}  # fmt: skip
        refused = reader.post(
            "/api/v1/servers/h100-01/placement/",
            {"tp": 5, "pp": 1, "dp": 1, "model": shape, "free": [0, 1, 2, 3, 4]},
            format="json",
        )
        assert refused.status_code == 400
        assert "TP 5 does not divide the MLP's 13824 hidden units" in refused.content.decode()
        doc = reader.post(
            "/api/v1/servers/h100-01/serving/",
            {"model": shape, "context_tokens": 8192, "concurrency": 1},
            format="json",
        ).json()
        assert doc["recommended"]["max_context"] == 4096 and "4096-token" in doc["notes"][0]
        assert {o["tp"] for o in doc["options"]} <= {1, 2, 4, 8}

    def test_a_layout_that_fits_only_with_levers_is_answered_with_them_named(
        self, reader: APIClient
    ) -> None:
        doc = reader.post(
            "/api/v1/servers/h100-01/placement/",
            {"tp": 1, "pp": 1, "dp": 8, "model": "llama-13b"},
            format="json",
        ).json()
        # 13B with ZeRO-1 on 80 GiB GPUs: only once full recomputation frees the activations.
        assert doc["fits"] and doc["levers"] == ["full activation recomputation"]
        assert doc["memory"]["recompute"] == "full" and doc["memory"]["left_fraction"] >= 0.10
        small = reader.post(
            "/api/v1/servers/h100-01/placement/",
            {"tp": 1, "pp": 1, "dp": 8, "model": "llama-7b"},
            format="json",
        ).json()
        assert small["fits"] and small["levers"] == []

    def test_a_recommendation_names_its_levers_and_what_it_assumed(self, reader: APIClient) -> None:
        doc = reader.post(
            "/api/v1/servers/h100-01/recommendation/", {"model": "llama-70b"}, format="json"
        ).json()
        # 70B fits no layout of one 8x H100 server: two servers, TP8 inside each, once full
        # recomputation is on (named).
        assert doc["fits"] is False and doc["no_fit"]["smallest_gpu_count"] == 16
        assert doc["no_fit"]["smallest_layout"]["tp"] == 8
        assert doc["no_fit"]["levers"] == ["full activation recomputation"]
        assert doc["no_fit"]["memory"]["recompute"] == "full"
        assert doc["no_fit"]["memory"]["left_fraction"] >= 0.10
        assert "2 servers" in doc["no_fit"]["message"]
        small = reader.post(
            "/api/v1/servers/h100-01/recommendation/", {"model": "llama-7b"}, format="json"
        ).json()
        assert small["levers"] == [] and small["recommended"]["memory"]["left_gb"] > 0
        anon = reader.post(
            "/api/v1/servers/anon-01/recommendation/", {"model": "llama-7b"}, format="json"
        ).json()
        assert [a.split(":")[0] for a in anon["assumed"]] == ["GPU model", "generation", "memory"]


@pytest.mark.django_db
def test_a_tp8_pp2_job_over_two_free_h200_servers_says_what_crosses_the_network(
    reader: APIClient,
) -> None:
    for name in ("h200-a", "h200-b"):
        conftest.add(name, "topo_01_h200-8gpu-12nic-numaid.txt", model="NVIDIA H200")
    response = reader.post(
        "/api/v1/placement/job/",
        {"tp": 8, "pp": 2, "dp": 1, "model": "llama-70b",
         "servers": [{"hostname": "h200-a"}, {"hostname": "h200-b"}]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 200, response.content
    best = response.json()["selections"][0]
    assert [len(p["gpus"]) for p in best["servers"]] == [8, 8]
    assert [n["dimension"] for n in best["network"]] == ["pp"] and best["inter_node_us"] > 0
    assert all(p["nics"] for p in best["servers"])  # each GPU's nearest NIC named
    # 141 GB a GPU: no lever pulled; the memory per GPU and the headroom kept are said.
    assert best["levers"] == [] and best["memory"]["fits"]
    assert best["memory"]["left_fraction"] >= 0.10 and "kept_back" in best["memory"]
    # Named "NVIDIA H200" without NVML's memory total: the catalogue's size, said per server.
    assert [a.split(": ")[0] for a in response.json()["assumed"]] == ["h200-a", "h200-b"]
