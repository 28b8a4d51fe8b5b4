"""The schema is the single source of truth; both version constants follow it."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
from jsonschema import Draft202012Validator

from jupyterlab_torchdbg.kernel.stream import Stream
from jupyterlab_torchdbg.protocol import (
    COMM_TARGET,
    PROTOCOL_VERSION,
    jsonable,
    load_schema,
    major,
)

ROOT = Path(__file__).resolve().parents[1]


def test_schema_is_valid_draft_2020_12() -> None:
    Draft202012Validator.check_schema(load_schema())


def test_version_constants_match_schema_and_typescript() -> None:
    schema = load_schema()
    assert schema["x-protocol-version"] == PROTOCOL_VERSION
    assert schema["x-comm-target"] == COMM_TARGET
    # the version is kept in the schema only: TypeScript's constant is generated from it
    # (jlpm gen:protocol:check fails when generated.ts is stale)
    generated = (ROOT / "src" / "protocol" / "generated.ts").read_text()
    assert re.search(rf"PROTOCOL_VERSION = '{re.escape(PROTOCOL_VERSION)}'", generated)
    ts = (ROOT / "src" / "protocol" / "version.ts").read_text()
    assert "export { PROTOCOL_VERSION } from './generated'" in ts
    assert re.search(rf"COMM_TARGET = '{COMM_TARGET}'", ts)
    # and no document shows another version in its examples
    doc = (ROOT / "jupyterlab_torchdbg" / "protocol" / "PROTOCOL.md").read_text()
    shown = set(re.findall(r'"protocol_version": "([0-9.]+)"', doc))
    assert shown == {PROTOCOL_VERSION}, shown
    assert f"Version **{PROTOCOL_VERSION}**" in doc


def test_major() -> None:
    assert major("1.0") == 1 and major("12.3") == 12
    assert major("1") is None and major("a.b") is None and major("") is None


def test_r10_jsonable_encodes_non_finite_and_scalars() -> None:
    out = jsonable(
        {
            "nan": math.nan,
            "inf": math.inf,
            "ninf": -math.inf,
            "np": np.float32(1.5),
            "npi": np.int64(3),
            "none": None,
            "t": (1, 2),
            "obj": object(),
            5: "non-str key",
        }
    )
    assert out == {
        "nan": "NaN",
        "inf": "Infinity",
        "ninf": "-Infinity",
        "np": 1.5,
        "npi": 3,
        "none": None,
        "t": [1, 2],
        "obj": "<object>",
    }


def test_stream_flush_is_throttled_by_interval() -> None:
    """Coalescing logic with a fake clock: many records, one message per interval."""
    now = [0.0]
    sent: list[dict] = []
    s = Stream(lambda h, b: sent.append(h), interval_s=0.1, clock=lambda: now[0])
    for i in range(10_000):
        now[0] = i * 0.0002  # 5,000 records per second for 2 s
        s.record("loss", float(i))
        s.maybe_flush()
    s.flush()
    assert 19 <= len(sent) <= 21
    assert [h["seq"] for h in sent] == list(range(1, len(sent) + 1))
    assert sum(b["count"] for h in sent for b in h["blocks"]) == 10_000


def test_stream_pending_overflow_is_counted_as_dropped(monkeypatch) -> None:
    from jupyterlab_torchdbg.kernel.stream import limits

    monkeypatch.setattr(limits, "PENDING_CAPACITY", 100)
    sent: list[dict] = []
    s = Stream(lambda h, b: sent.append(h), interval_s=1e9)
    for i in range(150):
        s.record("x", float(i))
    s.flush()
    assert sent[0]["blocks"] == [{"id": 1, "names": ["x"], "count": 100, "dropped": 50}]


def test_stream_series_cap() -> None:
    from jupyterlab_torchdbg.kernel.stream import limits

    s = Stream(lambda h, b: None)
    for i in range(limits.MAX_SERIES + 5):
        s.record(f"s{i}", 1.0)
    assert len(s.names()) == limits.MAX_SERIES
    assert s.ignored_series == 5
