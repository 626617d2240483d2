"""Company sign-in through OpenID Connect (mozilla-django-oidc), on when TOPOWEB_OIDC=1.

The identity provider's groups (the `TOPOWEB_OIDC_GROUPS_CLAIM` claim) map onto the existing
permissions at every sign-in: a view group lets a person in to read; an upload group also
grants `fleet.upload_files`; an admin group makes them staff and superuser. Nobody in none of
the groups gets in; whatever the provider no longer grants is taken back at the next sign-in.
People are matched by the `preferred_username` claim (else `sub`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db.models import QuerySet
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

VIEW, UPLOAD, ADMIN = "view", "upload", "admin"


def granted(claims: dict[str, Any]) -> set[str]:
    """The permissions the provider's groups give: a subset of {view, upload, admin}."""
    groups = claims.get(settings.TOPOWEB_OIDC_GROUPS_CLAIM) or []
    if isinstance(groups, str):
        groups = [groups]
    held = {str(group) for group in groups}
    given = set()
    for permission, names in (
        (VIEW, settings.TOPOWEB_OIDC_VIEW_GROUPS),
        (UPLOAD, settings.TOPOWEB_OIDC_UPLOAD_GROUPS),
        (ADMIN, settings.TOPOWEB_OIDC_ADMIN_GROUPS),
    ):
        if held & set(names):
            given.add(permission)
    if given & {UPLOAD, ADMIN}:
        given.add(VIEW)  # whoever may write may read
    return given


def username_of(claims: dict[str, Any]) -> str:
    return str(claims.get("preferred_username") or claims["sub"])[:150]


def apply(user: User, given: set[str]) -> User:
    """Make the account's permissions what the provider's groups say now."""
    upload = Permission.objects.get(content_type__app_label="fleet", codename="upload_files")
    if UPLOAD in given:
        user.user_permissions.add(upload)
    else:
        user.user_permissions.remove(upload)
    user.is_staff = user.is_superuser = ADMIN in given
    user.save(update_fields=["is_staff", "is_superuser", "email"])
    return user


class CompanySignIn(OIDCAuthenticationBackend):  # type: ignore[misc]
    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return VIEW in granted(claims)

    def filter_users_by_claims(self, claims: dict[str, Any]) -> QuerySet[User]:
        return User.objects.filter(username=username_of(claims))

    def create_user(self, claims: dict[str, Any]) -> User:
        user = User.objects.create_user(username_of(claims), email=claims.get("email", ""))
        user.set_unusable_password()  # signs in through the provider only
        user.save(update_fields=["password"])
        return apply(user, granted(claims))

    def update_user(self, user: User, claims: dict[str, Any]) -> User:
        user.email = claims.get("email", user.email)
        return apply(user, granted(claims))
