"""The cost and placement API through HTTP on real fixtures: collective cost, job placement,
k-GPU selection, affinity, stored cost tables (analysed by the real worker), model presets."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web import conftest
from tests.web.conftest import fixture_text, report, wait_for
from topoweb.analysis import services as analysis_services
from topoweb.analysis.models import Analysis
from topoweb.core.costs import build_model, collective_cost
from topoweb.core.formats import parse_text
from topoweb.core.ledger import Layout
from topoweb.core.model import Topology
from topoweb.core.placement import StepCost, place
from topoweb.core.steptime import gpu_spec
from topoweb.fleet.models import Source
from topoweb.fleet.services import BenchmarkInput, ingest_report

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
L40S = "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt"
DGX1 = "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"
RTX6000 = "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt"
RTX6000_P2P = "p2p_05_rtx6000ada-4gpu-p2pwrites-gpu-cpu-latency.txt"
A100 = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
A100_NCCL = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"
MODELS = {
    H200: "NVIDIA H200",
    L40S: "NVIDIA L40S",
    DGX1: "Tesla V100-SXM2-32GB",
    RTX6000: "NVIDIA RTX 6000 Ada Generation",
    A100: "NVIDIA A100-SXM4-40GB",
}
MIB_256 = 256 << 20


def add(hostname: str, topo: str, **extra: Any) -> Any:
    return conftest.add(hostname, topo, model=MODELS[topo], **extra)


def core_cost(topo: str, gpus: list[int], nbytes: int) -> dict[str, Any]:
    parsed = parse_text(fixture_text(topo))
    assert isinstance(parsed, Topology)
    model = build_model(parsed, MODELS[topo])
    return collective_cost(model, "all_reduce", gpus, nbytes).to_document()


@pytest.mark.django_db
class TestSynchronousQueries:
    @pytest.fixture(autouse=True)
    def fleet(self) -> None:
        add("h200-01", H200)
        add("l40s-01", L40S)
        add("dgx1-01", DGX1)

    def test_all_reduce_on_the_nvswitch_h200_beats_the_pcie_only_l40s_with_the_cores_figures(
        self, reader: APIClient
    ) -> None:
        body = {"collective": "all_reduce", "gpus": [0, 1, 2, 3], "bytes": MIB_256}
        h200 = reader.post("/api/v1/servers/h200-01/cost", body, format="json")
        l40s = reader.post("/api/v1/servers/l40s-01/cost", body, format="json")

        assert h200.status_code == l40s.status_code == 200
        assert h200.json() == core_cost(H200, [0, 1, 2, 3], MIB_256)
        assert l40s.json() == core_cost(L40S, [0, 1, 2, 3], MIB_256)
        assert h200.json()["bottleneck_class"] == "nvlink"
        assert l40s.json()["bottleneck_class"] in ("pcie", "socket")
        assert h200.json()["busbw_gbps"] > 5 * l40s.json()["busbw_gbps"]
        assert h200.json()["calibrated"] is False

    def test_a_named_algorithm_that_does_not_apply_is_a_400_naming_the_ones_that_do(
        self, reader: APIClient
    ) -> None:
        response = reader.post(
            "/api/v1/servers/h200-01/cost",
            {"collective": "sendrecv", "gpus": [0, 1], "bytes": 1024, "algorithm": "tree"},
            format="json",
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_query"
        assert "try p2p" in response.json()["error"]["message"]

    def test_copies_p2p_and_several_nodes_are_asked_as_on_the_command_line(
        self, reader: APIClient
    ) -> None:
        copy = reader.post(
            "/api/v1/servers/dgx1-01/cost",
            {"collective": "copy", "gpus": [0, 1], "bytes": 1 << 30, "bidirectional": True},
            format="json",
        )
        assert copy.status_code == 200
        assert (copy.json()["algorithm"], copy.json()["protocol"]) == ("copy", "copy-both")
        # topo_12: GPU0-GPU1 is NV2; both ways 2 x 2 x 25 GB/s x 0.96 (Volta's copy share).
        assert copy.json()["algbw_gbps"] == pytest.approx(96.0, rel=0.01)
        two_nodes = reader.post(
            "/api/v1/servers/h200-01/cost",
            {
                "collective": "all_reduce",
                "gpus": list(range(16)),
                "bytes": 1 << 30,
                "nodes": 2,
                "nic_gbps": 400,
            },
            format="json",
        )
        assert two_nodes.status_code == 200
        parsed = parse_text(fixture_text(H200))
        assert isinstance(parsed, Topology)
        model = build_model(parsed, MODELS[H200], nodes=2, nic_gbits=400)
        assert (
            two_nodes.json()
            == collective_cost(model, "all_reduce", range(16), 1 << 30).to_document()
        )
        assert two_nodes.json()["nodes"] == 2
        off = reader.post(
            "/api/v1/servers/l40s-01/cost",
            {"collective": "all_reduce", "gpus": [0, 1], "bytes": 1 << 30, "p2p": "off"},
            format="json",
        )
        assert "host shared memory" in off.json()["transports"][0]

    def test_an_unknown_gpu_is_a_400_listing_the_servers_gpus(self, reader: APIClient) -> None:
        response = reader.post(
            "/api/v1/servers/l40s-01/cost",
            {"collective": "all_reduce", "gpus": [0, 7], "bytes": 1024},
            format="json",
        )
        assert response.status_code == 400
        assert response.json()["error"]["message"] == (
            "unknown GPU index 7: this server has GPUs [0, 1, 2, 3]"
        )

    def test_placement_on_the_dgx1_mesh_keeps_each_tp_group_inside_nvlink(
        self, reader: APIClient
    ) -> None:
        response = reader.post(
            "/api/v1/servers/dgx1-01/placement", {"tp": 4, "pp": 2, "dp": 1}, format="json"
        )

        assert response.status_code == 200
        doc = response.json()
        # Each TP group is a fully connected NV1/NV2 quad of topo_12 (several rings share its
        # four links per GPU: 80 GB/s, twice a 4-cycle's 40), and each pipeline boundary
        # (0-4, 1-5, 2-6, 3-7) an NVLink pair between the quads.
        assert doc["groups"]["tp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert doc["groups"]["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
        assert {d["dimension"]: d["bottleneck_class"] for d in doc["per_dimension"]} == {
            "tp": "nvlink",
            "pp": "nvlink",
        }
        tp = next(d for d in doc["per_dimension"] if d["dimension"] == "tp")
        ring = reader.post(
            "/api/v1/servers/dgx1-01/cost",
            {"collective": "all_reduce", "gpus": [0, 1, 2, 3], "bytes": tp["bytes"]},
            format="json",
        ).json()
        assert (ring["bandwidth_gbps_per_direction"], ring["bottleneck_class"]) == (80.0, "nvlink")
        # 4 per layer, 16 layers per stage, 256 micro-batches (global batch 256, DP 1)
        assert tp["count"] == 4 * 16 * 256
        assert doc["predicted_step_comm_us"] <= doc["naive_step_comm_us"]
        assert doc["search"] == "exact"

    def test_placement_takes_a_free_mask_and_a_full_model_shape(self, reader: APIClient) -> None:
        shape = {
            "name": "tiny",
            "layers": 4,
            "hidden": 1024,
            "seq": 512,
            "micro_batch": 1,
            "micro_batches": 2,
            "params": 1e8,
        }
        response = reader.post(
            "/api/v1/servers/h200-01/placement",
            {"tp": 2, "pp": 1, "dp": 2, "free": [2, 3, 6, 7], "model": shape},
            format="json",
        )
        assert response.status_code == 200
        assert response.json()["model"] == "tiny"
        assert sorted(response.json()["mapping"]) == [2, 3, 6, 7]

    def test_an_impossible_job_is_a_400_in_the_error_shape(self, reader: APIClient) -> None:
        response = reader.post(
            "/api/v1/servers/l40s-01/placement", {"tp": 4, "pp": 2, "dp": 1}, format="json"
        )
        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "code": "invalid_query",
                "message": "TP x PP x DP = 4 x 2 x 1 = 8 needs more than the 4 free GPUs",
                "line": None,
                "details": None,
            }
        }

    def test_an_unknown_preset_is_a_validation_error(self, reader: APIClient) -> None:
        response = reader.post(
            "/api/v1/servers/h200-01/placement",
            {"tp": 8, "pp": 1, "dp": 1, "model": "gpt-5"},
            format="json",
        )
        assert response.status_code == 400
        assert "unknown model preset 'gpt-5'" in str(response.json()["error"]["details"])

    def test_selection_over_two_servers_prefers_the_nvswitch_one(self, reader: APIClient) -> None:
        response = reader.post(
            "/api/v1/placement/select",
            {"k": 2, "servers": [{"hostname": "l40s-01"}, {"hostname": "h200-01", "free": [5, 6]}]},
            format="json",
        )

        assert response.status_code == 200
        best = response.json()["selections"][0]
        assert (best["hostname"], best["gpus"]) == ("h200-01", [5, 6])
        assert "limited by NVSwitch port of GPU5 (NV18, egress)" in best["reason"]
        assert best["cost"]["collective"] == "all_reduce"
        others = {s["hostname"] for s in response.json()["selections"][1:]}
        assert others == {"l40s-01"}

    def test_selection_without_servers_looks_at_the_whole_fleet(self, reader: APIClient) -> None:
        response = reader.post("/api/v1/placement/select", {"k": 8}, format="json")
        assert response.status_code == 200
        assert [s["hostname"] for s in response.json()["selections"]] == ["h200-01", "dgx1-01"]
        too_many = reader.post("/api/v1/placement/select", {"k": 9}, format="json")
        assert too_many.status_code == 400
        assert too_many.json()["error"]["message"] == "no server has 9 free GPUs"

    def test_selection_of_an_unknown_server_is_a_404(self, reader: APIClient) -> None:
        response = reader.post(
            "/api/v1/placement/select", {"k": 2, "servers": [{"hostname": "nope"}]}, format="json"
        )
        assert response.status_code == 404
        assert response.json()["error"]["message"] == "no server named 'nope'"

    def test_affinity_names_the_nearest_nic_and_warns_where_none_is_local(
        self, reader: APIClient
    ) -> None:
        h200 = reader.get("/api/v1/servers/h200-01/affinity").json()
        assert h200["gpus"][1]["nearest_nics"] == ["mlx5_3"]
        assert (
            h200["binding_hints"][1]
            == "GPU1: numactl --cpunodebind=0 --membind=0; NCCL_IB_HCA=mlx5_3"
        )
        l40s = reader.get("/api/v1/servers/l40s-01/affinity").json()
        assert [g["gpu"] for g in l40s["gpus"] if g["warning"]] == [0, 1]

    def test_queries_need_a_reader(self) -> None:
        response = APIClient().post(
            "/api/v1/servers/h200-01/cost",
            {"collective": "all_reduce", "gpus": [0, 1], "bytes": 1},
            format="json",
        )
        assert response.status_code == 401

    def test_model_presets_list_the_ledgers_shapes(self, reader: APIClient) -> None:
        presets = {p["key"]: p for p in reader.get("/api/v1/model-presets").json()}
        assert set(presets) == {"gpt3-175b", "llama-7b", "llama-13b", "llama-70b", "mixtral-8x7b"}
        assert presets["mixtral-8x7b"]["experts"] == 8
        assert (presets["gpt3-175b"]["layers"], presets["gpt3-175b"]["hidden"]) == (96, 12288)


@pytest.mark.django_db
def test_a_p2p_benchmark_calibrates_the_servers_costs(reader: APIClient) -> None:
    add(
        "rtx-01",
        RTX6000,
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
    )
    response = reader.post(
        "/api/v1/servers/rtx-01/cost",
        {"collective": "sendrecv", "gpus": [0, 1], "bytes": MIB_256},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["calibrated"] is True
    assert response.json()["busbw_gbps"] != core_cost(RTX6000, [0, 1], MIB_256)["busbw_gbps"]


@pytest.mark.django_db
def test_stored_costs_carry_calibrated_tables_and_the_measured_sweep(reader: APIClient) -> None:
    ingested = add(
        "a100-01", A100, benchmarks=[BenchmarkInput("nccl-tests", fixture_text(A100_NCCL))]
    )
    analysis = Analysis.objects.get(topology_class=ingested.server.topology_class)
    assert analysis_services.run_analysis(analysis.pk) == "done"

    doc = reader.get("/api/v1/servers/a100-01/cost-tables/").json()
    assert doc["analysis_status"] == "done"
    assert doc["costs"]["calibrated"] is False
    assert doc["calibrated_costs"]["calibrated"] is True
    measured = doc["measured"][0]
    assert (measured["collective"], measured["gpu_count"]) == ("all_reduce", 8)
    assert measured["bytes"][-1] == 8589934592
    at_1g = doc["costs"]["sizes"].index(1 << 30)
    predicted = doc["costs"]["curves"]["all_reduce"]["busbw_gbps"][at_1g]
    measured_1g = measured["busbw_gbps"][measured["bytes"].index(1 << 30)]
    assert predicted == pytest.approx(measured_1g, rel=0.2)  # DOMAIN fidelity: within 20 %


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_workers_analysis_stores_structure_cost_tables_and_every_layout(
    celery_worker: Any, collector_client: Any, reader: APIClient
) -> None:
    response = collector_client("gpu-a01").post(
        "/api/v1/reports", report("gpu-a01", H200), format="json"
    )
    assert response.status_code == 201

    analysis = wait_for(lambda: Analysis.objects.filter(status="done").first())
    result = analysis.result
    assert analysis.cost_model_version == analysis_services.COST_MODEL_VERSION
    assert result["structure"]["nvlink_domains"][0]["fabric"] == "nvswitch"
    assert result["hardware"]["nvlink_per_link_gbps_per_direction"] > 0
    costs = result["costs"]
    assert costs["groups"] == {"2": [0, 1], "4": [0, 1, 2, 3], "8": list(range(8))}
    rows = costs["table"]["all_reduce"]
    assert [(r[0], r[1]) for r in rows[:3]] == [(2, 1 << 20), (2, 64 << 20), (2, 1 << 30)]
    assert len(rows) == 3 * 3
    layouts = {(x["layout"]["tp"], x["layout"]["pp"], x["layout"]["dp"]) for x in result["layouts"]}
    assert len(layouts) == 10 and (8, 1, 1) in layouts and (2, 2, 2) in layouts
    assert result["affinity"]["gpus"][1]["nearest_nics"] == ["mlx5_3"]
    assert len(result["p2p_prediction"]["unidirectional_gbps"]) == 8
    assert result["calibration"]["applied"] is False

    stored = reader.get("/api/v1/servers/gpu-a01/cost-tables/").json()
    assert stored["costs"] == costs
    assert stored["measured"] == []


@pytest.mark.django_db
def test_questions_are_throttled_per_caller(reader: APIClient, settings: Any) -> None:
    from django.core.cache import cache

    cache.clear()
    settings.TOPOWEB_QUERY_RATE = "2/min"
    add("h200-01", H200)
    question = {"collective": "all_reduce", "gpus": [0, 1], "bytes": 1 << 20}

    answers = [
        reader.post("/api/v1/servers/h200-01/cost", question, format="json").status_code
        for _ in range(3)
    ]

    assert answers == [200, 200, 429]
    throttled = reader.post("/api/v1/servers/h200-01/cost", question, format="json").json()
    assert throttled["error"]["code"] == "throttled"
    cache.clear()


def relabel_topo_text(text: str, relabel: list[int]) -> str:
    """The capture of a sibling server whose GPU i is the original's GPU relabel[i]... written
    back as nvidia-smi prints it: rows and columns of the GPUs permuted, the rest untouched."""
    lines = text.splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    n = len(relabel)
    rows = {}
    for i in range(header_at + 1, header_at + 1 + n):
        cells = lines[i].split()
        rows[int(cells[0][3:])] = cells
    inverse = {relabel[i]: i for i in range(n)}  # new index -> old index
    out = lines[: header_at + 1]
    for new in range(n):
        old = rows[inverse[new]]
        cells = [f"GPU{new}"] + [old[1 + inverse[j]] for j in range(n)] + old[1 + n :]
        out.append("  " + "\t".join(cells))
    for line in lines[header_at + 1 + n :]:
        cells = line.split()
        if cells and not cells[0].startswith("GPU") and len(cells) > n:
            cells = [cells[0]] + [cells[1 + inverse[j]] for j in range(n)] + cells[1 + n :]
            line = "  " + "\t".join(cells)
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.django_db
def test_a_relabelled_sibling_gets_its_own_best_tp_groups_from_the_stored_analysis(
    reader: APIClient,
) -> None:
    relabel = [5, 2, 7, 0, 3, 6, 1, 4]
    first = add("dgx1-a", DGX1)
    sibling_text = relabel_topo_text(fixture_text(DGX1), relabel)
    sibling = ingest_report(
        hostname="dgx1-b",
        topo_text=sibling_text,
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        gpu_model_hint=MODELS[DGX1],
    )
    assert sibling.server.topology_class_id == first.server.topology_class_id
    analysis = Analysis.objects.get(topology_class=first.server.topology_class)
    assert analysis_services.run_analysis(analysis.pk) == "done"

    for host, text in (("dgx1-a", fixture_text(DGX1)), ("dgx1-b", sibling_text)):
        stored = reader.get(f"/api/v1/servers/{host}/").json()["analysis"]["result"]
        assert stored["gpu_numbering"] == "server"
        topo = parse_text(text, expected="topology")
        assert isinstance(topo, Topology)
        model = build_model(topo, MODELS[DGX1])
        spec = gpu_spec(MODELS[DGX1])
        for doc in stored["layouts"]:
            layout = Layout(**doc["layout"])
            own = place(model, layout, spec=spec)
            served = StepCost(model, layout, spec=spec)(doc["mapping"])
            assert served == pytest.approx(own.step_us, rel=1e-9), (host, layout)
            live = reader.post(
                f"/api/v1/servers/{host}/placement", doc["layout"], format="json"
            ).json()
            if live["levers"]:
                # A stored layout judged not to fit under the recommendation's settings: asked
                # alone, the answer pulls the levers that make it fit, and names them.
                assert not doc["fits"] and live["fits"], (host, layout)
                continue
            assert live["predicted_step_time_us"] == pytest.approx(
                doc["predicted_step_time_us"], rel=1e-6
            )
    a = reader.get("/api/v1/servers/dgx1-a/").json()["analysis"]["result"]["layouts"]
    b = reader.get("/api/v1/servers/dgx1-b/").json()["analysis"]["result"]["layouts"]
    tp4 = [(x["groups"]["tp"], y["groups"]["tp"]) for x, y in zip(a, b, strict=True)]
    assert any(ga != gb for ga, gb in tp4)  # the sibling's numbering, not the first server's


@pytest.mark.django_db
def test_the_recommendation_endpoint_ranks_fitting_layouts_and_explains_a_misfit(
    reader: APIClient,
) -> None:
    add("h200-r", H200)
    doc = reader.post(
        "/api/v1/servers/h200-r/recommendation",
        {"model": "llama-7b", "seq": 2048, "global_batch": 128},
        format="json",
    ).json()
    assert doc["fits"] is True and doc["model"]["seq"] == 2048
    best = doc["recommended"]
    assert best["fits"] and best["layout"]["pp"] == 1
    fitting = [x["predicted_step_time_us"] for x in doc["layouts"] if x["fits"]]
    assert best["predicted_step_time_us"] == min(fitting)
    big = reader.post(
        "/api/v1/servers/h200-r/recommendation", {"model": "gpt3-175b"}, format="json"
    ).json()
    assert big["recommended"] is None and "fits no layout" in big["no_fit"]["message"]
    smaller = reader.post(
        "/api/v1/servers/h200-r/placement",
        {"tp": 2, "pp": 1, "dp": 2, "free": [0, 1, 2, 3, 4]},
        format="json",
    ).json()
    assert len(smaller["gpus"]) == 4 and len(smaller["leftover"]) == 1


@pytest.mark.django_db
def test_a_scheduler_places_a_job_on_one_server_or_over_two_naming_gpus_and_nics(
    reader: APIClient,
) -> None:
    add("gpu-a01", H200)
    add("gpu-a02", H200)
    one = reader.post(
        "/api/v1/placement/job",
        {
            "tp": 2, "pp": 1, "dp": 2, "model": "llama-7b",
            "servers": [{"hostname": "gpu-a01", "free": [0, 1, 2, 3, 4]}],
        },
        format="json",
    )  # fmt: skip
    assert one.status_code == 200, one.json()
    (single, *_rest) = one.json()["selections"]
    assert single["server_count"] == 1 and len(single["servers"][0]["gpus"]) == 4
    assert single["predicted"] == "step time" and single["fits"] is True
    two = reader.post(
        "/api/v1/placement/job",
        {
            "k": 8,
            "servers": [
                {"hostname": "gpu-a01", "free": [0, 1, 2, 3]},
                {"hostname": "gpu-a02", "free": [4, 5, 6, 7]},
            ],
        },
        format="json",
    )
    assert two.status_code == 200, two.json()
    best = two.json()["selections"][0]
    assert [s["server"] for s in best["servers"]] == ["gpu-a01", "gpu-a02"]
    assert best["servers"][1]["gpus"] == [4, 5, 6, 7]
    assert best["servers"][0]["nics"] and best["same_rails"] is True
    assert best["inter_node_us"] > 0
    bad = reader.post("/api/v1/placement/job", {"k": 4, "tp": 2, "pp": 1, "dp": 2}, format="json")
    assert bad.status_code == 400


@pytest.mark.django_db
def test_a_tp8_job_spans_two_4_gpu_servers_only_when_nvml_puts_them_in_one_nvlink_clique(
    reader: APIClient,
) -> None:
    a100_4 = "topo_13_polaris-a100-4gpu-nv4-2mlx5-mixed-sep-header.txt"
    cluster = "5d1f6b1e-8c4a-4c1b-9d6e-1a2b3c4d5e6f"

    def tray(hostname: str, clique: int) -> None:
        fabric = {"cluster_uuid": cluster, "clique_id": clique, "state": "completed"}
        gpus = [{"index": i, "name": "NVIDIA A100-SXM4-40GB", "fabric": fabric} for i in range(4)]
        conftest.add(hostname, a100_4, nvml={"available": True, "gpus": gpus})

    for hostname, clique in (("tray-a", 7), ("tray-b", 7), ("tray-c", 8)):
        tray(hostname, clique)

    def job(*hostnames: str) -> Any:
        body = {"tp": 8, "pp": 1, "dp": 1, "model": "llama-7b"}
        servers = [{"hostname": h} for h in hostnames]
        return reader.post("/api/v1/placement/job", {**body, "servers": servers}, format="json")

    same = job("tray-a", "tray-b")
    assert same.status_code == 200, same.json()
    best = same.json()["selections"][0]
    assert [s["server"] for s in best["servers"]] == ["tray-a", "tray-b"]
    assert "TP inside one NVLink domain" in best["reason"] and best["network"] == []
    apart = job("tray-a", "tray-c")
    assert apart.status_code == 400 and "whole TP x EP blocks of 8" in str(apart.json())


@pytest.mark.django_db
def test_the_migration_fills_the_nvlink_domain_of_snapshots_stored_before_it() -> None:
    import importlib
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    from topoweb.fleet.models import Snapshot

    fill_in = importlib.import_module(
        "topoweb.fleet.migrations.0010_snapshot_nvlink_domain"
    ).fill_in
    fabric = {"cluster_uuid": "5d1f6b1e-8c4a-4c1b-9d6e-1a2b3c4d5e6f", "clique_id": 2}
    gpus = [{"index": i, "fabric": fabric} for i in range(4)]
    a100_4 = "topo_13_polaris-a100-4gpu-nv4-2mlx5-mixed-sep-header.txt"
    conftest.add("old-tray", a100_4, nvml={"available": True, "gpus": gpus})
    conftest.add("old-box", a100_4)
    Snapshot.objects.update(nvlink_domain="")  # as stored before the column
    fill_in(apps, SimpleNamespace(connection=connection))
    assert dict(Snapshot.objects.values_list("server__hostname", "nvlink_domain")) == {
        "old-tray": "5d1f6b1e-8c4a-4c1b-9d6e-1a2b3c4d5e6f/2",
        "old-box": "",
    }


@pytest.mark.django_db
def test_a_run_of_small_messages_sets_the_servers_latency_and_leaves_its_bandwidth(
    reader: APIClient,
) -> None:
    # nccl_06 cut to its rows under 64 KiB: latency-bound, they say nothing of the bandwidth.
    lines = fixture_text(A100_NCCL).splitlines()
    small = "\n".join(
        line
        for line in lines
        if not (line.split() and line.split()[0].isdigit() and int(line.split()[0]) >= 64 << 10)
    )
    add("a100-small", A100, benchmarks=[BenchmarkInput("nccl-tests", small)])
    body = {"collective": "all_reduce", "gpus": list(range(8)), "bytes": 8}
    tiny = reader.post("/api/v1/servers/a100-small/cost", body, format="json").json()
    plain = core_cost(A100, list(range(8)), 8)
    assert any(a.startswith("latency measured") for a in tiny["assumed"])
    assert not any(a.startswith("latency uncalibrated") for a in tiny["assumed"])
    assert tiny["time_us"] != plain["time_us"]
    big = reader.post(
        "/api/v1/servers/a100-small/cost", {**body, "bytes": 1 << 30}, format="json"
    ).json()
    assert big["calibrated"] is False
    assert big["busbw_gbps"] == pytest.approx(
        core_cost(A100, list(range(8)), 1 << 30)["busbw_gbps"], rel=0.01
    )
