"""Input limits: the size of what one request may make the service work on.

Each limit sits well past the largest real machine (a 576-GPU NVLink domain, hundreds of NICs, a
full nccl-tests sweep of every collective) and well before the point where a request would hold
a worker for seconds. Beyond one, the request is refused with 413 and a message naming the
setting, before anything is stored. The values are settings, read per request."""

from __future__ import annotations

from django.conf import settings

from topoweb.core.formats import device_counts
from topoweb.core.model import NcclRun, P2PResult, Topology


class LimitExceeded(Exception):
    """Input past one of these limits: the API answers 413 with the message, which names the
    setting."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def check_topology(topology: Topology) -> None:
    """A matrix of more devices than TOPOWEB_MAX_DEVICES, or GPUs than TOPOWEB_MAX_GPUS."""
    gpus, devices = len(topology.gpus), len(topology.devices)
    if gpus > settings.TOPOWEB_MAX_GPUS:
        raise LimitExceeded(
            f"The topology has {gpus} GPUs; the limit is {settings.TOPOWEB_MAX_GPUS} "
            "(TOPOWEB_MAX_GPUS)."
        )
    if devices > settings.TOPOWEB_MAX_DEVICES:
        raise LimitExceeded(
            f"The topology has {devices} devices (GPUs and NICs); the limit is "
            f"{settings.TOPOWEB_MAX_DEVICES} (TOPOWEB_MAX_DEVICES)."
        )


def check_benchmark_text(text: str, where: str = "") -> None:
    """Checked before parsing: a benchmark output longer than TOPOWEB_MAX_BENCHMARK_BYTES."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > settings.TOPOWEB_MAX_BENCHMARK_BYTES:
        raise LimitExceeded(
            f"{where}The benchmark output has {size} bytes; the limit is "
            f"{settings.TOPOWEB_MAX_BENCHMARK_BYTES} (TOPOWEB_MAX_BENCHMARK_BYTES)."
        )


def check_benchmark(parsed: object, where: str = "") -> None:
    """An nccl-tests output of more rows than TOPOWEB_MAX_BENCHMARK_ROWS (a full sweep of one
    collective has about 30), or a p2p matrix of more GPUs than TOPOWEB_MAX_GPUS (other
    benchmarks are bounded by TOPOWEB_MAX_BENCHMARK_BYTES)."""
    if isinstance(parsed, NcclRun):
        rows = len(parsed.rows)
        if rows > settings.TOPOWEB_MAX_BENCHMARK_ROWS:
            raise LimitExceeded(
                f"{where}The nccl-tests output has {rows} result rows; the limit is "
                f"{settings.TOPOWEB_MAX_BENCHMARK_ROWS} (TOPOWEB_MAX_BENCHMARK_ROWS)."
            )
    elif isinstance(parsed, P2PResult) and len(parsed.gpus) > settings.TOPOWEB_MAX_GPUS:
        raise LimitExceeded(
            f"{where}The p2p result has {len(parsed.gpus)} GPUs; the limit is "
            f"{settings.TOPOWEB_MAX_GPUS} (TOPOWEB_MAX_GPUS)."
        )


def check_benchmark_count(count: int) -> None:
    if count > settings.TOPOWEB_MAX_BENCHMARKS_PER_REPORT:
        raise LimitExceeded(
            f"The report carries {count} benchmarks; the limit is "
            f"{settings.TOPOWEB_MAX_BENCHMARKS_PER_REPORT} (TOPOWEB_MAX_BENCHMARKS_PER_REPORT)."
        )


def check_query_gpus(hostname: str, gpus: int) -> None:
    """Cost, placement and affinity answers build the server's cost model in the request; past
    TOPOWEB_MAX_QUERY_GPUS that takes longer than a request may (the stored analysis, built by
    the worker, still covers the server)."""
    if gpus > settings.TOPOWEB_MAX_QUERY_GPUS:
        raise LimitExceeded(
            f"{hostname!r} has {gpus} GPUs; cost and placement questions are answered for "
            f"servers of up to {settings.TOPOWEB_MAX_QUERY_GPUS} GPUs "
            "(TOPOWEB_MAX_QUERY_GPUS). Its stored analysis is at /api/v1/servers/"
            f"{hostname}/costs."
        )


def check_select_gpus(hostname: str, gpus: int) -> None:
    """The k-GPU search over a server prices a bounded number of candidate groups (a 576-GPU
    domain in well under a second); past TOPOWEB_MAX_SELECT_GPUS a server is left out of
    selections, reported with this reason."""
    if gpus > settings.TOPOWEB_MAX_SELECT_GPUS:
        raise LimitExceeded(
            f"{hostname!r} has {gpus} GPUs; GPU selection searches servers of up to "
            f"{settings.TOPOWEB_MAX_SELECT_GPUS} GPUs (TOPOWEB_MAX_SELECT_GPUS)."
        )


def check_topology_text(text: str, where: str = "") -> None:
    """check_topology on the raw text, before it is parsed: a matrix or XML past the limits
    is refused without reading it (its rows, <gpu> and <net> elements counted)."""
    gpus, devices = device_counts(text)
    if gpus > settings.TOPOWEB_MAX_GPUS:
        raise LimitExceeded(
            f"{where}The topology has {gpus} GPUs; the limit is {settings.TOPOWEB_MAX_GPUS} "
            "(TOPOWEB_MAX_GPUS)."
        )
    if devices > settings.TOPOWEB_MAX_DEVICES:
        raise LimitExceeded(
            f"{where}The topology has {devices} devices (GPUs and NICs); the limit is "
            f"{settings.TOPOWEB_MAX_DEVICES} (TOPOWEB_MAX_DEVICES)."
        )
