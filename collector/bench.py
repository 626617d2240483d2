"""Runs the GPU benchmarks it is told of (nccl-tests, p2pBandwidthLatencyTest, nvbandwidth), raw
output kept; and has NCCL dump the topology it detects (NCCL_TOPO_DUMP_FILE)."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

log = logging.getLogger("collector")

NCCL_TESTS = "nccl-tests"
P2P_BANDWIDTH_LATENCY = "p2p-bandwidth-latency"
NVBANDWIDTH = "nvbandwidth"
KINDS = (NCCL_TESTS, P2P_BANDWIDTH_LATENCY, NVBANDWIDTH)
# GPU-to-GPU copies one way and the GPU latency: what health and calibration read.
DEFAULT_NVBANDWIDTH_ARGS = "-t device_to_device_memcpy_write_ce device_to_device_latency_sm"
# The smallest nccl-tests run that still has NCCL build (and dump) its topology.
TOPO_DUMP_ARGS = ("-b", "8", "-e", "8", "-n", "1", "-w", "0")

DEFAULT_NCCL_TESTS = ("all_reduce_perf",)
# A sweep from 8 B to 1 GiB doubling, all GPUs in one process: fits alpha and beta in minutes.
DEFAULT_NCCL_ARGS = "-b 8 -e 1G -f 2 -g {gpus}"


class BenchmarkError(Exception):
    """A benchmark that cannot be planned or did not finish; the message names it."""


@dataclass(frozen=True)
class BenchmarkRun:
    """One benchmark command and the report kind its output is uploaded as."""

    kind: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()  # added to the collector's environment

    @property
    def label(self) -> str:
        return os.path.basename(self.argv[0])


def _executable(path: Path) -> Path:
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BenchmarkError(f"{path} is not an executable file")
    return path


def plan(
    specs: Sequence[str],
    *,
    gpus: int,
    nccl_tests: Sequence[str] = DEFAULT_NCCL_TESTS,
    nccl_args: str = DEFAULT_NCCL_ARGS,
    p2p_args: str = "",
    nvbandwidth_args: str = DEFAULT_NVBANDWIDTH_ARGS,
) -> list[BenchmarkRun]:
    """The commands for SPECS (`nccl-tests=DIR`, `p2p-bandwidth-latency=PATH`,
    `nvbandwidth=PATH`), checked up front.

    `{gpus}` in NCCL_ARGS becomes the GPU count, so one default fits every host.
    """
    runs: list[BenchmarkRun] = []
    for spec in specs:
        kind, sep, where = spec.partition("=")
        if not sep or not where:
            raise BenchmarkError(f"benchmark {spec!r} is not KIND=PATH (kinds: {', '.join(KINDS)})")
        if kind == NCCL_TESTS:
            flags = shlex.split(nccl_args.replace("{gpus}", str(gpus)))
            for name in nccl_tests:
                binary = _executable(Path(where) / name)
                runs.append(BenchmarkRun(NCCL_TESTS, (str(binary), *flags)))
        elif kind == P2P_BANDWIDTH_LATENCY:
            binary = _executable(Path(where))
            runs.append(BenchmarkRun(P2P_BANDWIDTH_LATENCY, (str(binary), *shlex.split(p2p_args))))
        elif kind == NVBANDWIDTH:
            binary = _executable(Path(where))
            runs.append(BenchmarkRun(NVBANDWIDTH, (str(binary), *shlex.split(nvbandwidth_args))))
        else:
            raise BenchmarkError(f"unknown benchmark kind {kind!r} (kinds: {', '.join(KINDS)})")
    return runs


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone


def run_benchmark(
    run: BenchmarkRun, *, timeout_s: float, progress: TextIO | None = None
) -> dict[str, str]:
    """Run one benchmark, echoing each line to PROGRESS (stderr) as it comes; raw output kept."""
    out = progress if progress is not None else sys.stderr
    try:
        # Own process group: a wrapper's children (mpirun, sh) hold the pipe and die with it.
        proc = subprocess.Popen(
            run.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **dict(run.env)} if run.env else None,
        )
    except OSError as err:
        raise BenchmarkError(f"cannot run {run.argv[0]}: {err.strerror}") from None
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        _kill_group(proc)

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    chunks: list[bytes] = []
    try:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            chunks.append(line)
            out.write(f"[{run.label}] {line.decode('utf-8', errors='replace').rstrip()}\n")
            out.flush()
        returncode = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
    if timed_out.is_set():
        raise BenchmarkError(f"{run.label} did not finish within {timeout_s:g} s")
    if returncode != 0:
        raise BenchmarkError(f"{run.label} failed (exit {returncode})")
    return {"kind": run.kind, "text": b"".join(chunks).decode("utf-8", errors="replace")}


def run_all(
    runs: Sequence[BenchmarkRun], *, timeout_s: float, progress: TextIO | None = None
) -> list[dict[str, str]]:
    """Every run that succeeds; a failed one is logged and left out so it cannot sink the report."""
    results: list[dict[str, str]] = []
    for run in runs:
        log.info("running %s", shlex.join(run.argv))
        try:
            results.append(run_benchmark(run, timeout_s=timeout_s, progress=progress))
        except BenchmarkError as err:
            log.warning("benchmark left out of the report: %s", err)
    return results


def nccl_topology_dump(
    runs: Sequence[BenchmarkRun],
    *,
    dump_with: Path | None,
    gpus: int,
    timeout_s: float,
    progress: TextIO | None = None,
) -> tuple[list[BenchmarkRun], str | None]:
    """NCCL's own view of the host as `NCCL_TOPO_DUMP_FILE` XML. The first nccl-tests run, if
    any, dumps it while it runs (returned in its place, to run as planned); else DUMP_WITH (an
    nccl-tests binary such as all_reduce_perf) runs once on 8 bytes just to dump it. Returns
    the runs to make and, when it ran the binary itself, the XML (None if NCCL wrote none)."""
    fd, name = tempfile.mkstemp(prefix="topoweb-nccl-topo-", suffix=".xml")
    os.close(fd)
    os.unlink(name)  # NCCL creates it; an empty file left behind would read as a dump
    env = (("NCCL_TOPO_DUMP_FILE", name),)
    for i, run in enumerate(runs):
        if run.kind == NCCL_TESTS:
            dumping = BenchmarkRun(run.kind, run.argv, run.env + env)
            return [*runs[:i], dumping, *runs[i + 1 :]], None
    if dump_with is None:
        return list(runs), None
    probe = BenchmarkRun(
        NCCL_TESTS, (str(_executable(dump_with)), *TOPO_DUMP_ARGS, "-g", str(gpus)), env
    )
    try:
        run_benchmark(probe, timeout_s=timeout_s, progress=progress)
    except BenchmarkError as err:
        log.warning("no NCCL topology dump: %s", err)
    return list(runs), read_topology_dump(name)


def dump_path(run: BenchmarkRun) -> str | None:
    return dict(run.env).get("NCCL_TOPO_DUMP_FILE")


def read_topology_dump(path: str) -> str | None:
    """The XML NCCL wrote at PATH (then removed), or None when it wrote nothing."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        log.warning("NCCL wrote no topology dump (%s)", path)
        return None
    try:
        os.unlink(path)
    except OSError:
        pass
    return text if text.strip() else None
