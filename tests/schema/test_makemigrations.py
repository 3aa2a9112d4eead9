"""The migrations match the models: ``makemigrations --check --dry-run`` has nothing to write."""

import pytest

from tests.helpers import manage
from tests.schema.support import clone_of

pytestmark = pytest.mark.schema


def test_makemigrations_is_clean(migrated_templates):
    _label, server, template = migrated_templates[0]
    with clone_of(server, template) as url:
        result = manage("makemigrations", "--check", "--dry-run", db_url=url, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No changes detected" in result.stdout
