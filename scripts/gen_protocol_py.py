"""Generate the kernel's protocol payload types (TypedDicts) from the one JSON Schema.

    python scripts/gen_protocol_py.py           write jupyterlab_torchdbg/protocol/messages.py
    python scripts/gen_protocol_py.py --check   fail when that file is stale (the tests)

The Python twin of ``scripts/gen-protocol-types.mjs`` (``jlpm gen:protocol`` runs both):
datamodel-code-generator's TypedDict output for every ``$defs`` entry of
``jupyterlab_torchdbg/protocol/messages.schema.json``, whatever the schema holds, then
ruff's fixes and format so the committed module passes the project's checks as written.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "jupyterlab_torchdbg/protocol/messages.schema.json"
OUTPUT = "jupyterlab_torchdbg/protocol/messages.py"

HEADER = f'''"""GENERATED FILE, DO NOT EDIT: the protocol's payloads as TypedDicts.

Generated from ``{SCHEMA}`` by ``scripts/gen_protocol_py.py``
(datamodel-code-generator). Change the schema, then run ``jlpm gen:protocol`` (TypeScript
and Python); ``jlpm gen:protocol:check`` and ``tests/test_protocol_types.py`` fail when
this file is stale. Import it under ``TYPE_CHECKING`` only: nothing here runs.

Every open type below (a dict or list of anything) is a schema object left open on
purpose (``{{"type": "object"}}`` with no properties: an ``Ack``'s ``result``, typed per
action by the ``*Result`` types (the schema's ``x-result``), a diagnosis's ``facts``), an
object that must stay empty (``NoArgs``, ``DismissRecordResult``), or an array of whatever
the user's batch held (a replayed step's ``index`` / ``batch``).
"""

# ruff: noqa: E501
'''


def generate(schema: Path = ROOT / SCHEMA) -> str:
    """The module's text for ``schema`` (the project's schema unless told)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "messages.py"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "datamodel_code_generator",
                "--input",
                str(schema),
                "--input-file-type",
                "jsonschema",
                "--output-model-type",
                "typing.TypedDict",
                "--target-python-version",
                "3.10",
                "--use-standard-collections",
                "--use-union-operator",
                "--use-title-as-name",
                "--disable-timestamp",
                "--formatters",
                "builtin",
                "--output",
                str(out),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        body = out.read_text(encoding="utf-8")
        # its own two-line header names a temporary path: ours says where it came from
        lines = body.splitlines()
        while lines and (lines[0].startswith("#") or not lines[0].strip()):
            lines.pop(0)
        out.write_text(HEADER + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
        ruff = [sys.executable, "-m", "ruff"]
        config = ["--config", str(ROOT / "pyproject.toml")]
        subprocess.run([*ruff, "check", "--fix", "-q", *config, str(out)], check=True)
        subprocess.run([*ruff, "format", "-q", *config, str(out)], check=True)
        return out.read_text(encoding="utf-8")


def main(argv: list[str]) -> int:
    text = generate()
    target = ROOT / OUTPUT
    if "--check" in argv:
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is stale: run `jlpm gen:protocol`", file=sys.stderr)
            return 1
        print(f"{OUTPUT} is up to date")
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
