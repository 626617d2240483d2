"""Snapshot.wiring_sha256 and Snapshot.gpu_memory_bytes, filled in for the snapshots already
stored, so that servers wired and numbered alike share one cost model, and placement reads
GPU memory without the NVML facts, from the first question after the upgrade."""

from typing import Any

from django.db import migrations, models

from topoweb.core.fingerprint import wiring_sha256
from topoweb.core.formats.nvml import smallest_gpu_memory

BATCH = 500


def fill_in(apps: Any, schema_editor: Any) -> None:
    snapshot_model = apps.get_model("fleet", "Snapshot")
    fields = ["wiring_sha256", "gpu_memory_bytes"]
    rows = snapshot_model.objects.using(schema_editor.connection.alias).only(
        "id", "document", "nvml"
    )
    batch = []
    for snapshot in rows.order_by("id").iterator(chunk_size=BATCH):
        snapshot.wiring_sha256 = wiring_sha256(snapshot.document)
        snapshot.gpu_memory_bytes = smallest_gpu_memory(snapshot.nvml)
        batch.append(snapshot)
        if len(batch) == BATCH:
            snapshot_model.objects.bulk_update(batch, fields)
            batch = []
    if batch:
        snapshot_model.objects.bulk_update(batch, fields)


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0004_benchmark_calibration"),
    ]

    operations = [
        migrations.AddField(
            model_name="snapshot",
            name="wiring_sha256",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="snapshot",
            name="gpu_memory_bytes",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        # Going back drops the column: nothing to undo.
        migrations.RunPython(fill_in, migrations.RunPython.noop, elidable=True),
    ]
