"""Snapshot.nvlink_domain, filled in from the NVML facts already stored, so that job placement
sees servers of one multi-node NVLink domain from the first question after the upgrade."""

from typing import Any

from django.db import migrations, models

from topoweb.core.formats.nvml import nvlink_domain

BATCH = 500


def fill_in(apps: Any, schema_editor: Any) -> None:
    snapshot_model = apps.get_model("fleet", "Snapshot")
    rows = snapshot_model.objects.using(schema_editor.connection.alias).only("id", "nvml")
    batch = []
    for snapshot in rows.order_by("id").iterator(chunk_size=BATCH):
        snapshot.nvlink_domain = nvlink_domain(snapshot.nvml)
        if snapshot.nvlink_domain:
            batch.append(snapshot)
        if len(batch) == BATCH:
            snapshot_model.objects.bulk_update(batch, ["nvlink_domain"])
            batch = []
    if batch:
        snapshot_model.objects.bulk_update(batch, ["nvlink_domain"])


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0009_audit_event"),
    ]

    operations = [
        migrations.AddField(
            model_name="snapshot",
            name="nvlink_domain",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        # Going back drops the column: nothing to undo.
        migrations.RunPython(fill_in, migrations.RunPython.noop, elidable=True),
    ]
