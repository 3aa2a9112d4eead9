"""The schema catalog of the spec and its normalizers (vectors column_default, index_definition)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

# The spec's data files, laid out as in the spec (``schema/postgres/catalog.json`` ...). The wheel
# ships only the ones the app reads at run time (pyproject's package-data); the tests read the rest.
DATA_DIR = Path(__file__).resolve().parent / "data"


@cache
def load(name: str) -> dict[str, Any]:
    """A spec data file by its path in the spec (``schema/postgres/catalog.json`` ...)."""
    data: dict[str, Any] = json.loads((DATA_DIR / name).read_text())
    return data


def normalize_column_default(default: str | None) -> str | None:
    if default is None:
        return None
    text = default.lower()
    for cast in ("::text", "::integer", "::bigint", "::smallint"):
        text = text.replace(cast, "")
    text = re.sub(r"[\s()]", "", text)
    return "nextval" if text.startswith("nextval") else text


_SCHEMA_QUALIFIER = re.compile(r'\bon\s+(?:"(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)\.')
_ANY_ARRAY = re.compile(r"=\s*any\s*\(\s*array\s*\[")


def normalize_index_definition(definition: str) -> str:
    text = definition.lower()
    text = _SCHEMA_QUALIFIER.sub("on ", text)
    text = text.replace("::text[]", "").replace("::text", "")
    text = _ANY_ARRAY.sub("in(", text)
    text = text.replace("using btree", "")
    text = re.sub(r"\s+asc\b", "", text)
    return re.sub(r'[\s"()\[\];]', "", text)
