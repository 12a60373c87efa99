"""Hand-written SQL for the few reads that run hundreds of times a second (the host agent's
heartbeat, every 30 s from every server): the ORM compiles its SQL afresh on every call, which
costs several times more than PostgreSQL takes to run it.

`ModelColumns` writes a model's column list once per process from the model's own metadata, and
turns the matching part of a row back into an instance through the fields' converters, exactly
as the ORM would make it (JSON decoded, times aware): the callers keep working with models.
`prepared_cursor` runs such statements as prepared statements: PostgreSQL plans each once per
connection instead of on every call (planning a heartbeat's read costs more than running it).
"""

from collections.abc import Sequence
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


def rows_insert(model, *, columns: dict[str, list], constants: dict | None = None,
                returning: Sequence[str] = ()) -> list[tuple]:
    """Insert one row per position of `columns` (field name -> one value per row, as the field
    stores it: ids, Decimals, aware datetimes, strings) and `constants` (field name -> the same
    value for every row) in one statement, without building model instances; returns the
    `returning` columns of each inserted row.

    On PostgreSQL one prepared INSERT ... SELECT FROM unnest() of one array per column: the
    statement's text is the same for any number of rows, so PostgreSQL plans it once per
    connection, and no row costs a model instance or a placeholder. Elsewhere (SQLite, the embedded
    default) the ORM's bulk_create, which writes the same rows. The returned rows are in no
    particular order: return a unique column to match them with what was given."""
    constants = constants or {}
    count = len(next(iter(columns.values())))
    if connection.vendor != "postgresql":
        return _rows_insert_orm(model, columns=columns, constants=constants, returning=returning, count=count)
    quote, meta = connection.ops.quote_name, model._meta
    fields = [meta.get_field(name) for name in columns]
    fixed = [meta.get_field(name) for name in constants]
    names = [quote(field.column) for field in fields + fixed]
    arrays = ", ".join(f"%s::{field.db_type(connection)}[]" for field in fields)
    aliases = [f"c{position}" for position in range(len(fields))]
    selected = ", ".join(aliases + [f"%s::{field.db_type(connection)}" for field in fixed])
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(names)}) "  # noqa: S608 (names from the model)
        f"SELECT {selected} FROM unnest({arrays}) AS given ({', '.join(aliases)})"
    )
    if returning:
        sql += " RETURNING " + ", ".join(quote(meta.get_field(name).column) for name in returning)
    params = [*constants.values(), *columns.values()]
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if returning else []


def _rows_insert_orm(model, *, columns: dict, constants: dict, returning: Sequence[str], count: int) -> list:
    """`rows_insert` through `bulk_create`, on databases without arrays."""
    objects = model.objects.bulk_create([
        model(**{name: values[position] for name, values in columns.items()}, **constants)
        for position in range(count)
    ])
    return [tuple(getattr(obj, model._meta.get_field(name).attname) for name in returning) for obj in objects]


def insert_parts(instance) -> tuple[str, str, list]:
    """The column list, the placeholders and the parameters of an INSERT of the unsaved `instance`
    (every concrete field but an automatic primary key), each value prepared by its field as the
    ORM's `save()` would (defaults, `auto_now`, decimals, times): for an INSERT written by hand,
    such as one step of a statement that writes several tables. Each placeholder is cast to its
    column's type, so that a server-bound parameter (`prepared_cursor`), a NULL too, is read as
    its column's value wherever it stands (a SELECT list has no column to infer a type from)."""
    meta, quote = instance._meta, connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if not (field.primary_key and field.auto_created)]
    if meta.pk in fields and getattr(instance, meta.pk.attname) is None:
        fields.remove(meta.pk)
    columns = ", ".join(quote(field.column) for field in fields)
    params = [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields]
    if connection.vendor != "postgresql":
        return columns, ", ".join(["%s"] * len(fields)), params
    return columns, ", ".join(f"%s::{field.db_type(connection)}" for field in fields), params


def instance_insert(instance) -> None:
    """Insert the unsaved `instance` with one prepared statement on PostgreSQL (its primary key
    set from the database), `save(force_insert=True)` elsewhere: for rows a hot path writes one at
    a time, where compiling the ORM's INSERT cost more than running it."""
    if connection.vendor != "postgresql":
        instance.save(force_insert=True)
        return
    meta = instance._meta
    columns, values, params = insert_parts(instance)
    sql = (
        f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({columns}) "  # noqa: S608 (the model's)
        f"VALUES ({values}) RETURNING {connection.ops.quote_name(meta.pk.column)}"
    )
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        setattr(instance, meta.pk.attname, cursor.fetchone()[0])
    instance._state.adding, instance._state.db = False, connection.alias
