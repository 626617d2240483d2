"""Querysets compiled to SQL once per process and connection, then run with a new lookup value:
for the few reads every scheduler question makes (its token, its server), where building and
compiling the ORM query costs more CPU than the database spends answering it.

The queryset is built once with a marker in place of the lookup value; the compiled SQL keeps
the value as a bound parameter, so a request only swaps that parameter and runs the SQL. Rows
come back as values_list() would give them (the same converters applied)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import QuerySet
from django.db.models.query import get_related_populators  # type: ignore[attr-defined]
from django.db.models.sql.compiler import SQLCompiler


def _marker(n: int, kind: type) -> Any:
    if kind is int:
        # Near the top of a 32-bit integer column's range: Django answers a lookup outside the
        # column's range as matching nothing, without a parameter.
        return 2_147_480_000 + n
    return f"\x1ftopoweb-compiled-lookup-{n}\x1f"


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]
    slots: tuple[int, ...]
    compiler: SQLCompiler
    converters: dict[int, Any]
    names: tuple[str, ...]  # each column's name in a values() row


class CompiledQuery:
    """`build(*values)` gives a values_list() queryset filtering on `values` (each used once
    in the query, as a plain parameter: an exact lookup, not a pattern); `rows(*values)` runs
    it for other values without rebuilding it. `kinds` are the values' types, str or int
    (strings by default). Built with values() instead, `dicts(*values)` gives its rows as
    dicts; as a model queryset, `objects(*values)` gives its model instances."""

    def __init__(
        self,
        build: Callable[..., QuerySet[Any, Any]],
        arity: int = 1,
        kinds: tuple[type, ...] | None = None,
    ) -> None:
        self._build = build
        self._kinds = kinds if kinds is not None else (str,) * arity
        self._compiled: dict[int, _Compiled] = {}

    def _compile(self) -> _Compiled:
        markers = [_marker(n, kind) for n, kind in enumerate(self._kinds)]
        compiler = self._build(*markers).query.get_compiler(using=DEFAULT_DB_ALIAS)
        sql, params = compiler.as_sql()
        slots = []
        for marker in markers:
            found = [i for i, p in enumerate(params) if isinstance(p, type(marker)) and p == marker]
            if len(found) != 1:
                raise ValueError(f"each lookup value must be one parameter of the query: {sql}")
            slots.append(found[0])
        fields = [s[0] for s in compiler.select[0 : compiler.col_count]]
        converters = compiler.get_converters(fields)
        query = compiler.query
        # As QuerySet.values() names a row's columns.
        names = (
            list(query.selected)
            if query.selected
            else [*query.extra_select, *query.values_select, *query.annotation_select]
        )
        return _Compiled(sql, tuple(params), tuple(slots), compiler, converters, tuple(names))

    def _compiled_here(self) -> _Compiled:
        connection = connections[DEFAULT_DB_ALIAS]
        compiled = self._compiled.get(id(connection))
        if compiled is None:
            compiled = self._compiled[id(connection)] = self._compile()
        return compiled

    def rows(self, *values: Any) -> list[tuple[Any, ...]]:
        connection = connections[DEFAULT_DB_ALIAS]
        compiled = self._compiled_here()
        params = list(compiled.params)
        for slot, value in zip(compiled.slots, values, strict=True):
            # As the query was compiled: Django binds an integer as its column's type (psycopg's
            # Int4 for an IntegerField) on PostgreSQL with server-side binding.
            params[slot] = type(compiled.params[slot])(value)
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows: list[tuple[Any, ...]] = list(cursor.fetchall())
        if compiled.converters:
            rows = [tuple(r) for r in compiled.compiler.apply_converters(rows, compiled.converters)]
        return rows

    def dicts(self, *values: Any) -> list[dict[str, Any]]:
        """Rows as values() gives them, for a queryset built with values()."""
        rows = self.rows(*values)
        names = self._compiled_here().names
        return [dict(zip(names, row, strict=True)) for row in rows]

    def objects(self, *values: str) -> list[Any]:
        """Model instances, as iterating a model queryset (select_related and annotations
        included) would build them, from the compiled SQL."""
        rows = self.rows(*values)
        compiled = self._compiled[id(connections[DEFAULT_DB_ALIAS])]
        compiler = compiled.compiler
        klass_info = compiler.klass_info
        assert klass_info is not None, "objects() needs a model queryset, not values_list()"
        select = compiler.select
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        init_list = [column[0].target.attname for column in select[start:end]]
        populators = get_related_populators(klass_info, select, DEFAULT_DB_ALIAS)
        annotations = compiler.annotation_col_map or {}
        found = []
        for row in rows:
            obj = klass_info["model"].from_db(DEFAULT_DB_ALIAS, init_list, row[start:end])
            for populator in populators:
                populator.populate(row, obj)
            for name, position in annotations.items():
                setattr(obj, name, row[position])
            found.append(obj)
        return found
