"""Django app configuration of the fleet."""

from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "topoweb.fleet"
    label = "fleet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the OpenAPI description of the Bearer token authentication, and the
        # fabric worker's tasks by name (services send them by name; the embedded default runs
        # them in this process).
        from topoweb.fleet import access, authentication, cached_tokens, tasks  # noqa: F401

        access.connect()  # the audit trail's receivers (sign-ins, tokens made)
        cached_tokens.connect()  # kept tokens forgotten when they (or their users) change
