"""`manage.py create_collector_token HOST`: a new collector token, alone on the last line."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from topoweb.fleet.access import create_collector_token


class Command(BaseCommand):
    help = "Create a token that lets the collector on HOST upload its reports. Printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("hostname")

    def handle(self, *args: Any, **options: Any) -> None:
        token = create_collector_token(options["hostname"])
        self.stderr.write(f"Collector token for {options['hostname']} (shown only now):")
        self.stdout.write(token)
