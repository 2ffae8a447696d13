"""Each node/apis module's docstring opens with the versions it serves and says how it compares to Kafka."""
from __future__ import annotations

import importlib
import re

import pytest

from node.apis import API_MODULES


@pytest.mark.parametrize("name", API_MODULES)
def test_the_docstring_opens_with_the_versions_served(name):
    module = importlib.import_module(f"node.apis.{name}")
    low, high = module.VERSIONS
    served = f"v{low}" if low == high else f"v{low}-{high}"
    first_line = module.__doc__.splitlines()[0]
    assert re.match(rf"\w+ {served}\b", first_line), f"{name}: {first_line!r} does not open with '<API> {served}'"
    assert "Differs from Kafka:" in module.__doc__ or "Same as Kafka." in module.__doc__
