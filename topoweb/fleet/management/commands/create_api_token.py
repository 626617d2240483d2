"""`manage.py create_api_token USERNAME [--scope read|upload]`: a new API token (user created
if needed), printed alone on the last line. Tokens read only, unless made with --scope upload."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from topoweb.fleet.access import create_api_token
from topoweb.fleet.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for USERNAME (creating the user if needed). Printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--scope",
            choices=ApiToken.Scope.values,
            default=ApiToken.Scope.READ,
            help="read (the default): the read API and questions; upload: also POST "
            "/api/v1/uploads for any host",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        token = create_api_token(options["username"], options["scope"])
        self.stderr.write(
            f"API token ({options['scope']} scope) for {options['username']} (shown only now):"
        )
        self.stdout.write(token)
