"""Benchmarks of a topology class cost a request nothing (issue 15, hole 2): each run is
reduced at ingest to what the cost model takes from it (a calibration), and a cost model built
for any server of the class merges those, never parsing or fitting the runs again."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import fixture_text
from topoweb.analysis import selectors
from topoweb.fleet.models import Benchmark, Source
from topoweb.fleet.services import BenchmarkInput, ingest_report

pytestmark = pytest.mark.django_db

A100 = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
A100_NCCL = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"
RTX6000 = "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt"
RTX6000_P2P = "p2p_05_rtx6000ada-4gpu-p2pwrites-gpu-cpu-latency.txt"


def add(hostname: str, topo: str, gpu_model: str, *runs: tuple[str, str]) -> Any:
    return ingest_report(
        hostname=hostname,
        topo_text=fixture_text(topo),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        gpu_model_hint=gpu_model,
        benchmarks=[BenchmarkInput(kind, fixture_text(name)) for kind, name in runs],
    )


def test_a_run_is_stored_with_its_calibration_fitted_once_at_ingest() -> None:
    add("a100-01", A100, "NVIDIA A100-SXM4-40GB", ("nccl-tests", A100_NCCL))
    add("rtx-01", RTX6000, "NVIDIA RTX 6000 Ada Generation", ("p2p-bandwidth-latency", RTX6000_P2P))

    nccl = Benchmark.objects.get(server__hostname="a100-01").calibration
    p2p = Benchmark.objects.get(server__hostname="rtx-01").calibration

    assert nccl["scale"] and nccl["sources"]
    assert p2p["scale"] and p2p["sources"]


def test_a_siblings_cost_model_uses_the_stored_calibrations_without_reading_the_runs(
    reader: APIClient,
) -> None:
    run = ("nccl-tests", A100_NCCL)
    add("a100-01", A100, "NVIDIA A100-SXM4-40GB", run)
    add("a100-02", A100, "NVIDIA A100-SXM4-40GB")
    expected = Benchmark.objects.get().calibration
    # Were a request to parse the run again, this would fail it.
    Benchmark.objects.update(document={"kind": "not a benchmark"}, raw_text="")
    selectors.cached_model.cache_clear()

    response = reader.post(
        "/api/v1/servers/a100-02/cost",
        {"collective": "all_reduce", "gpus": list(range(8)), "bytes": 1 << 30},
        format="json",
    )

    assert response.status_code == 200
    assert response.json()["calibrated"] is True
    model = selectors.server_cost_model(selectors.server_for_questions("a100-02"))
    assert model.calibration.scale == expected["scale"]


def test_a_run_that_cannot_calibrate_says_why_and_is_left_out() -> None:
    one_gpu = "nccl_14_rtx5090-1gpu-alltoall-single-size-avg-busbw-zero-sudo-noise.txt"
    add("rtx-01", RTX6000, "NVIDIA RTX 6000 Ada Generation", ("nccl-tests", one_gpu))

    stored = Benchmark.objects.get().calibration

    assert set(stored) == {"skipped", "cost_model_version"}
    server = selectors.server_for_questions("rtx-01")
    assert selectors.server_cost_model(server).calibration.scale == {}


def test_a_newer_cost_model_fits_the_stored_calibrations_again_in_the_analysis_worker(
    reader: APIClient,
) -> None:
    """A run fitted by an older model (its stamp says so) is fitted again by the class's next
    analysis, before that analysis calibrates with it; the answers then follow the new fit."""
    from topoweb.analysis import services as analysis_services
    from topoweb.core.analysis import COST_MODEL_VERSION

    done = add("a100-01", A100, "NVIDIA A100-SXM4-40GB", ("nccl-tests", A100_NCCL))
    fresh = Benchmark.objects.get().calibration
    assert fresh["cost_model_version"] == COST_MODEL_VERSION
    # What an older model stored: no stamp, another scale and per-step latency.
    old = {"scale": {"nvlink": 0.5}, "alpha_us": {"nvlink": 9.4}, "sources": ["old fit"]}
    Benchmark.objects.update(calibration=old)
    selectors.cached_model.cache_clear()
    before = selectors.server_cost_model(selectors.server_for_questions("a100-01"))
    assert before.calibration.scale == {"nvlink": 0.5}

    analysis = analysis_services.current_analysis_for(done.server.topology_class)
    assert analysis_services.run_analysis(analysis.pk) == "done"

    assert Benchmark.objects.get().calibration == fresh
    analysis.refresh_from_db()
    assert analysis.result["calibration"]["scale"] == fresh["scale"]
    # The cached model of a web process notices: the runs' identity moved with the refit.
    after = selectors.server_cost_model(selectors.server_for_questions("a100-01"))
    assert after.calibration.scale == fresh["scale"]
    assert list(selectors.analyses_behind_their_runs()) == []
