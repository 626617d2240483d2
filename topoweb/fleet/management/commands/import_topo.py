"""`manage.py import_topo FILE --host NAME`: store `nvidia-smi topo -m` output as a snapshot."""

import re
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from topoweb.core.formats import ParseError
from topoweb.fleet.models import Source
from topoweb.fleet.services import ingest_report


class Command(BaseCommand):
    help = "Import a saved `nvidia-smi topo -m` output as a snapshot of server NAME."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")
        parser.add_argument("--host", required=True, help="hostname of the server it came from")
        parser.add_argument("--gpu-model", default="", help="GPU model, when no NVML facts exist")

    def handle(self, *args: Any, **options: Any) -> None:
        # The API's rule for hostnames: a name every page URL can carry.
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", options["host"]):
            raise CommandError(
                f"--host {options['host']!r}: a hostname is letters, digits, dots, dashes and "
                "underscores, starting with a letter or digit"
            )
        path = Path(options["file"])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: cannot read: {exc}") from exc
        try:
            result = ingest_report(
                hostname=options["host"],
                topo_text=text,
                captured_at=timezone.now(),
                source=Source.UPLOAD,
                gpu_model_hint=options["gpu_model"],
            )
        except ParseError as exc:
            raise CommandError(f"{path}: {exc}") from exc
        assert result.snapshot is not None
        verb = "stored as new" if result.created else "already stored as"
        self.stdout.write(f"{path}: {verb} snapshot {result.snapshot.pk} of {options['host']}")
        # What the reader guessed or repaired is part of the answer, not a footnote.
        for warning in result.snapshot.document.get("warnings", []):
            self.stdout.write(f"{path}: reader warning: {warning}")
