"""Where the package still says ``Any``, and whether each one says why.

    python scripts/any_report.py            count, then every line without a reason
    python scripts/any_report.py --all      every line

A line counts when it names ``Any`` outside an import, in the package's own code (the
generated ``protocol/messages.py`` excepted: its open objects are the schema's). Its
reason is a ``# Any: ...`` comment on that line or on the line above.
``tests/test_architecture.py`` keeps the count under its budget and every one explained.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jupyterlab_torchdbg"
SKIP = {PACKAGE / "protocol" / "messages.py"}
WORD = re.compile(r"\bAny\b")
IMPORT = re.compile(r"^\s*(from\s+\S+\s+)?import\s")
REASON = "# Any:"


def uses() -> list[tuple[Path, int, str, bool]]:
    """(file, line number, line, explained) for every line that names ``Any``."""
    out: list[tuple[Path, int, str, bool]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in SKIP or "labextension" in path.parts:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            code = line.split("#", 1)[0]
            if not WORD.search(code) or IMPORT.match(line):
                continue
            above = lines[i - 1].strip() if i else ""
            explained = REASON in line or above.startswith(REASON)
            out.append((path.relative_to(ROOT), i + 1, line.strip(), explained))
    return out


def main(argv: list[str]) -> int:
    found = uses()
    bare = [u for u in found if not u[3]]
    print(f"{len(found)} lines name Any; {len(bare)} without a `{REASON}` reason")
    for path, no, line, explained in found if "--all" in argv else bare:
        print(f"{path}:{no}: {'' if explained else '(no reason) '}{line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
