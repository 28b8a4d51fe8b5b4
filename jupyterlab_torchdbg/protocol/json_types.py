"""JSON as a type: what a message field, a record row or a config file holds when no
schema names its shape (the schema's open objects, user-given JSON).

``JsonValue`` is what ``json.loads`` returns; read one with ``isinstance`` checks (or
``Mapping[str, object]`` when only passing it on). Messages whose shape the schema
defines use the generated TypedDicts in ``messages.py`` instead.
"""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"
