"""Django app configuration of the health checks."""

from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "topoweb.health"
    label = "health"
    default_auto_field = "django.db.models.BigAutoField"
