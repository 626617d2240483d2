"""Each stored server's read documents (health.ServerDocument), written for the servers
already stored, so that the list and detail serve stored text from the first read after the
upgrade (a server without one is still served: its document is built when read)."""

from typing import Any

from django.db import migrations

BATCH = 200


def fill_in(apps: Any, schema_editor: Any) -> None:
    # The documents' shape is the API serializers' over today's models: the historical models
    # cannot run them, so the writer is today's (should a later migration outgrow it, this one
    # may become a no-op: reads build a missing document).
    from topoweb.health.documents import write_documents

    server_model = apps.get_model("fleet", "Server")
    ids = list(server_model.objects.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), BATCH):
        write_documents(ids[start : start + BATCH])


class Migration(migrations.Migration):
    dependencies = [("health", "0007_server_documents")]

    operations = [migrations.RunPython(fill_in, migrations.RunPython.noop)]
