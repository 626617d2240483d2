"""Collector and API tokens become djangorestframework-api-key keys, in three steps (each its
own transaction on PostgreSQL): this one adds the package's columns beside ours, 0015 carries
every token over, 0016 drops what the package replaces."""

from django.db import migrations, models

EXPIRES = "Once API key expires, clients cannot use it anymore."
REVOKED = "If the API key is revoked, clients cannot use it anymore. (This cannot be undone.)"


def _package_columns(model_name: str) -> list[migrations.operations.base.Operation]:
    return [
        migrations.RenameField(model_name=model_name, old_name="created_at", new_name="created"),
        migrations.AddField(
            model_name=model_name,
            name="hashed_key",
            field=models.CharField(default="", editable=False, max_length=150),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name=model_name,
            name="name",
            field=models.CharField(default="", max_length=50),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name=model_name,
            name="revoked",
            field=models.BooleanField(blank=True, default=False, help_text=REVOKED),
        ),
        migrations.AddField(
            model_name=model_name,
            name="expiry_date",
            field=models.DateTimeField(
                blank=True, help_text=EXPIRES, null=True, verbose_name="Expires"
            ),
        ),
        # Empty on rows made by the package until 0016 drops it (and so back, see 0015).
        migrations.AlterField(
            model_name=model_name,
            name="token_sha256",
            field=models.CharField(max_length=64, null=True, unique=True),
        ),
        # The package's key: "<prefix>.<hashed key>", set by 0015.
        migrations.AlterField(
            model_name=model_name,
            name="id",
            field=models.CharField(
                editable=False, max_length=150, primary_key=True, serialize=False, unique=True
            ),
        ),
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0013_snapshot_gpu_models"),
    ]

    operations = [*_package_columns("collectortoken"), *_package_columns("apitoken")]
