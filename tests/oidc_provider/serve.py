"""Run the test OpenID Connect provider: `python -m tests.oidc_provider.serve PORT REDIRECT_URI`
with OIDC_PROVIDER_DB and OIDC_PROVIDER_RSA_KEY set. Makes the client `topoweb` (secret
`topoweb-secret`, that redirect URI) and the people the tests sign in as, then serves."""

from __future__ import annotations

import os
import sys


def main() -> None:
    port, redirect_uri = sys.argv[1], sys.argv[2]
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"
    os.environ["OAUTHLIB_INSECURE_TRANSPORT"] = "1"  # plain HTTP on loopback, tests only
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    people = {
        "alice": ["topoweb-uploaders"],
        "bob": ["topoweb-readers"],
        "carol": ["topoweb-admins"],
        "eve": ["marketing"],
    }
    for name, groups in people.items():
        user = User.objects.create_user(name, email=f"{name}@example.com", password="corp-pass")
        user.groups.set(Group.objects.get_or_create(name=group)[0] for group in groups)
    Application.objects.create(
        name="topoweb",
        client_id="topoweb",
        client_secret="topoweb-secret",
        hash_client_secret=False,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=redirect_uri,
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True)


if __name__ == "__main__":
    main()
