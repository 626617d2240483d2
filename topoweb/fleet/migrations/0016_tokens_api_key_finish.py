"""The columns the package's key replaces go: our digest (its hashed key), revocation time (its
`revoked`), and the prefix takes the package's definition (8 characters, unique)."""

from django.db import migrations, models

NAME = "A free-form name for the API key. Need not be unique. 50 characters max."


def _finish(model_name: str, verbose_name: str) -> list[migrations.operations.base.Operation]:
    return [
        migrations.RemoveField(model_name=model_name, name="token_sha256"),
        migrations.RemoveField(model_name=model_name, name="revoked_at"),
        migrations.AlterField(
            model_name=model_name,
            name="prefix",
            field=models.CharField(editable=False, max_length=8, unique=True),
        ),
        migrations.AlterField(
            model_name=model_name,
            name="created",
            field=models.DateTimeField(auto_now_add=True, db_index=True),
        ),
        migrations.AlterField(
            model_name=model_name,
            name="name",
            field=models.CharField(default=None, help_text=NAME, max_length=50),
        ),
        migrations.AlterModelOptions(
            name=model_name,
            options={
                "ordering": ("-created",),
                "verbose_name": verbose_name,
                "verbose_name_plural": verbose_name + "s",
            },
        ),
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0015_tokens_api_key_data"),
    ]

    operations = [
        *_finish("collectortoken", "collector token"),
        *_finish("apitoken", "API token"),
    ]
