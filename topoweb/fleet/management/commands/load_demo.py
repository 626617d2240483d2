"""`manage.py load_demo`: a demo fleet from the real captured outputs in tests/fixtures, and a
demo admin user. Running it again changes nothing but the admin password (reset to the demo one)."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from topoweb.core.formats import ParseError
from topoweb.fleet.models import Server, Source
from topoweb.fleet.services import BenchmarkInput, Ingested, ingest_report

FIXTURES = Path(settings.BASE_DIR) / "tests" / "fixtures"
DEMO_USER = "admin"
DEMO_PASSWORD = "topoweb-demo"
SERVERS_PER_SKU = 3
BENCHMARK_KINDS = {"nccl": "nccl-tests", "p2p": "p2p-bandwidth-latency"}
# One server of this SKU is built from a different V100 mesh capture, so the demo shows a
# server wired unlike its SKU siblings.
ODD_ONE_OUT = ("topo_12_", "topo_31_")


class Command(BaseCommand):
    help = "Load a demo fleet from tests/fixtures and create the demo admin user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fixtures", default=str(FIXTURES))

    def handle(self, *args: Any, **options: Any) -> None:
        fixtures = Path(options["fixtures"])
        index = _read_index(fixtures / "INDEX.tsv")
        created = skipped = 0
        for name, row in sorted(index.items()):
            if not name.startswith("topo_"):
                continue
            text = (fixtures / name).read_text(encoding="utf-8")
            benchmarks = [
                BenchmarkInput(BENCHMARK_KINDS[other.split("_")[0]], (fixtures / other).read_text())
                for other in _paired(row, fixtures)
            ]
            number, slug = name.split("_")[1], name.split("_", 2)[2].removesuffix(".txt")
            short = "-".join(slug.split("-")[:2])
            sku = f"{short} (fixture {number})"
            texts = [text] * SERVERS_PER_SKU
            if name.startswith(ODD_ONE_OUT[0]):
                odd = next(n for n in index if n.startswith(ODD_ONE_OUT[1]))
                texts.append((fixtures / odd).read_text(encoding="utf-8"))
            for i, server_text in enumerate(texts, start=1):
                hostname = f"{short}-f{number}-{i:02d}"
                server, _ = Server.objects.get_or_create(hostname=hostname)
                labels = {"sku": sku, "rack": f"r{number}", "fixture": name}
                if server.labels != labels:
                    server.labels = labels
                    server.save(update_fields=["labels"])
                attached = benchmarks if i == 1 else []
                try:
                    result = _ingest(hostname, server_text, attached, row)
                except ParseError as exc:
                    result = None
                    if attached:
                        self.stderr.write(f"{name}: benchmarks left out: {exc}")
                        try:
                            result = _ingest(hostname, server_text, [], row)
                        except ParseError as again:
                            exc = again
                    if result is None:
                        self.stderr.write(f"{name}: not loaded: {exc}")
                        Server.objects.filter(hostname=hostname, latest_snapshot=None).delete()
                        skipped += 1
                        break
                created += result.created
        user, _ = get_user_model().objects.get_or_create(
            username=DEMO_USER, defaults={"is_staff": True, "is_superuser": True}
        )
        user.set_password(DEMO_PASSWORD)
        user.save(update_fields=["password"])
        self.stdout.write(
            f"Demo fleet: {Server.objects.count()} servers ({created} new snapshots, "
            f"{skipped} fixtures the readers cannot take yet)."
        )
        self.stdout.write(f"Demo admin: username {DEMO_USER!r}, password {DEMO_PASSWORD!r}")


def _ingest(
    hostname: str, text: str, benchmarks: list[BenchmarkInput], row: dict[str, str]
) -> Ingested:
    return ingest_report(
        hostname=hostname,
        topo_text=text,
        captured_at=timezone.now(),
        source=Source.UPLOAD,
        benchmarks=benchmarks,
        gpu_model_hint=_gpu_model(row["gpu_model"]),
    )


def _read_index(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["file"]: row for row in csv.DictReader(handle, delimiter="\t")}


def _paired(row: dict[str, str], fixtures: Path) -> list[str]:
    """Benchmark files INDEX.tsv pairs with a topology capture, when they exist here."""
    names = re.findall(r"(?:nccl|p2p)_[\w.-]+?\.txt", row.get("paired_with") or "")
    return [n for n in names if (fixtures / n).exists()]


def _gpu_model(column: str) -> str:
    """INDEX.tsv's GPU model without its notes ("A100 80GB (per surrounding text)")."""
    model = re.sub(r"\s*\(.*?\)", "", column).strip()
    return "" if model.lower().startswith("not stated") else model
