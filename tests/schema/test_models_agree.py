"""The models (Django's migration state, what the ORM and the admin read through) describe the
same tables and indexes as the spec's catalog, which is what the migrator actually builds."""

from __future__ import annotations

import pytest
from django.db.models import ForeignObjectRel

from runnerq_django import models
from runnerq_django.spec.catalog import normalize_column_default, normalize_index_definition
from tests.schema.support import CATALOG

MODELS = [
    models.Activity,
    models.Input,
    models.Result,
    models.Event,
    models.Idempotency,
    models.Dependency,
    models.WorkerPool,
    models.Command,
]

# Django's db_type -> information_schema udt_name
UDT = {
    "uuid": "uuid",
    "text": "text",
    "integer": "int4",
    "bigint": "int8",
    "smallint": "int2",
    "timestamp with time zone": "timestamptz",
    "jsonb": "jsonb",
    "text[]": "_text",
}


def _catalog_table(name: str) -> dict:
    return next(table for table in CATALOG["tables"] if table["name"] == name)


@pytest.mark.django_db
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m._meta.db_table)
def test_model_columns_match_the_catalog(model):
    from django.db import connection

    table = _catalog_table(model._meta.db_table)
    fields = [f for f in model._meta.concrete_fields if f.column]
    assert {f.column for f in fields} == {c["name"] for c in table["columns"]}
    with connection.schema_editor(collect_sql=True) as editor:
        for field in fields:
            column = next(c for c in table["columns"] if c["name"] == field.column)
            assert UDT[field.db_type(connection)] == column["type"], field.column
            assert field.null == column["nullable"], field.column
            if field.db_default is not models.models.NOT_PROVIDED:
                sql, params = editor.db_default_sql(field)
                rendered = sql % tuple(editor.quote_value(p) for p in params)
                assert normalize_column_default(rendered) == normalize_column_default(column["default"]), (
                    field.column
                )
            elif column["default"] and not column["default"].startswith("nextval"):
                pytest.fail(f"{field.column}: the catalog has default {column['default']}, the model none")
    assert [f.column for f in model._meta.pk_fields] == table["primary_key"]


@pytest.mark.django_db
def test_model_indexes_render_the_catalog_definitions():
    from django.db import connection

    declared = {}
    with connection.schema_editor(collect_sql=True) as editor:
        for model in MODELS:
            for index in model._meta.indexes:
                declared[index.name] = str(index.create_sql(model, editor))
    catalog = {index["name"]: index["definition"] for index in CATALOG["indexes"]}
    assert set(declared) == set(catalog)
    for name, sql in declared.items():
        assert normalize_index_definition(sql) == normalize_index_definition(catalog[name]), name


def test_models_declare_no_relations():
    # The catalog has no foreign keys: a ForeignKey here would add a constraint (and an index)
    # that other SDKs sharing the tables know nothing about.
    for model in MODELS:
        assert not [
            f for f in model._meta.get_fields() if f.is_relation and not isinstance(f, ForeignObjectRel)
        ]
