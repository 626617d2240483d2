"""kombu's Redis transport and producer, minus two costs per published task: a new Redis
client for every publish (or batch of them), and a queue declaration bound anew for every
message although it was declared on that connection already. What is sent, where, with which
retry policy, and when a queue is declared (once per broker connection) do not change.

Named by settings.CELERY_BROKER_TRANSPORT when REDIS_URL is Redis; installed on the app's
producer pool by celery_app."""

from __future__ import annotations

from typing import Any

from kombu.messaging import Producer
from kombu.transport import redis


class Channel(redis.Channel):
    """kombu builds a Redis client (and its table of some 170 reply callbacks, a fifth of what a
    task message costs) for every publish or batch; the client holds no connection of its own
    (each command borrows one from the channel's pool), so one per pool serves them all. The
    asynchronous client that consumes (workers) is kombu's own, as before."""

    _kept_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        kept = self._kept_client
        pool = self.pool  # a new pool after a disconnect: a new client over it
        if kept is None or kept.connection_pool is not pool:
            kept = self._kept_client = super()._create_client()  # type: ignore[no-untyped-call]
        return kept


class Transport(redis.Transport):
    Channel = Channel


class KeptDeclarations(Producer):
    """Celery asks for every message's queue to be declared; kombu then binds a copy of the
    queue to the channel and wraps the check in a retrying call, only to find it among the
    entities declared on this connection. The same check is made here first, without the copy;
    an entity not declared yet (a new connection: the set is emptied when one closes) is
    declared by kombu as before."""

    def maybe_declare(self, entity: Any, retry: bool = False, **retry_policy: Any) -> Any:
        connection = getattr(self.channel, "connection", None)
        client = getattr(connection, "client", None)
        declared = getattr(client, "declared_entities", None)
        if (
            entity
            and declared is not None
            and entity.can_cache_declaration
            and hash(entity) in declared
        ):
            return False
        return super().maybe_declare(entity, retry, **retry_policy)  # type: ignore[no-untyped-call]
