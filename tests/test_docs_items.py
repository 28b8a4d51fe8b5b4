"""Every reliability item the code, tests and docs cite (R01.., S1..) is defined in the
repository's own docs/RELIABILITY.md, once; an item defined there but cited nowhere is
reported too (a rule nothing holds to)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ITEM = re.compile(r"\b([RS]\d{1,2})\b")


def _defined() -> list[str]:
    text = (ROOT / "docs" / "RELIABILITY.md").read_text(encoding="utf-8")
    return re.findall(r"^- \*\*([RS]\d{1,2})\b", text, flags=re.M)


def _cited() -> dict[str, str]:
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.ts", "*.tsx", "*.md", "*.sh"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    where: dict[str, str] = {}
    for name in files:
        if name == "docs/RELIABILITY.md":
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for item in ITEM.findall(path.read_text(encoding="utf-8", errors="replace")):
            where.setdefault(item, name)
    return where


def test_every_cited_item_is_defined_once() -> None:
    defined = _defined()
    assert len(defined) == len(set(defined)), "an item is defined twice"
    missing = {i: f for i, f in _cited().items() if i not in set(defined)}
    assert not missing, f"cited but not defined in docs/RELIABILITY.md: {missing}"


def test_the_check_sees_a_missing_item(tmp_path: Path) -> None:
    # the pattern the check relies on finds items as the code writes them
    assert ITEM.findall("(R50/R51) and S6; not R2D2 nor XR12") == ["R50", "R51", "S6"]
    assert "R01" in _defined() and "S1" in _defined()
