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
    # The model is the odd one out (meta has no data): materialise it, leave `x` alone.
    assert d["facts"]["odd"] == ["model"]
    assert "`model.to_empty(device='cpu')`" in d["remedy"]
    assert "x.to(" not in d["remedy"]


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


def one_sentence(headline: str) -> bool:
    return ". " not in headline and "\n" not in headline and len(headline) <= 160


class MaskedHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fc(x).add(bias).masked_fill(mask, 0.0)


def test_meta_mask_beside_cpu_model_names_the_mask_and_moves_only_it() -> None:
    def cell() -> None:
        model = MaskedHead()
        x = torch.randn(2, 8)
        bias = torch.randn(8)
        mask = torch.ones(2, 8, dtype=torch.bool, device="meta")
        model(x, bias, mask)

    d = diagnose_call(cell)
    assert d["category"] == "device_mismatch"
    assert d["headline"] == "`mask` is on meta; `model` and the other 3 tensors are on cpu"
    assert one_sentence(d["headline"])
    assert d["facts"]["odd"] == ["mask"] and d["facts"]["target_device"] == "cpu"
    assert names(d)[0] == "mask"
    # The remedy re-creates the mask where the model is; it does not touch the model.
    assert "`mask = torch.ones(2, 8, dtype=torch.bool, device='cpu')`" in d["remedy"]
    assert "to_empty" not in d["remedy"] and "model" not in d["remedy"]


def test_the_minority_device_is_named_not_the_first_tensor() -> None:
    def cell() -> None:
        a = torch.randn(2)
        m1 = torch.randn(2, device="meta")
        b = torch.randn(2)
        m2 = torch.randn(2, device="meta")
        c = torch.randn(2)
        torch.cat([a, m1, b, m2, c])

    d = diagnose_call(cell)
    assert d["headline"] == "`m1` and `m2` are on meta; the other 3 tensors are on cpu"
    assert d["facts"]["odd"] == ["m1", "m2"]
    assert "`m1 = torch.ones(2" in d["remedy"] and "`m2 = torch.ones(2" in d["remedy"]
    assert "`a" not in d["remedy"]


def test_batch_dict_entry_on_the_wrong_device_is_named_by_its_key() -> None:
    def cell() -> None:
        model = nn.Linear(6, 6)
        batch = {"x": torch.randn(2, 6, device="meta"), "y": torch.randn(2, 6)}
        model(batch["x"])

    d = diagnose_call(cell)
    assert d["headline"] == "`batch['x']` is on meta; `model` and `batch['y']` are on cpu"
    assert d["facts"]["odd"] == ["batch['x']"]
    assert "`batch['x'] = torch.ones(2, 6, dtype=torch.float32, device='cpu')`" in d["remedy"]


class KeywordModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        return self.fc(input_ids) * attention_mask


def test_batch_unpacked_into_a_forward_names_the_entry_to_fix() -> None:
    def cell() -> None:
        model = KeywordModel()
        batch = {
            "input_ids": torch.randn(2, 3),
            "attention_mask": torch.ones(2, 3, device="meta"),
            "labels": torch.zeros(2),
        }
        model(**batch)

    d = diagnose_call(cell)
    assert d["headline"].startswith("`attention_mask` is on meta; `model` and ")
    assert d["headline"].endswith(" are on cpu") and one_sentence(d["headline"])
    # Inside forward it is `attention_mask`; the fix belongs where the batch is made.
    assert "Create `batch['attention_mask']` on cpu" in d["remedy"]


class ScaledHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.scale = torch.ones(3, device="meta")  # a plain attribute, not a buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


def test_plain_tensor_attribute_left_behind_is_named_with_register_buffer() -> None:
    def cell() -> None:
        model = ScaledHead()
        x = torch.randn(2, 3)
        model(x)

    d = diagnose_call(cell)
    assert d["headline"].startswith("`model.scale` is on meta; `model` and ")
    assert "self.register_buffer('scale'" in d["remedy"]


def test_optimizer_state_on_another_device_points_at_load_order() -> None:
    def cell() -> None:
        model = nn.Linear(3, 2)
        opt = torch.optim.Adam(model.parameters(), foreach=False)
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
        for state in opt.state.values():  # as if loaded before the model moved
            state["exp_avg"] = state["exp_avg"].to("meta")
        opt.step()

    d = diagnose_call(cell)
    assert d["category"] == "device_mismatch"
    assert d["headline"] == "The `exp_avg` state of `opt` is on meta; its parameters are on cpu"
    assert d["facts"]["odd"][0] == "opt.state[model.weight]['exp_avg']"
    assert "before `opt.load_state_dict(...)`" in d["remedy"]
    assert "map_location='cpu'" in d["remedy"]


