"""The large columns ingest writes (a snapshot's document and raw text, a class's document)
compressed with lz4 instead of PostgreSQL's default pglz where the server has it (PostgreSQL 14
and later, built with lz4): a 576-GPU topology document is about 10 MB of JSON, and pglz spent
about as long compressing it as the server spent reading it. Values already stored keep their
compression; reads decompress either. Nothing to do on SQLite."""

from typing import Any

from django.db import migrations

COLUMNS = (("Snapshot", "document"), ("Snapshot", "raw_text"), ("TopologyClass", "document"))


def _has_lz4(cursor: Any) -> bool:
    cursor.execute(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    )
    row = cursor.fetchone()
    return bool(row and row[0])


def set_compression(method: str) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        if connection.vendor != "postgresql":
            return
        with connection.cursor() as cursor:
            if method == "lz4" and not _has_lz4(cursor):
                return
            for model, field in COLUMNS:
                meta = apps.get_model("fleet", model)._meta
                table = schema_editor.quote_name(meta.db_table)
                column = schema_editor.quote_name(meta.get_field(field).column)
                cursor.execute(
                    f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION {method}"
                )

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0011_snapshot_export"),
    ]

    operations = [
        migrations.RunPython(set_compression("lz4"), set_compression("default")),
    ]
