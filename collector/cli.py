"""`topoweb-collector` / `python -m collector`: capture this host's GPU topology, deliver it."""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from collector import __version__, bench, gather, nvml
from collector.upload import (
    FABRIC_REPORTS_PATH,
    Backoff,
    EnrollError,
    FlushResult,
    Outcome,
    Spool,
    SpoolError,
    Uploader,
    classify,
    enroll,
    post_report,
    report_url,
)

log = logging.getLogger("collector")

DEFAULT_SPOOL_DIR = "/var/lib/topoweb-collector/spool"

# Exit statuses, stable for scripts and systemd.
EXIT_OK = 0
EXIT_NOT_DELIVERED = 1  # reports still spooled, refused, or the token refused
EXIT_USAGE = 2  # bad options or configuration (argparse uses 2 too)
EXIT_NO_GPU = 3  # nvidia-smi cannot show a topology: no GPU or no driver


@dataclass(frozen=True)
class Settings:
    """What to capture and how; everything except where to send it."""

    nvidia_smi: str = "nvidia-smi"
    nvidia_smi_timeout_s: float = 60.0
    hostname: str | None = None
    host_root: Path = Path("/")
    benchmarks: tuple[str, ...] = ()
    nccl_tests: tuple[str, ...] = bench.DEFAULT_NCCL_TESTS
    nccl_args: str = bench.DEFAULT_NCCL_ARGS
    p2p_args: str = ""
    nvbandwidth_args: str = bench.DEFAULT_NVBANDWIDTH_ARGS
    benchmark_timeout_s: float = 1800.0
    nccl_topo_xml: Path | None = None  # an existing dump to send
    nccl_topo_dump_with: Path | None = None  # an nccl-tests binary to make NCCL dump one


def capture(settings: Settings, now: Callable[[], datetime] | None = None) -> bytes:
    """One report's JSON body. Raises GatherError when nvidia-smi shows no topology."""
    topo_text = gather.topo_matrix(settings.nvidia_smi, settings.nvidia_smi_timeout_s)
    captured_at = (now or gather.utc_now)()
    nvml_data = nvml.gather_nvml()
    host = gather.host_facts(settings.host_root)
    host["topo_p2p"] = gather.topo_p2p(settings.nvidia_smi, settings.nvidia_smi_timeout_s)
    gpus = (
        len(nvml_data["gpus"])
        if nvml_data.get("available")
        else gather.gpu_count_from_topo(topo_text)
    )
    runs = bench.plan(
        settings.benchmarks,
        gpus=max(gpus, 1),
        nccl_tests=settings.nccl_tests,
        nccl_args=settings.nccl_args,
        p2p_args=settings.p2p_args,
        nvbandwidth_args=settings.nvbandwidth_args,
    )
    nccl_xml: str | None = None
    if settings.nccl_topo_xml is not None:
        nccl_xml = gather.read_nccl_topology(settings.nccl_topo_xml)
        if nccl_xml is None:
            log.warning(
                "cannot read the NCCL topology XML %s; sent without it", settings.nccl_topo_xml
            )
    else:
        runs, nccl_xml = bench.nccl_topology_dump(
            runs,
            dump_with=settings.nccl_topo_dump_with,
            gpus=max(gpus, 1),
            timeout_s=settings.benchmark_timeout_s,
        )
    results = bench.run_all(runs, timeout_s=settings.benchmark_timeout_s)
    dumped = next((p for r in runs if (p := bench.dump_path(r))), None)
    if nccl_xml is None and dumped is not None:
        nccl_xml = bench.read_topology_dump(dumped)
    report = gather.build_report(
        hostname=settings.hostname or os.uname().nodename,
        captured_at=captured_at,
        topo_text=topo_text,
        nvml=nvml_data,
        host=host,
        benchmarks=results,
        nccl_xml=nccl_xml,
    )
    return gather.encode_report(report)


