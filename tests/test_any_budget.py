"""Issue #26: the package names ``Any`` at most ``BUDGET`` times, each time with its
reason (a ``# Any: ...`` comment on the line or the line above); message payloads use the
TypedDicts generated from the schema instead. The count is ``scripts/any_report.py``'s.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Lines of the package that may name ``Any`` (24 when set; the issue asked for under 120).
BUDGET = 30


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("any_report", ROOT / "scripts" / "any_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["any_report"] = module
    spec.loader.exec_module(module)
    return module


def test_the_package_names_any_within_its_budget_each_time_with_a_reason() -> None:
    found = _report().uses()
    bare = [f"{path}:{no}: {line}" for path, no, line, explained in found if not explained]
    assert not bare, "Any without a `# Any:` reason:\n" + "\n".join(bare)
    assert len(found) <= BUDGET, f"{len(found)} lines name Any (budget {BUDGET})"


def test_the_count_reads_code_not_imports_or_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _report()
    package = tmp_path / "jupyterlab_torchdbg"
    package.mkdir()
    (package / "a.py").write_text(
        "from typing import Any\n"
        "# Any is mentioned in a comment\n"
        "def f(x: Any) -> int: ...\n"
        "# Any: a user's object, passed on\n"
        "def g(x: Any) -> int: ...\n"
        "def h(x: Any) -> int: ...  # Any: the same reason, on its line\n"
        "Many = 1\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "PACKAGE", package)
    monkeypatch.setattr(report, "SKIP", set())
    found = report.uses()
    assert [(no, explained) for _, no, _, explained in found] == [(3, False), (5, True), (6, True)]
