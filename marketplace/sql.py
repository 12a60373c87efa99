"""Hand-written SQL for the few reads that run hundreds of times a second (the host agent's
heartbeat, every 30 s from every server): the ORM compiles its SQL afresh on every call, which
costs several times more than PostgreSQL takes to run it.

`ModelColumns` writes a model's column list once per process from the model's own metadata, and
turns the matching part of a row back into an instance through the fields' converters, exactly
as the ORM would make it (JSON decoded, times aware): the callers keep working with models.
`prepared_cursor` runs such statements as prepared statements: PostgreSQL plans each once per
connection instead of on every call (planning a heartbeat's read costs more than running it).
"""

from contextlib import contextmanager

from django.db import connection
from django.db.backends.postgresql.base import ServerBindingCursor


@contextmanager
def prepared_cursor():
    """A PostgreSQL cursor that binds its parameters on the server, so that PostgreSQL prepares
    each of its statements on first use (settings' PREPARE_THRESHOLD) and keeps it with the pooled
    connection. Django's own cursors bind on the client and are never prepared. On SQLite (the
    embedded default) a plain cursor."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = ServerBindingCursor(connection.connection)
    wrapped = connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)
    with wrapped as cursor:
        yield cursor


class ModelColumns:
    """The concrete columns of `model` under the table alias `alias`, in field order."""

    def __init__(self, model, alias: str) -> None:
        self.model = model
        self.alias = alias
        self.fields = model._meta.concrete_fields
        self._pk_position = self.fields.index(model._meta.pk)
        self._converters = None

    def __len__(self) -> int:
        return len(self.fields)

    def select(self) -> str:
        quote = connection.ops.quote_name
        return ", ".join(f"{self.alias}.{quote(field.column)}" for field in self.fields)

    def _converters_of(self) -> list[tuple]:
        """(position, column, converters) of the fields that have converters: most have none."""
        if self._converters is None:
            found = []
            for position, field in enumerate(self.fields):
                column = field.get_col(self.alias)
                converters = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
                if converters:
                    found.append((position, column, converters))
            self._converters = found
        return self._converters

    def instance(self, values) -> object | None:
        """The instance of `values` (this model's slice of a row); None when the primary key is
        NULL (an outer join that found nothing)."""
        if values[self._pk_position] is None:
            return None
        values = list(values)
        for position, column, converters in self._converters_of():
            for converter in converters:
                values[position] = converter(values[position], column, connection)
        return self.model.from_db(connection.alias, None, values)


def row_split(row, parts: list[ModelColumns]) -> list:
    """The instances of a row made of `parts`' columns, one after the other."""
    found, start = [], 0
    for part in parts:
        found.append(part.instance(row[start:start + len(part)]))
        start += len(part)
    return found


def update_assignments(model, values: dict) -> tuple[str, list]:
    """`col = %s, ...` for an UPDATE of `model` with `values` (by field name), and the parameters,
    each prepared by its field as the ORM's `update()` would (JSON, decimals, times)."""
    quote, meta = connection.ops.quote_name, model._meta
    assignments, params = [], []
    for name, value in values.items():
        field = meta.get_field(name)
        assignments.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    return ", ".join(assignments), params


def insert_parts(instance) -> tuple[str, str, list]:
    """The column list, the placeholders and the parameters of an INSERT of the unsaved `instance`
    (every concrete field but an automatic primary key), each value prepared by its field as the
    ORM's `save()` would (defaults, `auto_now`, decimals, times): for an INSERT written by hand,
    such as one step of a statement that writes several tables."""
    meta, quote = instance._meta, connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if not (field.primary_key and field.auto_created)]
    if meta.pk in fields and getattr(instance, meta.pk.attname) is None:
        fields.remove(meta.pk)
    columns = ", ".join(quote(field.column) for field in fields)
    params = [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields]
    return columns, ", ".join(["%s"] * len(fields)), params
