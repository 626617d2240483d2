"""Django app configuration of the analyses."""

from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    name = "topoweb.analysis"
    label = "analysis"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registration at start-up, the one place Django allows it: the Celery tasks by name
        # (services send them by name), and what a new snapshot or run asks of this app.
        from topoweb.analysis import services, tasks  # noqa: F401
        from topoweb.fleet.services import after_new_benchmark, after_new_snapshot

        after_new_snapshot(services.on_new_snapshot)
        after_new_benchmark(services.on_new_benchmark)
