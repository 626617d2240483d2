"""`manage.py load_demo`: a demo fleet from the real captured outputs in tests/fixtures, and a
demo admin user. Running it again changes nothing: no new snapshots, and the admin's password is
set only when it is not already the demo one (a new hash would sign every browser out)."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db.models import QuerySet
from django.utils import timezone

from topoweb.config.celery_app import wait_for_background
from topoweb.core.formats import ParseError
from topoweb.fleet.changes import delete_servers, servers_changed
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
# Each capture's fleet name: (hostname stem, SKU), from what INDEX.tsv says of the machine it
# came from (vendor platform, GPU model and count, where it ran). Servers are <stem>-a01...
FLEET_NAMES = {
    "01": ("hgx-h200", "HGX H200 8-GPU"),
    "03": ("p40-pcie", "Tesla P40 8-GPU PCIe server"),
    "04": ("gtx-rig", "GTX 1070/1080 7-GPU rig"),
    "05": ("azure-nv12", "Azure NV12 (2x M60)"),
    "06": ("nimbix-4g", "Nimbix 4-GPU node"),
    "07": ("dgx1-p100", "DGX-1 (P100)"),
    "08": ("k80-4g", "Tesla K80 4-GPU server"),
    "09": ("esc8000a-ada", "RTX 6000 Ada 4-GPU server (ESC8000A-E12)"),
    "10": ("wrx90-ada", "RTX 6000 Ada 2-GPU workstation (WRX90)"),
    "12": ("dgx1v", "DGX-1V (V100 32GB)"),
    "13": ("polaris", "Polaris node (4x A100 NV4)"),
    "15": ("a100-nv4", "A100 80GB 4-GPU NV4 node"),
    "17": ("rtx3090-ws", "RTX 3090 2-GPU NVLink-bridge workstation"),
    "18": ("adroit-a100", "A100 PCIe 4-GPU server"),
    "20": ("della-a100", "HGX A100 4-GPU"),
    "22": ("hgx-h100", "HGX H100 8-GPU (EPYC 9654)"),
    "25": ("vm-h100", "H100 PCIe 1-GPU VM"),
    "26": ("dgx-a100", "DGX A100"),
    "28": ("a100-8g", "A100 8-GPU NVLink server (4 NICs)"),
    "29": ("v100-vm", "V100 8-GPU cloud VM"),
    "31": ("slurm-v100", "V100 8-GPU SLURM node"),
    "32": ("autodl-2080ti", "RTX 2080 Ti 2-GPU container"),
    "34": ("infer-pcie", "4-GPU PCIe inference box"),
    "36": ("l40s-4g", "L40S 4-GPU server"),
    "38": ("hgx-h20", "HGX H20 8-GPU"),
    "41": ("rtx5090-ws", "RTX 5090 2-GPU workstation"),
    "42": ("h200-vm", "H200 1-GPU VM (Firecracker)"),
    "43": ("h800-4g", "H800 4-GPU node (17 NICs)"),
    "44": ("witherspoon-v100", "IBM Witherspoon (POWER9, 3x V100 SXM2)"),
}


class Command(BaseCommand):
    help = "Load a demo fleet from tests/fixtures and create the demo admin user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fixtures", default=str(FIXTURES))

    def handle(self, *args: Any, **options: Any) -> None:
        fixtures = Path(options["fixtures"])
        index = _read_index(fixtures / "INDEX.tsv")
        created = skipped = 0
        loaded: set[str] = set()
        for name, row in sorted(index.items()):
            if not name.startswith("topo_"):
                continue
            text = (fixtures / name).read_text(encoding="utf-8")
            benchmarks = [
                BenchmarkInput(BENCHMARK_KINDS[other.split("_")[0]], (fixtures / other).read_text())
                for other in _paired(row, fixtures)
            ]
            number = name.split("_")[1]
            stem, sku = _fleet_name(number, name)
            texts = [text] * SERVERS_PER_SKU
            if name.startswith(ODD_ONE_OUT[0]):
                odd = next(n for n in index if n.startswith(ODD_ONE_OUT[1]))
                texts.append((fixtures / odd).read_text(encoding="utf-8"))
            for i, server_text in enumerate(texts, start=1):
                hostname = f"{stem}-a{i:02d}"
                loaded.add(hostname)
                server, _ = Server.objects.get_or_create(hostname=hostname)
                labels = {"sku": sku, "rack": f"r{number}", "fixture": name}
                if server.labels != labels:
                    server.labels = labels
                    server.save(update_fields=["labels"])
                    servers_changed([server.pk])
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
                        _delete(Server.objects.filter(hostname=hostname, latest_snapshot=None))
                        skipped += 1
                        break
                assert result is not None  # nothing loaded breaks out above
                created += result.created
        # Without a broker the analyses and health checks run in this process's background
        # thread: the demo is whole once they have.
        wait_for_background()
        # Demo servers of an older naming scheme go, so a rerun leaves exactly this fleet.
        _delete(Server.objects.filter(labels__has_key="fixture").exclude(hostname__in=loaded))
        user, _ = get_user_model().objects.get_or_create(
            username=DEMO_USER, defaults={"is_staff": True, "is_superuser": True}
        )
        if not user.check_password(DEMO_PASSWORD):
            user.set_password(DEMO_PASSWORD)
            user.save(update_fields=["password"])
        demo = Server.objects.filter(labels__has_key="fixture").count()
        others = Server.objects.exclude(labels__has_key="fixture").count()
        self.stdout.write(
            f"Demo fleet: {demo} servers ({created} new snapshots, "
            f"{skipped} fixtures the readers cannot take yet)"
            + (f"; {others} other servers left as they are." if others else ".")
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


def _fleet_name(number: str, name: str) -> tuple[str, str]:
    """Hostname stem and SKU of a capture; a capture added to the fixtures later gets a plain
    name from its file name until FLEET_NAMES knows it."""
    if number in FLEET_NAMES:
        return FLEET_NAMES[number]
    slug = "-".join(name.split("_", 2)[2].removesuffix(".txt").split("-")[:2])
    return f"{slug}-f{number}", f"{slug} server"


def _read_index(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["file"]: row for row in csv.DictReader(handle, delimiter="\t")}


def _paired(row: dict[str, str], fixtures: Path) -> list[str]:
    """Benchmark files INDEX.tsv pairs with a topology capture, when they exist here."""
    names = re.findall(r"(?:nccl|p2p)_[\w.-]+?\.txt", row.get("paired_with") or "")
    return [n for n in names if (fixtures / n).exists()]


def _gpu_model(column: str) -> str:
    """The GPU model INDEX.tsv gives a capture, never a platform or SKU name: notes go ("A100
    80GB (per surrounding text)"), a platform gives way to the GPU in its note ("DGX A100 (A100
    SXM4)" is an A100 SXM4), and a mixed rig keeps its parts with their counts ("6x A + 1x B"),
    as an uploader writes them: the ingest prices its weakest part and shows the mix."""
    if column.lower().startswith("not stated"):
        return ""
    note = re.search(r"\((.*?)\)", column)
    model = re.sub(r"\s*\(.*?\)", "", column).strip()
    if re.match(r"(DGX|HGX)\b", model):
        return note.group(1).strip() if note else ""
    return model


def _delete(servers: QuerySet[Server]) -> None:
    """Delete these servers as every writer does (fleet.changes.delete_servers)."""
    delete_servers(servers.values_list("pk", flat=True))
