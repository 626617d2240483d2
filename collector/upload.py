"""Delivers reports: a crash-safe spool on disk, POSTed oldest first with backoff; never lost."""

from __future__ import annotations

import enum
import errno
import fcntl
import hashlib
import http.client
import json
import logging
import os
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

from collector import __version__

log = logging.getLogger("collector")

REPORTS_PATH = "/api/v1/reports"
FABRIC_REPORTS_PATH = "/api/v1/fabric-reports/"
ENROLL_PATH = "/api/v1/enroll/"
# A spooled report's name: a 20-digit nanosecond stamp (oldest sorts first) and its digest.
_SPOOLED = re.compile(r"\d{20}-[0-9a-f]{16}\.json")


class SpoolError(Exception):
    """The spool directory cannot be used (unwritable, or another collector holds it)."""


def report_url(server: str, path: str = REPORTS_PATH) -> str:
    parsed = urllib.parse.urlsplit(server)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"server URL {server!r} must be http(s)://host[:port][/prefix]")
    return server.rstrip("/") + path


@dataclass(frozen=True)
class Response:
    status: int
    body: str
    retry_after_s: float | None = None


def _retry_after(headers: Message | None) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from an API, and backoff covers it


def post_report(
    server: str, token: str, body: bytes, *, timeout_s: float, path: str = REPORTS_PATH
) -> Response:
    """POST BODY to the server's reports endpoint (or PATH). Any HTTP answer is returned; a
    transport failure (refused, reset, timeout, DNS) raises OSError."""
    request = urllib.request.Request(
        report_url(server, path),
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "User-Agent": f"topoweb-collector/{__version__}",
            # The same capture always carries the same key; a server may use it, the body's
            # sha256 makes re-sends harmless either way.
            "Idempotency-Key": hashlib.sha256(body).hexdigest(),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            text = answer.read().decode("utf-8", errors="replace")
            return Response(answer.status, text, _retry_after(answer.headers))
    except urllib.error.HTTPError as err:
        text = err.read().decode("utf-8", errors="replace") if err.fp is not None else ""
        return Response(err.code, text, _retry_after(err.headers))


class EnrollError(Exception):
    """The server would not give this host a token (or could not be reached)."""


def enroll(server: str, enrollment_token: str, hostname: str, token_file: Path, *,
           timeout_s: float) -> str:  # fmt: skip
    """Trade the fleet's enrollment secret for this host's collector token on first contact
    and keep it in TOKEN_FILE (0600, written whole or not at all)."""
    body = json.dumps({"hostname": hostname}).encode()
    try:
        answer = post_report(server, enrollment_token, body, timeout_s=timeout_s,
                             path=ENROLL_PATH)  # fmt: skip
    except OSError as err:
        raise EnrollError(f"cannot reach {server} to enroll: {err}") from None
    if answer.status != 201:
        raise EnrollError(f"enrollment refused ({answer.status}): {answer.body[:300]}")
    token = str(json.loads(answer.body)["token"])
    token_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = token_file.with_name(token_file.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, token_file)
    _fsync_dir(token_file.parent)
    return token


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(directory: Path, tmp_dir: Path, name: str, data: bytes) -> Path:
    """Write DATA as DIRECTORY/NAME so that a crash leaves either nothing or the whole file."""
    tmp = tmp_dir / (name + ".tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        # A full disk must not keep a half-written copy eating what space is left.
        tmp.unlink(missing_ok=True)
        raise
    final = directory / name
    os.replace(tmp, final)
    _fsync_dir(directory)
    return final


class Spool:
    """Reports waiting for the server, one file each in `pending/`, named so that names sort oldest
    first; `rejected/` keeps what the server refused, with the reason beside it.

    Each report is written here before any upload is tried, so a crash or restart loses nothing.
    One collector per spool directory (an flock guards it).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pending_dir = root / "pending"
        self.rejected_dir = root / "rejected"
        self._tmp_dir = root / "tmp"
        try:
            for directory in (self.pending_dir, self.rejected_dir, self._tmp_dir):
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._lock = open(root / "lock", "a")  # noqa: SIM115 - held for the spool's life
        except OSError as err:
            raise SpoolError(f"cannot use spool directory {root}: {err.strerror}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            self._lock.close()
            if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise SpoolError(f"another collector is using spool directory {root}") from None
            raise SpoolError(f"cannot lock spool directory {root}: {err.strerror}") from None
        # Leftovers of a write cut short by a crash: never renamed, so never a report.
        for leftover in self._tmp_dir.iterdir():
            leftover.unlink(missing_ok=True)

    def close(self) -> None:
        self._lock.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pending(self) -> list[Path]:
        """Waiting reports, oldest first. Only names this spool wrote count: a file a person
        left in the folder is neither sent nor mistaken for the newest report."""
        return sorted(p for p in self.pending_dir.glob("*.json") if _SPOOLED.fullmatch(p.name))

    def add(self, body: bytes) -> Path:
        """Keep BODY until delivered; the same body twice is kept once."""
        digest = hashlib.sha256(body).hexdigest()[:16]
        waiting = self.pending()
        for path in waiting:
            if path.name.endswith(f"-{digest}.json") and path.read_bytes() == body:
                return path
        # Strictly after the newest waiting report even if the wall clock stepped back.
        newest = int(waiting[-1].name.split("-", 1)[0]) if waiting else 0
        stamp = max(time.time_ns(), newest + 1)
        return _write_atomically(
            self.pending_dir, self._tmp_dir, f"{stamp:020d}-{digest}.json", body
        )

    def delivered(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        _fsync_dir(self.pending_dir)

    def reject(self, path: Path, reason: str) -> Path:
        """Move a refused report aside (kept for a person to read), with REASON next to it."""
        _write_atomically(
            self.rejected_dir, self._tmp_dir, path.stem + ".reason.txt", reason.encode() + b"\n"
        )
        target = self.rejected_dir / path.name
        os.replace(path, target)
        _fsync_dir(self.rejected_dir)
        _fsync_dir(self.pending_dir)
        return target


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: delay n in [c/2, c], c = min(cap, base * factor**(n-1))."""

    base_s: float = 5.0
    cap_s: float = 600.0
    factor: float = 2.0

    def delay(self, failures: int, rng: random.Random) -> float:
        ceiling = min(self.cap_s, self.base_s * self.factor ** max(0, failures - 1))
        # Half fixed, half random: hosts that lost the server together do not return in step.
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


class Outcome(enum.Enum):
    DELIVERED = "delivered"  # 2xx: stored now, or already stored (same content)
    REJECTED = "rejected"  # the report itself was refused (400, 413, ...): moved aside
    RETRY = "retry"  # server away, 5xx, 429: kept, tried again later
    AUTH = "auth"  # 401/403: the token, not the report, is wrong: kept, flush stopped


# Statuses that say nothing against the report itself.
_AUTH_STATUSES = frozenset({401, 403})
_RETRY_4XX = frozenset({408, 429})


def classify(status: int) -> Outcome:
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in _AUTH_STATUSES:
        return Outcome.AUTH
    if 400 <= status < 500 and status not in _RETRY_4XX:
        return Outcome.REJECTED
    return Outcome.RETRY


@dataclass(frozen=True)
class Delivery:
    """What became of one spooled report in one attempt."""

    name: str
    outcome: Outcome
    status: int | None
    detail: str
    response: Any = None  # the server's JSON answer (snapshot id) for a delivered report


@dataclass
class FlushResult:
    """The sum of one or more passes over the spool."""

    deliveries: list[Delivery] = field(default_factory=list)
    remaining: int = 0
    stopped_by: Delivery | None = None  # the retry/auth answer that ended the last pass

    @property
    def delivered(self) -> list[Delivery]:
        return [d for d in self.deliveries if d.outcome is Outcome.DELIVERED]

    @property
    def rejected(self) -> list[Delivery]:
        return [d for d in self.deliveries if d.outcome is Outcome.REJECTED]


def _short(text: str, limit: int = 300) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


def _server_message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return _short(body) or "no message"
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            if key in data:
                value = data[key]
                return _short(value if isinstance(value, str) else json.dumps(value))
    return _short(body)


class Uploader:
    """Sends the spool's reports to one server with one token, oldest first."""

    def __init__(
        self,
        server: str,
        token: str,
        spool: Spool,
        *,
        timeout_s: float = 30.0,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        report_url(server)  # refuse a malformed URL now, not at the first upload
        self.server = server
        self.token = token
        self.spool = spool
        self.timeout_s = timeout_s
        self.backoff = backoff or Backoff()
        self.rng = rng or random.Random()
        self.sleep = sleep
        self.clock = clock

    def _send(self, path: Path, body: bytes | None = None) -> tuple[Delivery, float | None]:
        name = path.name
        try:
            answer = post_report(
                self.server,
                self.token,
                path.read_bytes() if body is None else body,
                timeout_s=self.timeout_s,
            )
        except (OSError, http.client.HTTPException) as err:
            reason = getattr(err, "reason", None) or err or type(err).__name__
            return Delivery(name, Outcome.RETRY, None, f"server unreachable ({reason})"), None
        outcome = classify(answer.status)
        response: Any = None
        if outcome is Outcome.DELIVERED:
            try:
                response = json.loads(answer.body) if answer.body else None
            except ValueError:
                response = None
        detail = f"HTTP {answer.status}: {_server_message(answer.body)}"
        return Delivery(name, outcome, answer.status, detail, response), answer.retry_after_s

    def send_unspooled(self, body: bytes) -> Delivery:
        """One try at a report the spool could not keep (disk full): it exists only in memory."""
        delivery, _ = self._send(Path("unspooled.json"), body)
        if delivery.outcome is Outcome.DELIVERED:
            log.info("unspooled report delivered (%s)", delivery.detail)
        else:
            log.error("unspooled report not delivered (%s); it is lost", delivery.detail)
        return delivery

    def flush(self) -> tuple[FlushResult, float | None]:
        """One pass, oldest first, until the spool is empty or an answer says stop.

        Returns the result and the server's Retry-After, if it sent one.
        """
        result = FlushResult()
        retry_after: float | None = None
        for path in self.spool.pending():
            delivery, retry_after = self._send(path)
            result.deliveries.append(delivery)
            if delivery.outcome is Outcome.DELIVERED:
                self.spool.delivered(path)
                log.info("report %s delivered (%s)", delivery.name, delivery.detail)
            elif delivery.outcome is Outcome.REJECTED:
                moved = self.spool.reject(path, delivery.detail)
                log.error(
                    "server refused report %s (%s); moved to %s and not retried",
                    delivery.name,
                    delivery.detail,
                    moved,
                )
            else:
                # Oldest first: a later report never overtakes one still waiting.
                result.stopped_by = delivery
                break
        result.remaining = len(self.spool.pending())
        return result, retry_after

    def drain(self, until: float | None = None) -> FlushResult:
        """Flush, backing off between passes, until the spool is empty, the token is refused, or
        the next wait would pass UNTIL (a `clock()` reading; None: keep going)."""
        total = FlushResult()
        failures = 0
        while True:
            result, retry_after = self.flush()
            total.deliveries.extend(result.deliveries)
            total.remaining = result.remaining
            total.stopped_by = result.stopped_by
            stop = result.stopped_by
            if stop is None:
                return total
            if stop.outcome is Outcome.AUTH:
                log.error(
                    "server refused the token (%s); %d report(s) kept in %s until it is fixed",
                    stop.detail,
                    result.remaining,
                    self.spool.pending_dir,
                )
                return total
            failures = 1 if result.delivered else failures + 1
            wait = self.backoff.delay(failures, self.rng)
            if retry_after is not None:
                wait = min(self.backoff.cap_s, max(wait, retry_after))
            if until is not None and self.clock() + wait > until:
                log.warning(
                    "%s; %d report(s) kept in %s for the next run",
                    stop.detail,
                    result.remaining,
                    self.spool.pending_dir,
                )
                return total
            log.warning(
                "%s; %d report(s) spooled, next try in %.1f s",
                stop.detail,
                result.remaining,
                wait,
            )
            self.sleep(wait)
