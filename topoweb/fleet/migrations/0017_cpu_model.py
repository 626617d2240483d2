"""Snapshot.cpu_model and TopologyClass.cpu_model, filled in from the host facts already
stored, so that the socket link of every server's and class's model comes from its CPU from
the first evaluation after the upgrade (cost model version 13 evaluates them all again)."""

from typing import Any

from django.db import migrations, models

from topoweb.core.formats.nvml import read_host

BATCH = 500


def _cpu_model(host: Any) -> str:
    return (read_host(host).cpu_model or "")[:200]


def fill_in(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    snapshot_model = apps.get_model("fleet", "Snapshot")
    class_model = apps.get_model("fleet", "TopologyClass")
    rows = snapshot_model.objects.using(alias).filter(host__isnull=False)
    batch = []
    # A class takes the CPU of its first snapshot that names one, as ingest would have.
    first_of_class: dict[int, str] = {}
    for snapshot in rows.only("id", "host", "topology_class_id").order_by("id").iterator(BATCH):
        snapshot.cpu_model = _cpu_model(snapshot.host)
        if not snapshot.cpu_model:
            continue
        first_of_class.setdefault(snapshot.topology_class_id, snapshot.cpu_model)
        batch.append(snapshot)
        if len(batch) == BATCH:
            snapshot_model.objects.using(alias).bulk_update(batch, ["cpu_model"])
            batch = []
    if batch:
        snapshot_model.objects.using(alias).bulk_update(batch, ["cpu_model"])
    for class_id, cpu_model in first_of_class.items():
        class_model.objects.using(alias).filter(pk=class_id).update(cpu_model=cpu_model)


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0016_tokens_api_key_finish"),
    ]

    operations = [
        migrations.AddField(
            model_name="snapshot",
            name="cpu_model",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="topologyclass",
            name="cpu_model",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        # Going back drops the columns: nothing to undo.
        migrations.RunPython(fill_in, migrations.RunPython.noop, elidable=True),
    ]
