"""Locals summaries from metadata only (R17, R21): unit tests, no kernel."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jupyterlab_torchdbg.kernel.exceptions.summarize import (
    NA,
    Classifier,
    strip_private,
    summarize,
    summarize_locals,
)
from jupyterlab_torchdbg.protocol import jsonable


class Spy:
    """Records every dunder the tool might call; each one raises."""

    calls: list[str] = []

    def _hit(self, name: str) -> Any:
        Spy.calls.append(name)
        raise RuntimeError(name)

    def __repr__(self) -> str:
        return self._hit("repr")

    def __str__(self) -> str:
        return self._hit("str")

    def __len__(self) -> int:
        return self._hit("len")

    def __bool__(self) -> bool:
        return self._hit("bool")

    def __eq__(self, other: object) -> bool:
        return self._hit("eq")

    def __hash__(self) -> int:
        return self._hit("hash")

    def __iter__(self) -> Any:
        return self._hit("iter")

    def __getattr__(self, name: str) -> Any:
        return self._hit(f"getattr:{name}")

    def __format__(self, spec: str) -> str:
        return self._hit("format")


def test_r21_arbitrary_objects_by_type_name_only() -> None:
    Spy.calls.clear()
    rows, _ = summarize_locals(
        [("spy", Spy()), ("in_list", [Spy(), Spy()]), ("in_dict", {"a": Spy()})], limit=10
    )
    assert Spy.calls == []
    by = {r["name"]: r for r in rows}
    assert by["spy"] == {"name": "spy", "kind": "object", "type": "Spy", "text": "Spy"}
    assert by["in_list"]["text"] == "list of 2" and by["in_dict"]["len"] == 1


class Exploding(torch.Tensor):
    """A tensor subclass whose metadata raises (like a broken DTensor / wrapper)."""

    @property
    def shape(self) -> Any:  # type: ignore[override]
        raise RuntimeError("no shape")

    @property
    def device(self) -> Any:  # type: ignore[override]
        raise RuntimeError("no device")


def test_r21_r54_tensor_subclass_properties_never_run() -> None:
    # Its raising properties are never called: the metadata is the tensor's own (C getters).
    t = torch.zeros(3).as_subclass(Exploding)
    row = summarize(t)
    assert row["kind"] == "tensor" and row["type"] == "Exploding"
    assert row["shape"] == [3] and row["device"] == "cpu"
    assert row["dtype"] == "float32"
    assert row["finite"] is None  # data of a subclass is never read


def test_r21_meta_and_sparse_tensors_metadata_only() -> None:
    meta = summarize(torch.empty(1000, 1000, device="meta"))
    assert (meta["device"], meta["shape"], meta["finite"]) == ("meta", [1000, 1000], None)
    sparse = summarize(torch.eye(3).to_sparse())
    assert sparse["layout"] == "sparse_coo" and sparse["finite"] is None
    assert "sparse_coo" in sparse["text"]


def test_tensor_summary_fields() -> None:
    w = torch.randn(4, 3, requires_grad=True)
    w.sum().backward()
    h = w * 2
    row = summarize(w)
    assert row["shape"] == [4, 3] and row["dtype"] == "float32" and row["device"] == "cpu"
    assert row["requires_grad"] is True and row["is_leaf"] is True and row["grad"] is True
    assert row["finite"] is True and row["nbytes"] == 48
    assert summarize(h)["is_leaf"] is False and summarize(h)["grad"] is False
    bad = summarize(torch.tensor([1.0, math.inf]))
    assert bad["finite"] is False and "NON-FINITE" in bad["text"]
    labels = summarize(torch.tensor([3, 0, 9]))
    assert (labels["min"], labels["max"]) == (0, 9)


def test_large_tensors_are_not_read() -> None:
    row = summarize(torch.zeros(200_001))
    assert row["finite"] is None and "min" not in row


def test_module_optimizer_data_summaries() -> None:
    model = nn.Sequential(nn.Linear(10, 5), nn.ReLU(inplace=True), nn.Linear(5, 2))
    row = summarize(model)
    assert row["kind"] == "module" and row["params"] == 10 * 5 + 5 + 5 * 2 + 2
    assert row["devices"] == ["cpu"] and row["dtypes"] == ["float32"]
    assert summarize(model[0])["in_features"] == 10
    assert summarize(model[1])["inplace"] is True
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    o = summarize(opt)
    assert (o["kind"], o["params"], o["lr"]) == ("optimizer", 4, 3e-4)
    ds = TensorDataset(torch.zeros(100, 2), torch.zeros(100))
    d = summarize(ds)
    assert d["len"] == 100 and [i["shape"] for i in d["items"]] == [[100, 2], [100]]
    dl = summarize(DataLoader(ds, batch_size=32))
    assert (dl["kind"], dl["dataset_len"], dl["len"]) == ("dataloader", 100, 4)


def test_dataset_of_unknown_type_has_no_len() -> None:
    class Custom(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            raise AssertionError("the tool must not call len() on a user dataset")

    assert summarize(Custom())["len"] == NA


def test_numbers_strings_and_json_encoding() -> None:
    rows, _ = summarize_locals(
        [
            ("nan", float("nan")),
            ("big", 2**80),
            ("flag", True),
            ("np", np.float32(1.5)),
            ("s", "x" * 500),
            ("lone", "bad \udcff"),
            ("arr", np.zeros((2, 3))),
        ],
        limit=20,
    )
    by = {r["name"]: r for r in rows}
    assert by["nan"]["finite"] is False
    assert by["big"]["value"] == str(2**80)  # beyond 2**53: text, exact
    assert by["np"]["value"] == 1.5
    assert by["s"]["truncated"] is True and len(by["s"]["value"]) == 120
    assert by["lone"]["value"] == "bad \\udcff"  # R20: encodable
    assert by["arr"]["shape"] == [2, 3]
    json.dumps(jsonable(rows), allow_nan=False).encode("utf-8")


def test_namespace_frames_skip_ipython_names_imports_and_defs() -> None:
    import os

    ns = {"In": [], "Out": {}, "_": 1, "_i3": "x", "os": os, "f": lambda: 0, "x": 1, "hid": 2}
    hidden = {"In": [], "Out": {}, "hid": 2}  # IPython's user_ns_hidden
    rows, total = summarize_locals(ns.items(), limit=10, namespace=True, hidden=hidden)
    assert [r["name"] for r in rows] == ["x"] and total == 1


def test_ranking_prefers_names_on_the_failing_line_then_tensors() -> None:
    items = [(f"n{i}", i) for i in range(10_000)]
    items.insert(5000, ("weights", torch.zeros(2)))
    rows, total = summarize_locals(items, limit=5, prefer=["n9999"])
    assert total == 10_001
    assert [r["name"] for r in rows][:2] == ["n9999", "weights"]
    assert len(rows) == 5


def test_live_ids_and_strip_private() -> None:
    t = torch.zeros(1)
    live: dict[int, Any] = {}
    rows, _ = summarize_locals([("t", t)], limit=5, live=live)
    assert live == {id(t): t} and rows[0]["_id"] == id(t)
    assert "_id" not in strip_private(rows)[0]


@pytest.mark.parametrize("value", [object(), type, print, np, Classifier])
def test_never_raises(value: Any) -> None:
    assert summarize(value)["text"]


def test_the_kinds_are_the_schemas_local_kinds() -> None:
    """Every kind a local can get, and its rank in the table, is one the protocol's
    ``LocalKind`` allows, and the schema has no kind the classifier never gives."""
    from typing import get_args

    from jupyterlab_torchdbg.kernel.exceptions.summarize import kinds
    from jupyterlab_torchdbg.protocol import load_schema
    from jupyterlab_torchdbg.protocol.messages import LocalKind

    schema = load_schema()["$defs"]["Local"]["properties"]["kind"]["enum"]
    assert set(kinds.RANK) == set(schema) == set(get_args(LocalKind))
    assert kinds.NAMESPACE_NOISE <= set(schema)