def test_cpu_data_beside_a_model_on_an_accelerator_moves_the_data() -> None:
    """No GPU here: the rule itself, on rows as the capture makes them. Three tensors
    left on cpu outnumber the model on cuda:0, but the model's device is the intent."""
    from jupyterlab_torchdbg.kernel.exceptions.diagnose.device_dtype import odd_device

    model = {"name": "model", "kind": "module", "devices": ["cuda:0"], "type": "Net"}
    rows = [
        {"name": n, "kind": "tensor", "device": "cpu", "shape": [4, 3], "type": "Tensor"}
        for n in ("x", "mask", "pos")
    ]
    d = odd_device([model, *rows])
    assert d["facts"]["target_device"] == "cuda:0"
    assert d["headline"] == "`x`, `mask` and `pos` are on cpu; `model` parameters are on cuda:0"
    assert "`x = x.to('cuda:0')`" in d["remedy"] and "model.to(" not in d["remedy"]
    batch = {"name": "batch['x']", "kind": "tensor", "device": "cpu", "_holder": "batch"}
    d = odd_device([{**model, "devices": ["cuda:0"]}, batch])
    assert "batch = {k: v.to('cuda:0') for k, v in batch.items()}" in d["remedy"]
    # A model left on cpu while the data is on the accelerator: the model moves.
    d = odd_device([{**model, "devices": ["cpu"]}, *[{**r, "device": "cuda:0"} for r in rows]])
    assert d["facts"]["odd"] == ["model"] and "`model.to('cuda:0')`" in d["remedy"]


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


def test_one_float64_among_float32_is_named_and_converted() -> None:
    def cell() -> None:
        a = torch.randn(3, 3)
        b = torch.randn(3, 3)
        c = torch.randn(3, 3, dtype=torch.float64)
        torch.addmm(a, b, c)

    d = diagnose_call(cell)
    assert d["headline"] == "`c` is float64; `a` and `b` are float32"
    assert d["remedy"] == "Convert it to float32: `c = c.float()`."


def test_the_minority_dtype_wins_even_when_it_is_float32() -> None:
    def cell() -> None:
        a = torch.randn(2, 2, dtype=torch.float64)
        b = torch.randn(2, 2, dtype=torch.float64)
        c = torch.randn(2, 2)
        torch.addmm(a, b, c)

    d = diagnose_call(cell)
    assert d["headline"] == "`c` is float32; `a` and `b` are float64"
    assert d["remedy"] == "Convert it to float64: `c = c.double()`."


def test_float16_layer_with_float32_input_converts_the_input_or_autocasts() -> None:
    def cell() -> None:
        layer = nn.Linear(4, 4).half()
        x = torch.randn(2, 4)
        layer(x)

    d = diagnose_call(cell)
    assert d["headline"] == "`x` is float32, but `layer` (Linear) has float16 weights"
    assert d["remedy"].startswith("Convert the input: `x = x.half()`.")
    assert "torch.autocast('cpu', dtype=torch.float16)" in d["remedy"]
    assert d["facts"]["odd"] == ["x"]


class OneHalfLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 4).half()
        self.fc3 = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.fc2(self.fc1(x)))


def test_float16_layer_inside_a_float32_model_is_the_odd_one() -> None:
    def cell() -> None:
        net = OneHalfLayer()
        x = torch.randn(3, 4)
        net(x)

    d = diagnose_call(cell)
    assert d["headline"] == (
        "`net.fc2` (Linear) has float16 weights; its input and the rest of `net` are float32"
    )
    assert d["remedy"] == "Convert the layer: `net.fc2.to(torch.float32)`."


def test_conv_and_lstm_dtype_messages_name_the_input() -> None:
    def conv() -> None:
        conv = nn.Conv2d(1, 1, 3).half()
        img = torch.randn(1, 1, 5, 5)
        conv(img)

    d = diagnose_call(conv)
    assert d["headline"] == "`img` is float32, but `conv` (Conv2d) has float16 weights"

    def lstm() -> None:
        lstm = nn.LSTM(3, 3)
        seq = torch.randn(2, 1, 3, dtype=torch.float64)
        lstm(seq)

    d = diagnose_call(lstm)
    assert d["category"] == "dtype_mismatch" and "`seq = seq.float()`" in d["remedy"]


def test_index_tensors_of_a_wrong_dtype() -> None:
    def embedding() -> None:
        emb = nn.Embedding(5, 2)
        tokens = torch.tensor([0.0, 1.0])
        emb(tokens)

    d = diagnose_call(embedding)
    assert (
        d["headline"] == "`tokens` is float32, but `emb` (Embedding) needs int64 or int32 indices"
    )
    assert d["remedy"] == "Convert the indices: `tokens = tokens.long()`."

    def one_hot() -> None:
        labels = torch.tensor([0, 1], dtype=torch.int32)
        F.one_hot(labels)

    d = diagnose_call(one_hot)
    assert names(d) == ["labels"] and "`labels = labels.long()`" in d["remedy"]


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
