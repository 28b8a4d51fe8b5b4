"""The rank wire's TypedDicts (ranks/wire/messages.py) against wire.schema.json: each
one's keys, required and optional, are its schema entry's, so neither drifts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyterlab_torchdbg.ranks.wire import messages

SCHEMA = json.loads(Path(messages.__file__).with_name("wire.schema.json").read_text())
DEFS = SCHEMA["$defs"]


def test_every_object_kind_has_its_typeddict() -> None:
    objects = {name for name, d in DEFS.items() if d.get("type") == "object"}
    assert objects == set(messages.BY_SCHEMA)
    kinds = set(SCHEMA["x-worker-kinds"]) | set(SCHEMA["x-kernel-kinds"])
    assert kinds <= set(messages.BY_SCHEMA)


@pytest.mark.parametrize("name", sorted(messages.BY_SCHEMA))
def test_typeddict_keys_match_the_schema(name: str) -> None:
    td = messages.BY_SCHEMA[name]
    schema = DEFS[name]
    assert set(td.__annotations__) == set(schema.get("properties", {})), name
    assert set(td.__required_keys__) == set(schema.get("required", [])), name


def test_the_row_stride_bound_is_the_schemas() -> None:
    config = DEFS["config"]["properties"]["row_stride"]
    assert config["maximum"] == messages.MAX_ROW_STRIDE