def send_fabric(
    server: str,
    token: str,
    *,
    name: str,
    command: str = "ibnetdiscover",
    timeout_s: float = 300.0,
    http_timeout_s: float = 30.0,
    now: Callable[[], datetime] | None = None,
) -> bool:
    """Run ibnetdiscover and send the fabric it prints under NAME (one host per fabric does
    this). Not spooled: a later run captures the fabric as it is then. True when delivered."""
    try:
        text = gather.ibnetdiscover(command, timeout_s)
    except gather.GatherError as err:
        log.error("fabric %s not captured: %s", name, err)
        return False
    captured_at = (now or gather.utc_now)()
    body = json.dumps({"name": name, "captured_at": captured_at.isoformat(), "text": text}).encode(
        "utf-8"
    )
    try:
        answer = post_report(
            server, token, body, timeout_s=http_timeout_s, path=FABRIC_REPORTS_PATH
        )
    except OSError as err:
        log.error("fabric %s not delivered: %s", name, err)
        return False
    if classify(answer.status) is not Outcome.DELIVERED:
        log.error("fabric %s refused (HTTP %s): %s", name, answer.status, answer.body[:300])
        return False
    log.info("fabric %s delivered (HTTP %s)", name, answer.status)
    return True


def run_once(
    server: str,
    token: str,
    *,
    spool_dir: Path,
    settings: Settings | None = None,
    retry_for_s: float = 600.0,
    http_timeout_s: float = 30.0,
    backoff: Backoff | None = None,
    now: Callable[[], datetime] | None = None,
) -> FlushResult:
    """Capture one report, spool it, then deliver everything spooled, oldest first, retrying for
    up to RETRY_FOR_S. Raises GatherError (no GPU/driver) or SpoolError (spool unusable)."""
    with Spool(spool_dir) as spool:
        body = capture(settings or Settings(), now)
        uploader = Uploader(
            server, token, spool, timeout_s=http_timeout_s, backoff=backoff or Backoff()
        )
        unspooled: bytes | None = None
        try:
            spool.add(body)
        except OSError as err:
            log.error("cannot spool the report (%s); sending it from memory", err.strerror or err)
            unspooled = body
        result = uploader.drain(until=time.monotonic() + retry_for_s)
        if unspooled is not None:
            # Oldest first: the unspooled report goes only once nothing older waits.
            if result.remaining == 0 and result.stopped_by is None:
                delivery = uploader.send_unspooled(unspooled)
                result.deliveries.append(delivery)
                if delivery.outcome in (Outcome.RETRY, Outcome.AUTH):
                    result.remaining += 1  # not delivered: the exit status says so
            else:
                result.remaining += 1
        return result


# The spread of capture times: a tenth of the interval, at most five minutes.
JITTER_FRACTION = 0.1
MAX_JITTER_S = 300.0


def jitter_spread(interval_s: float) -> float:
    return min(interval_s * JITTER_FRACTION, MAX_JITTER_S)


def random_jitter(spread: float) -> float:
    """An offset in [-spread/2, spread/2], different on every host."""
    return random.uniform(-spread / 2, spread / 2)


def run_interval(
    server: str,
    token: str,
    *,
    spool_dir: Path,
    interval_s: float,
    settings: Settings | None = None,
    http_timeout_s: float = 30.0,
    backoff: Backoff | None = None,
    cycles: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    jitter: Callable[[float], float] = random_jitter,
) -> None:
    """Capture every INTERVAL_S and deliver in between; a host without a usable GPU is logged
    and tried again next interval. CYCLES bounds the loop (tests); None runs for ever.

    A fleet restarted together must not report in lockstep: the first capture waits a random
    part of the spread (jitter_spread(INTERVAL_S)), and each later one comes INTERVAL_S plus a
    random offset of at most half the spread either way after the one before."""
    chosen = settings or Settings()
    spread = jitter_spread(interval_s)
    with Spool(spool_dir) as spool:
        uploader = Uploader(
            server,
            token,
            spool,
            timeout_s=http_timeout_s,
            backoff=backoff or Backoff(),
            sleep=sleep,
            clock=clock,
        )
        next_capture = clock() + spread / 2 + jitter(spread)
        sleep(max(0.0, next_capture - clock()))
        done = 0
        while cycles is None or done < cycles:
            done += 1
            unspooled: bytes | None = None
            try:
                body = capture(chosen)
            except gather.GatherError as err:
                log.error("no usable NVIDIA GPU/driver: %s; trying again in %g s", err, interval_s)
            else:
                try:
                    spool.add(body)
                except OSError as err:
                    log.error("cannot spool the report (%s); sending it from memory", err)
                    unspooled = body
            next_capture = max(next_capture + interval_s + jitter(spread), clock())
            result = uploader.drain(until=next_capture)
            # As in run_once: the unspooled report goes only once nothing older waits.
            if unspooled is not None and result.remaining == 0 and result.stopped_by is None:
                uploader.send_unspooled(unspooled)
            sleep(max(0.0, next_capture - clock()))


