"""The claims the test provider puts in its ID tokens and userinfo: who, and their groups."""

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator


class Validator(OAuth2Validator):  # type: ignore[misc]
    # A claim reaches the relying party only under a scope it was granted: groups ride on
    # `profile`, as with many company providers.
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "profile"}

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }
