"""protocol/messages.py, the payload TypedDicts, is what the schema generates today."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_protocol_py", ROOT / "scripts/gen_protocol_py.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_messages_py_matches_the_schema() -> None:
    gen = _generator()
    committed = (ROOT / gen.OUTPUT).read_text(encoding="utf-8")
    assert gen.generate() == committed, "protocol/messages.py is stale: run `jlpm gen:protocol`"


def test_a_schema_change_without_regenerating_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a definition added to the schema changes the output."""
    gen = _generator()
    schema = json.loads((ROOT / gen.SCHEMA).read_text(encoding="utf-8"))
    schema["$defs"]["ProbeResult"] = {
        "type": "object",
        "required": ["cleared"],
        "additionalProperties": False,
        "properties": {"cleared": {"type": "integer"}, "note": {"type": "string"}},
    }
    changed = tmp_path / "messages.schema.json"
    changed.write_text(json.dumps(schema), encoding="utf-8")
    text = gen.generate(changed)
    assert "class ProbeResult(TypedDict" in text
    assert "    cleared: int\n" in text and "    note: NotRequired[str]\n" in text
    assert text != (ROOT / gen.OUTPUT).read_text(encoding="utf-8")


def test_the_types_name_every_definition_of_the_schema() -> None:
    from jupyterlab_torchdbg.protocol import messages

    gen = _generator()
    defs = json.loads((ROOT / gen.SCHEMA).read_text(encoding="utf-8"))["$defs"]
    missing = sorted(name for name in defs if not hasattr(messages, name))
    assert missing == []


def test_the_action_error_codes_are_the_schemas() -> None:
    """``ActionError``'s codes are written out in action_registry.py (the generated module
    holds them inline in ``Error``): they must stay the schema's."""
    from typing import get_args

    from jupyterlab_torchdbg.kernel.action_registry import ErrorCode

    gen = _generator()
    defs = json.loads((ROOT / gen.SCHEMA).read_text(encoding="utf-8"))["$defs"]
    assert set(get_args(ErrorCode)) == set(defs["Error"]["properties"]["code"]["enum"])
