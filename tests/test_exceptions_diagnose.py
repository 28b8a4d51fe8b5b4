"""The classifier on real PyTorch errors raised in-process (no kernel): category, culprit
names and the values shown. The real-kernel versions are in test_exceptions_kernel.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jupyterlab_torchdbg.kernel.exceptions.capture import capture


def diagnose_call(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        fn()
    except BaseException as e:  # whatever the test raises is captured
        return capture(e)["diagnosis"]
    raise AssertionError("did not raise")


def names(d: dict[str, Any]) -> list[str]:
    return [c["name"] for c in d["culprits"]]


# --- device --------------------------------------------------------------------------------


def test_device_mismatch_meta_model_and_cpu_input() -> None:
    def cell() -> None:
        model = nn.Linear(10, 5, device="meta")
        x = torch.randn(4, 10)
        model(x)

    d = diagnose_call(cell)
    assert d["category"] == "device_mismatch"
    assert d["headline"] == "`model` parameters are on meta; `x` is on cpu"
    assert d["facts"]["devices"] == ["meta", "cpu"]


def test_device_mismatch_split_model_names_the_odd_parameters() -> None:
    def cell() -> None:
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2, device="meta"))
        batch = torch.randn(3, 4)
        model(batch)

    d = diagnose_call(cell)
    assert d["category"] == "device_mismatch"
    assert "`model` is spread over cpu and meta" in d["headline"]
    odd = [c for c in d["culprits"] if c.get("role") == "odd device"]
    assert {c["name"] for c in odd} == {"model.2.weight", "model.2.bias"}
    assert all(c["device"] == "meta" for c in odd)


# --- shapes ---------------------------------------------------------------------------------


def test_tensordataset_three_tensors_names_the_odd_one() -> None:
    def cell() -> None:
        images = torch.zeros(100, 2)
        masks = torch.zeros(100, 2)
        labels = torch.zeros(90)
        TensorDataset(images, masks, labels)

    d = diagnose_call(cell)
    assert d["facts"] == {"kind": "dataset_length", "lengths": [100, 100, 90]}
    assert names(d) == ["images", "masks", "labels"]
    assert "`labels`" in d["remedy"] and "`images`" not in d["remedy"]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(20, 10)
        self.fc2 = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def test_mat1_mat2_names_the_attribute_path_of_the_layer() -> None:
    def cell() -> None:
        net = Net()
        net(torch.randn(8, 20))

    d = diagnose_call(cell)
    assert d["category"] == "shape_mismatch"
    assert names(d)[0] == "net.fc2"
    assert d["headline"].startswith("`net.fc2` (Linear) expects in_features=12")
    assert (d["facts"]["in_features"], d["facts"]["got_features"]) == (12, 10)


def test_plain_matmul_names_operands_without_inventing_a_layer() -> None:
    def cell() -> None:
        a = torch.randn(4, 10)
        b = torch.randn(12, 5)
        a @ b

    d = diagnose_call(cell)
    assert "inner sizes 10 and 12" in d["headline"] and "Linear" not in d["headline"]
    assert names(d) == ["a", "b"]


def test_conv_channels_names_layer_and_in_channels() -> None:
    def cell() -> None:
        conv = nn.Conv2d(3, 8, 3)
        gray = torch.randn(2, 1, 16, 16)
        conv(gray)

    d = diagnose_call(cell)
    assert d["facts"] == {"kind": "conv_channels", "expected": 3, "got": 1}
    assert names(d) == ["conv", "gray"]


def test_loss_batch_size_mismatch() -> None:
    def cell() -> None:
        out = torch.randn(4, 3)
        labels = torch.tensor([0, 1, 2])
        F.cross_entropy(out, labels)

    d = diagnose_call(cell)
    assert d["facts"]["kind"] == "batch_size" and set(names(d)) == {"out", "labels"}
    assert "4 predictions but 3 targets" in d["headline"]


def test_broadcast_view_and_stride() -> None:
    def bcast() -> None:
        pred = torch.randn(2, 3)
        target = torch.randn(2, 4)
        pred - target

    d = diagnose_call(bcast)
    assert d["facts"] == {"kind": "broadcast", "a": 3, "b": 4, "dim": 1}
    assert names(d) == ["pred", "target"]

    def view() -> None:
        images = torch.randn(10, 100)
        images.view(-1, 784)

    d = diagnose_call(view)
    assert "1000 is not a multiple of 784" in d["headline"] and names(d) == ["images"]

    def stride() -> None:
        x = torch.randn(4, 6).t()
        x.view(24)

    assert diagnose_call(stride)["facts"]["kind"] == "view_stride"


def test_cat_and_dataloader_collate() -> None:
    d = diagnose_call(lambda: torch.cat([torch.zeros(2, 3), torch.zeros(2, 4)]))
    assert d["facts"]["kind"] == "cat" and d["facts"]["got"] == 4

    class Ragged(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.zeros(3 + i)

    d = diagnose_call(lambda: next(iter(DataLoader(Ragged(), batch_size=2))))
    assert d["facts"]["kind"] == "collate" and "collate_fn" in d["remedy"]


# --- dtype ----------------------------------------------------------------------------------


def test_dtype_double_input_into_float_layer() -> None:
    def cell() -> None:
        layer = nn.Linear(3, 2)
        features = torch.randn(4, 3, dtype=torch.float64)
        layer(features)

    d = diagnose_call(cell)
    assert d["category"] == "dtype_mismatch"
    assert d["headline"] == "`features` is float64, but `layer` (Linear) has float32 weights"
    assert d["remedy"] == "Convert the input: `features = features.float()`."


def test_dtype_plain_op_names_both_operands() -> None:
    def cell() -> None:
        a = torch.randn(2, 2, dtype=torch.float64)
        b = torch.randn(2, 2)
        a @ b

    d = diagnose_call(cell)
    assert d["category"] == "dtype_mismatch"
    assert d["headline"] == "`a` is float64; `b` is float32"


def test_loss_target_dtype() -> None:
    def cell() -> None:
        logits = torch.randn(4, 3)
        y = torch.tensor([0.0, 1.0, 2.0, 1.0])
        nn.CrossEntropyLoss()(logits, y)

    d = diagnose_call(cell)
    assert names(d) == ["y"] and "y = y.long()" in d["remedy"]


# --- index ----------------------------------------------------------------------------------


def test_label_out_of_range_n_classes_and_label_max() -> None:
    def cell() -> None:
        logits = torch.randn(5, 10)
        labels = torch.tensor([1, 2, 10, 4, 5])
        F.cross_entropy(logits, labels)

    d = diagnose_call(cell)
    assert d["category"] == "index_out_of_range"
    assert (d["facts"]["n_classes"], d["facts"]["label_max"], d["facts"]["label_min"]) == (
        10,
        10,
        1,
    )
    assert "valid labels: 0-9" in d["headline"] and "labels - 1" in d["remedy"]


def test_embedding_index_out_of_range() -> None:
    def cell() -> None:
        emb = nn.Embedding(10, 4)
        tokens = torch.tensor([[1, 12, 3]])
        emb(tokens)

    d = diagnose_call(cell)
    assert d["category"] == "index_out_of_range"
    assert "`emb` (Embedding)" in d["headline"] and "`tokens` holds 1-12" in d["headline"]


# --- autograd ---------------------------------------------------------------------------------


def test_inplace_relu_named_as_suspect() -> None:
    def cell() -> None:
        act = nn.ReLU(inplace=True)
        x = torch.randn(6, requires_grad=True)
        s = torch.sigmoid(x)
        act(s).sum().backward()

    d = diagnose_call(cell)
    assert d["category"] == "inplace_modification"
    assert d["facts"]["op"].startswith("Sigmoid") and d["facts"]["version"] == 1
    assert "s" in names(d) and "act" in names(d)
    assert d["confidence"] == "likely"


def test_backward_without_graph() -> None:
    def cell() -> None:
        model = nn.Linear(3, 1)
        with torch.no_grad():
            loss = model(torch.randn(2, 3)).sum()
        loss.backward()

    d = diagnose_call(cell)
    assert d["category"] == "autograd" and names(d) == ["loss"]


def test_anomaly_detection_nan() -> None:
    def cell() -> None:
        with torch.autograd.detect_anomaly(check_nan=True):
            a = torch.tensor([-1.0], requires_grad=True)
            torch.sqrt(a).backward()

    with pytest.warns(UserWarning):
        d = diagnose_call(cell)
    assert d["category"] == "non_finite" and d["facts"]["op"] == "SqrtBackward0"


# --- memory, CUDA -------------------------------------------------------------------------------


def test_cpu_oom_names_largest_tensor() -> None:
    def cell() -> None:
        activations = torch.zeros(1000, 1000)  # noqa: F841 - seen by the capture
        small = torch.zeros(3)  # noqa: F841
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 400000000000 bytes. Error code 12 (Cannot allocate "
            "memory)"
        )

    d = diagnose_call(cell)
    assert d["category"] == "out_of_memory"
    assert d["facts"]["device"] == "cpu" and d["facts"]["requested_bytes"] == 400_000_000_000
    assert names(d)[:2] == ["activations", "small"]
    assert "`activations` (3.81 MiB)" in d["headline"]


def test_cuda_oom_single_huge_allocation() -> None:
    msg = (
        "CUDA out of memory. Tried to allocate 60.00 GiB. GPU 1 has a total capacity of "
        "79.15 GiB of which 10.00 GiB is free. Of the allocated memory 9.00 GiB is allocated "
        "by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated."
    )
    d = diagnose_call(lambda: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError(msg)))
    assert d["facts"]["device"] == "cuda:1" and d["facts"]["requested_bytes"] == 60 * 2**30
    assert "over half the device" in d["remedy"] and "fragmentation" not in d["facts"]


def test_r22_device_side_assert_touches_no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    touched: list[str] = []
    for fn in (
        "synchronize",
        "is_available",
        "device_count",
        "memory_allocated",
        "memory_reserved",
        "mem_get_info",
        "empty_cache",
        "current_device",
        "init",
    ):
        monkeypatch.setattr(torch.cuda, fn, lambda *a, _n=fn, **k: touched.append(_n))

    def cell() -> None:
        logits = torch.randn(3, 4)  # noqa: F841 - a CPU local next to the CUDA error
        raise torch.AcceleratorError(
            "CUDA error: device-side assert triggered\nCUDA kernel errors might be "
            "asynchronously reported at some other API call, so the stacktrace below might be "
            "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
        )

    d = diagnose_call(cell)
    assert d["category"] == "device_side_assert" and d["facts"]["sticky"] is True
    assert "CUDA_LAUNCH_BLOCKING=1" in d["remedy"]
    assert touched == []
    assert not torch.cuda.is_initialized()


# --- no wrong claims --------------------------------------------------------------------------


def test_generic_error_ignores_unrelated_nan_loss() -> None:
    def cell() -> None:
        loss = torch.tensor(float("nan"))  # noqa: F841 - unrelated to the KeyError
        config: dict[str, int] = {}
        config["epochs"]

    d = diagnose_call(cell)
    assert d["category"] == "generic" and d["culprits"] == [] and d["remedy"] is None


def test_chained_cause_is_recognised_as_likely() -> None:
    def cell() -> None:
        try:
            F.cross_entropy(torch.randn(2, 3), torch.tensor([0, 7]))
        except IndexError as e:
            raise RuntimeError("worker failed") from e

    d = diagnose_call(cell)
    assert d["category"] == "index_out_of_range"
    assert d["confidence"] == "likely" and d["facts"]["from_related"] == 0