class _StderrHandler(logging.Handler):
    # Looks sys.stderr up at each record, so redirections (and test capture) are honoured.
    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never take the agent down
            self.handleError(record)


def _setup_logging(quiet: bool) -> None:
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("topoweb-collector: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="topoweb-collector",
        description="Capture this host's GPU topology (nvidia-smi, NVML, optional benchmarks) "
        "and upload it to topoweb.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--server",
        default=env("TOPOWEB_SERVER"),
        help="topoweb base URL, e.g. https://topoweb.example.org (env TOPOWEB_SERVER)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        help="file holding this host's collector token (else env TOPOWEB_TOKEN)",
    )
    parser.add_argument(
        "--enroll-token-file",
        type=Path,
        help="file holding the fleet's enrollment secret: when --token-file does not exist "
        "yet, trade it for this host's token and write that to --token-file (first contact)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="capture and deliver once (default)")
    mode.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help="capture every SECONDS, delivering in between",
    )
    mode.add_argument(
        "--dry-run",
        action="store_true",
        help="print exactly the JSON body that would be POSTed; upload nothing",
    )
    parser.add_argument(
        "--spool-dir",
        type=Path,
        default=Path(env("TOPOWEB_SPOOL_DIR", DEFAULT_SPOOL_DIR)),
        help=f"where reports wait for the server (default {DEFAULT_SPOOL_DIR})",
    )
    parser.add_argument(
        "--nvidia-smi",
        default="nvidia-smi",
        metavar="PATH",
        help="nvidia-smi to run (default: the one on PATH)",
    )
    parser.add_argument("--nvidia-smi-timeout", type=float, default=60.0, metavar="SECONDS")
    parser.add_argument(
        "--hostname",
        default=env("TOPOWEB_HOSTNAME"),
        help="name to report (default: this host's; env TOPOWEB_HOSTNAME, "
        "e.g. the node name in Kubernetes)",
    )
    parser.add_argument(
        "--benchmarks",
        nargs="+",
        default=[],
        metavar="KIND=PATH",
        help="run benchmarks and upload their output: nccl-tests=DIR (the "
        "directory of nccl-tests binaries), p2p-bandwidth-latency=PATH, nvbandwidth=PATH; "
        "an nccl-tests run also sends the topology NCCL detects (NCCL_TOPO_DUMP_FILE)",
    )
    parser.add_argument(
        "--nccl-tests",
        default=",".join(bench.DEFAULT_NCCL_TESTS),
        metavar="NAMES",
        help="comma-separated nccl-tests binaries to run (default all_reduce_perf)",
    )
    parser.add_argument(
        "--nccl-args",
        default=bench.DEFAULT_NCCL_ARGS,
        metavar="FLAGS",
        help="flags for each nccl-tests binary; {gpus} is the GPU count "
        f"(default {bench.DEFAULT_NCCL_ARGS!r})".replace("%", "%%"),
    )
    parser.add_argument(
        "--p2p-args", default="", metavar="FLAGS", help="flags for p2pBandwidthLatencyTest"
    )
    parser.add_argument(
        "--nvbandwidth-args",
        default=bench.DEFAULT_NVBANDWIDTH_ARGS,
        metavar="FLAGS",
        help=f"flags for nvbandwidth (default {bench.DEFAULT_NVBANDWIDTH_ARGS!r})",
    )
    xml = parser.add_mutually_exclusive_group()
    xml.add_argument(
        "--nccl-topo-xml",
        type=Path,
        metavar="PATH",
        help="send this NCCL topology XML (an NCCL_TOPO_DUMP_FILE dump) with the matrix",
    )
    xml.add_argument(
        "--nccl-topo-dump-with",
        type=Path,
        metavar="BINARY",
        help="run this nccl-tests binary (e.g. .../all_reduce_perf) on 8 bytes with "
        "NCCL_TOPO_DUMP_FILE set, and send the XML NCCL writes",
    )
    parser.add_argument("--benchmark-timeout", type=float, default=1800.0, metavar="SECONDS")
    parser.add_argument(
        "--ibnetdiscover",
        metavar="FABRIC",
        help="also run ibnetdiscover and send the InfiniBand fabric it prints under the name "
        "FABRIC (run this on one host per fabric)",
    )
    parser.add_argument(
        "--ibnetdiscover-command",
        default="ibnetdiscover",
        metavar="PATH",
        help="the ibnetdiscover to run (default: the one on PATH)",
    )
    parser.add_argument(
        "--retry-for",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --once: how long to keep retrying before leaving reports "
        "spooled for the next run (default 600)",
    )
    parser.add_argument("--http-timeout", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--host-root", type=Path, default=Path("/"), help=argparse.SUPPRESS)
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    return parser


def _read_token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            return token_file.read_text(encoding="utf-8").strip()
        except OSError as err:
            raise ValueError(f"cannot read token file {token_file}: {err.strerror}") from None
    return os.environ.get("TOPOWEB_TOKEN", "").strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.quiet)
    settings = Settings(
        nvidia_smi=args.nvidia_smi,
        nvidia_smi_timeout_s=args.nvidia_smi_timeout,
        hostname=args.hostname,
        host_root=args.host_root,
        benchmarks=tuple(args.benchmarks),
        nccl_tests=tuple(name for name in args.nccl_tests.split(",") if name),
        nccl_args=args.nccl_args,
        p2p_args=args.p2p_args,
        nvbandwidth_args=args.nvbandwidth_args,
        benchmark_timeout_s=args.benchmark_timeout,
        nccl_topo_xml=args.nccl_topo_xml,
        nccl_topo_dump_with=args.nccl_topo_dump_with,
    )
    try:
        # Missing binaries are a configuration error: say so before any capture.
        bench.plan(settings.benchmarks, gpus=1, nccl_tests=settings.nccl_tests)
        if settings.nccl_topo_dump_with is not None:
            bench.plan([f"nccl-tests={settings.nccl_topo_dump_with.parent}"], gpus=1,
                       nccl_tests=(settings.nccl_topo_dump_with.name,))  # fmt: skip
    except bench.BenchmarkError as err:
        log.error("%s", err)
        return EXIT_USAGE

    if args.dry_run:
        try:
            body = capture(settings)
        except gather.GatherError as err:
            log.error("no usable NVIDIA GPU/driver: %s", err)
            return EXIT_NO_GPU
        # Exactly the bytes an upload would send: no pretty-printing, no trailing newline.
        sys.stdout.buffer.write(body)
        sys.stdout.flush()
        return EXIT_OK

    try:
        if not args.server:
            raise ValueError("--server (or TOPOWEB_SERVER) is required unless --dry-run")
        report_url(args.server)
        if args.enroll_token_file is not None:
            if args.token_file is None:
                raise ValueError("--enroll-token-file needs --token-file (where to keep the token)")
            if not args.token_file.exists():
                secret = _read_token(args.enroll_token_file)
                hostname = settings.hostname or os.uname().nodename
                try:
                    enroll(args.server, secret, hostname, args.token_file,
                           timeout_s=args.http_timeout)  # fmt: skip
                except EnrollError as err:
                    log.error("%s", err)
                    return EXIT_NOT_DELIVERED
                log.info("enrolled %s; its token is in %s", hostname, args.token_file)
        token = _read_token(args.token_file)
        if not token:
            raise ValueError("no token: give --token-file or set TOPOWEB_TOKEN")
        if args.interval is not None and args.interval <= 0:
            raise ValueError("--interval must be a positive number of seconds")
    except ValueError as err:
        log.error("%s", err)
        return EXIT_USAGE
    parsed = urllib.parse.urlsplit(args.server)
    if parsed.scheme == "http" and parsed.hostname not in ("localhost", "127.0.0.1", "::1"):
        log.warning("sending the token over plain http to %s; use https", parsed.hostname)

    try:
        if args.interval is not None:
            run_interval(
                args.server,
                token,
                spool_dir=args.spool_dir,
                interval_s=args.interval,
                settings=settings,
                http_timeout_s=args.http_timeout,
            )
            return EXIT_OK
        result = run_once(
            args.server,
            token,
            spool_dir=args.spool_dir,
            settings=settings,
            retry_for_s=args.retry_for,
            http_timeout_s=args.http_timeout,
        )
        fabric_ok = args.ibnetdiscover is None or send_fabric(
            args.server,
            token,
            name=args.ibnetdiscover,
            command=args.ibnetdiscover_command,
            http_timeout_s=args.http_timeout,
        )
    except gather.GatherError as err:
        log.error("no usable NVIDIA GPU/driver: %s", err)
        return EXIT_NO_GPU
    except SpoolError as err:
        log.error("%s", err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130  # reports already spooled stay spooled
    delivered = result.remaining == 0 and not result.rejected and fabric_ok
    return EXIT_OK if delivered else EXIT_NOT_DELIVERED
