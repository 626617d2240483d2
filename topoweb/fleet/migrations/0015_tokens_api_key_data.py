"""Every token issued before djangorestframework-api-key ("twc_" / "twa_" + 43 urlsafe
characters, its SHA-256 kept) becomes a key of the package that still opens with its old
plain text: its characters 5 to 12 are its prefix, "sha256$$<hex>" its hashed key, which
fleet.models' key generator verifies (see fleet.models.legacy_key). Collectors and schedulers
in the field keep their tokens. Reversed, the old rows come back as they were (a revoked one
revoked now) and the keys made since, whose SHA-256 was never kept, are deleted."""

from typing import Any

from django.db import migrations
from django.utils import timezone

LEGACY_HASH = "sha256$$"  # fleet.models.LEGACY_HASH, as of this migration
KINDS = {"CollectorToken": ("twc_", "hostname"), "ApiToken": ("twa_", "user__username")}


def carry_over(apps: Any, schema_editor: Any) -> None:
    for model_name, (_, named_by) in KINDS.items():
        tokens = apps.get_model("fleet", model_name).objects
        rows = tokens.values_list("pk", "prefix", "token_sha256", "revoked_at", named_by)
        for pk, old_prefix, digest, revoked_at, name in list(rows):
            prefix, hashed_key = old_prefix[4:12], LEGACY_HASH + digest
            tokens.filter(pk=pk).update(
                id=f"{prefix}.{hashed_key}",
                prefix=prefix,
                hashed_key=hashed_key,
                name=name[:50],
                revoked=revoked_at is not None,
            )


def restore(apps: Any, schema_editor: Any) -> None:
    for model_name, (tag, _) in KINDS.items():
        tokens = apps.get_model("fleet", model_name).objects
        tokens.exclude(hashed_key__startswith=LEGACY_HASH).delete()
        rows = tokens.order_by("created").values_list("pk", "prefix", "hashed_key", "revoked")
        for n, (pk, prefix, hashed_key, revoked) in enumerate(list(rows), start=1):
            tokens.filter(pk=pk).update(
                id=str(n),
                prefix=tag + prefix,
                token_sha256=hashed_key.removeprefix(LEGACY_HASH),
                revoked_at=timezone.now() if revoked else None,
            )


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0014_tokens_api_key_fields"),
    ]

    operations = [migrations.RunPython(carry_over, restore)]
