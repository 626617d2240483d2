"""Runs the GPU benchmarks it is told of (nccl-tests, p2pBandwidthLatencyTest), raw output kept."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

log = logging.getLogger("collector")

NCCL_TESTS = "nccl-tests"
P2P_BANDWIDTH_LATENCY = "p2p-bandwidth-latency"
KINDS = (NCCL_TESTS, P2P_BANDWIDTH_LATENCY)

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
) -> list[BenchmarkRun]:
    """The commands for SPECS (`nccl-tests=DIR`, `p2p-bandwidth-latency=PATH`), checked up front.

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
            run.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
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
