"""`manage.py create_api_token USERNAME`: a new API token (user created if needed), printed
alone on the last line."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from topoweb.fleet.services import create_api_token


class Command(BaseCommand):
    help = "Create an API token for USERNAME (creating the user if needed). Printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, **options: Any) -> None:
        token = create_api_token(options["username"])
        self.stderr.write(f"API token for {options['username']} (shown only now):")
        self.stdout.write(token)
