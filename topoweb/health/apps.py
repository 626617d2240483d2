"""Django app configuration of the health checks."""

from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "topoweb.health"
    label = "health"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registration at start-up, the one place Django allows it: the Celery tasks by name
        # (services send them by name), and what a new snapshot or benchmark, or a finished class
        # analysis, asks of this app, and the writer of each server's stored read documents.
        from topoweb.analysis.services import after_class_analysed
        from topoweb.fleet.changes import writes_documents
        from topoweb.fleet.services import after_new_benchmark, after_new_snapshot
        from topoweb.health import documents, services, tasks  # noqa: F401

        after_new_snapshot(services.on_new_snapshot)
        after_new_benchmark(services.on_new_report)
        after_class_analysed(services.on_class_analysed)
        writes_documents(documents.write_documents, documents.drop_documents)
