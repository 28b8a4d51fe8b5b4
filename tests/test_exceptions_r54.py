"""R54: the capture never calls user code without a bound.

Tensor metadata is read with subclass dispatch off (a ``__torch_function__`` that sleeps,
a ``.shape`` property that hangs, a custom-size ``__torch_dispatch__`` never run); a
DTensor (or anything from ``torch.distributed``) is never called, so no collective can
start (R35); modules are walked through their own dicts (an overridden ``parameters()``
never runs); the capture has a deadline after which the rest is marked "not read (time
budget)" and the message is sent, marked truncated. In-process first, then in a real
kernel (the failing cell returns quickly, the panel's message still arrives).
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import torch
from _exc_helpers import SyncKernel, start_kernel
from torch import nn

from jupyterlab_torchdbg.kernel.exceptions.capture import capture
from jupyterlab_torchdbg.kernel.exceptions.summarize import summarize, summarize_locals
from jupyterlab_torchdbg.kernel.exceptions.summarize.budget import Budget
from jupyterlab_torchdbg.kernel.safe_read import NOT_READ

#: What every trap sleeps per call: one call would show in the capture's time.
SLEEP = 5.0

#: The capture must end well within this (its deadline is 1 s; a trap costs 5 s).
FAST = 1.5

CALLS: list[str] = []


def _trap(what: str) -> None:
    CALLS.append(what)
    time.sleep(SLEEP)


class SlowFunction(torch.Tensor):
    """Every torch call on it (``.shape``, ``.numel()``, ...) sleeps 5 s."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        _trap(f"torch_function:{getattr(func, '__name__', func)}")
        return super().__torch_function__(func, types, args, kwargs or {})


class SlowProperties(torch.Tensor):
    """Metadata properties and methods that hang."""

    @property
    def shape(self) -> Any:  # type: ignore[override]
        _trap("shape")
        return (1,)

    @property
    def device(self) -> Any:  # type: ignore[override]
        _trap("device")
        return torch.device("cpu")

    def numel(self) -> int:  # type: ignore[override]
        _trap("numel")
        return 1

    def __len__(self) -> int:
        _trap("len")
        return 1


class SlowObject:
    """``__len__``, ``__repr__``, a ``.shape``, a ``__dict__`` and a ``__class__`` that hang."""

    def __len__(self) -> int:
        _trap("obj len")
        return 1

    def __repr__(self) -> str:
        _trap("obj repr")
        return "SlowObject"

    @property
    def shape(self) -> Any:
        _trap("obj shape")
        return (1,)

    @property  # type: ignore[misc]
    def __dict__(self) -> Any:  # type: ignore[override]
        _trap("obj __dict__")
        return {}

    @property  # type: ignore[misc]
    def __class__(self) -> Any:  # isinstance(x, torch.Tensor) would read it
        _trap("obj __class__")
        return torch.Tensor


class SlowModule(nn.Module):
    """A model whose walking methods hang (FSDP overrides them too)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def parameters(self, recurse: bool = True) -> Any:
        _trap("parameters")
        return super().parameters(recurse)

    def named_parameters(self, *a: Any, **k: Any) -> Any:
        _trap("named_parameters")
        return super().named_parameters(*a, **k)

    def named_modules(self, *a: Any, **k: Any) -> Any:
        _trap("named_modules")
        return super().named_modules(*a, **k)


class DTensorLike(torch.Tensor):
    """Looks like ``torch.distributed.tensor.DTensor`` (module, name, slots, a local shard);
    every Python-level touch is recorded and raises: a method could run a collective."""

    __module__ = "torch.distributed.tensor._api"
    __slots__ = ("_local_tensor", "_spec")
    armed: ClassVar[bool] = False

    @staticmethod
    def __new__(cls, local: torch.Tensor) -> DTensorLike:
        r = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, (local.shape[0] * 2, *local.shape[1:]), dtype=local.dtype, device=local.device
        )
        r._local_tensor = local
        r._spec = None
        return r  # type: ignore[no-any-return]

    def __init__(self, local: torch.Tensor) -> None:
        pass

    def __getattribute__(self, name: str) -> Any:
        if DTensorLike.armed:
            CALLS.append(f"dtensor getattribute:{name}")
            raise RuntimeError(f"collective! ({name})")
        return object.__getattribute__(self, name)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        CALLS.append(f"dtensor torch_function:{getattr(func, '__name__', func)}")
        raise RuntimeError("collective! (__torch_function__)")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        CALLS.append(f"dtensor torch_dispatch:{func}")
        raise RuntimeError("collective! (__torch_dispatch__)")

    def full_tensor(self) -> torch.Tensor:
        CALLS.append("dtensor full_tensor")
        raise RuntimeError("collective! (full_tensor)")

    def redistribute(self, *a: Any) -> DTensorLike:
        CALLS.append("dtensor redistribute")
        raise RuntimeError("collective! (redistribute)")

    def __repr__(self) -> str:  # type: ignore[override]
        CALLS.append("dtensor repr")
        raise RuntimeError("collective! (repr)")


DTensorLike.__qualname__ = DTensorLike.__name__ = "DTensor"


class CustomSizes(torch.Tensor):
    """A wrapper subclass whose sizes come from ``__torch_dispatch__`` (which hangs)."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> CustomSizes:
        return torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined,no-any-return]
            cls, elem.shape, dtype=elem.dtype, dispatch_sizes_strides_policy="sizes"
        )

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        _trap(f"torch_dispatch:{func}")
        raise NotImplementedError

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    CALLS.clear()
    yield
    DTensorLike.armed = False


def _raised(fn: Any, *args: Any) -> BaseException:
    try:
        fn(*args)
    except BaseException as e:
        return e
    raise AssertionError("did not raise")


def _timed_capture(exc: BaseException, **kw: Any) -> tuple[dict[str, Any], float]:
    CALLS.clear()  # the failing code's own calls (TensorDataset reads .size(0))
    t0 = time.perf_counter()
    msg = capture(exc, **kw)
    return msg, time.perf_counter() - t0


def _rows(msg: dict[str, Any], frame: int = -1) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in msg["frames"][frame]["locals"]}


# --- in-process -------------------------------------------------------------------------------


def test_r54_r21_torch_function_subclass_read_from_metadata_without_calls() -> None:
    def fails() -> None:
        slow = torch.randn(3, 4).as_subclass(SlowFunction)
        in_list = [torch.zeros(2).as_subclass(SlowFunction)]
        ds = torch.utils.data.TensorDataset(torch.zeros(5).as_subclass(SlowFunction))
        raise RuntimeError(f"boom {len(in_list)} {ds is not None} {slow is not None}")

    exc = _raised(fails)
    msg, took = _timed_capture(exc)
    assert CALLS == [] and took < FAST
    rows = _rows(msg)
    slow = rows["slow"]
    assert (slow["type"], slow["shape"], slow["dtype"], slow["device"]) == (
        "SlowFunction",
        [3, 4],
        "float32",
        "cpu",
    )
    assert slow["nbytes"] == 48 and slow["finite"] is None  # a subclass's data is never read
    assert rows["in_list"]["items"][0]["shape"] == [2]
    assert rows["ds"]["len"] == 5
    assert msg["truncated"] is False


def test_r54_shape_len_repr_dict_class_properties_never_run() -> None:
    def fails() -> None:
        t = torch.zeros(2, 3).as_subclass(SlowProperties)
        obj = SlowObject()
        model = SlowModule()
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"cuda:0 and cpu! {t is not None} {obj is not None} {model is not None}"
        )

    exc = _raised(fails)
    msg, took = _timed_capture(exc)
    assert CALLS == [] and took < FAST
    rows = _rows(msg)
    assert rows["t"]["shape"] == [2, 3] and rows["t"]["device"] == "cpu"
    assert rows["obj"]["kind"] == "object" and rows["obj"]["text"] == "SlowObject"
    assert rows["model"]["params"] == 15 and rows["model"]["devices"] == ["cpu"]
    assert msg["diagnosis"]["category"] == "device_mismatch"  # the rules ran, no calls


def test_r54_custom_size_dispatch_subclass_shape_not_read() -> None:
    t = CustomSizes(torch.zeros(4))
    t0 = time.perf_counter()
    row = summarize(t)
    assert CALLS == [] and time.perf_counter() - t0 < FAST
    assert row["shape"] == "n/a" and row["dtype"] == "float32"  # read what is plain metadata


def test_r54_r35_dtensor_like_never_called_in_locals_or_as_parameters() -> None:
    def fails() -> None:
        dt = DTensorLike(torch.zeros(2, 3))
        model = nn.Linear(3, 4)
        model._parameters["weight"] = DTensorLike(torch.zeros(2, 3))  # FSDP2-style shard
        DTensorLike.armed = True
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"cuda:0 and cpu! {dt is not None} {model is not None}"
        )

    exc = _raised(fails)
    msg, took = _timed_capture(exc)
    assert CALLS == [] and took < FAST
    rows = _rows(msg)
    dt = rows["dt"]
    assert dt["type"] == "DTensor" and dt["shape"] == [4, 3]  # the wrapper's global shape
    assert "local shard [2, 3] on cpu" in dt["text"]
    assert rows["model"]["params"] == 4 + 12  # bias + the wrapper's global numel


def test_r54_r35_real_dtensor_never_dispatches() -> None:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed unavailable or already initialised")
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    original = DTensor.__dict__["__torch_dispatch__"]
    try:
        d = distribute_tensor(torch.randn(4, 2), DeviceMesh("cpu", [0]), [Shard(0)])

        def spy(cls: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            CALLS.append(str(func))
            return original.__func__(cls, func, types, args, kwargs)

        DTensor.__torch_dispatch__ = classmethod(spy)  # type: ignore[assignment,method-assign]
        exc = _raised(lambda x: 1 / 0, d)
        msg, _ = _timed_capture(exc)
        row = _rows(msg)["x"]
        assert CALLS == []
        assert row["type"] == "DTensor" and row["shape"] == [4, 2]
        assert "local shard [4, 2] on cpu" in row["text"]
    finally:
        DTensor.__torch_dispatch__ = original  # type: ignore[method-assign]
        dist.destroy_process_group()


def test_r54_modes_left_entered_never_run_for_the_value_checks() -> None:
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class SlowFunctionMode(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            _trap(f"function mode:{getattr(func, '__name__', func)}")
            return func(*args, **(kwargs or {}))

    class SlowDispatchMode(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            _trap(f"dispatch mode:{func}")
            return func(*args, **(kwargs or {}))

    x = torch.tensor([1.0, float("nan")])
    exc = _raised(lambda x: 1 / 0, x)
    fmode = SlowFunctionMode()
    fmode.__enter__()  # as a cell that entered a mode and never left it
    try:
        msg, took = _timed_capture(exc)
    finally:
        fmode.__exit__(None, None, None)
    assert CALLS == [] and took < FAST
    assert _rows(msg)["x"]["finite"] is False  # still checked, with the mode switched off
    dmode = SlowDispatchMode()
    dmode.__enter__()
    try:
        msg, took = _timed_capture(exc)
    finally:
        dmode.__exit__(None, None, None)
    assert CALLS == [] and took < FAST
    assert _rows(msg)["x"]["finite"] is None  # not read under a dispatch mode


class _StepClock:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_r54_deadline_marks_the_rest_not_read_and_sends_what_was_read() -> None:
    def fails() -> None:
        a0, a1, a2, a3, a4, a5 = (torch.zeros(k + 1) for k in range(6))
        raise RuntimeError(f"{a0}{a1}{a2}{a3}{a4}{a5}")

    exc = _raised(fails)
    budget = Budget(1.0, item_seconds=float("inf"), clock=_StepClock(0.1))
    msg = capture(exc, budget=budget)
    rows = msg["frames"][-1]["locals"]
    read = [r for r in rows if r["text"] != NOT_READ]
    unread = [r for r in rows if r["text"] == NOT_READ]
    assert read and unread  # some were read before the deadline, the rest were not
    assert all("shape" in r for r in read) and all("shape" not in r for r in unread)
    assert all(r["kind"] == "tensor" and r["type"] == "Tensor" for r in unread)
    assert budget.skipped >= len(unread)
    assert msg["truncated"] is True
    assert msg["exception"]["message"]  # the exception itself is always read


def test_r54_a_type_slower_than_its_allowance_is_read_once() -> None:
    budget = Budget(100.0, item_seconds=0.05, clock=_StepClock(0.1))
    items = [("a", torch.zeros(1)), ("b", torch.zeros(2)), ("n", 3), ("c", torch.zeros(3))]
    rows, total = summarize_locals(items, limit=10, budget=budget)
    texts = {r["name"]: r["text"] for r in rows}
    assert total == 4
    read_tensors = [n for n in "abc" if texts[n] != NOT_READ]
    assert len(read_tensors) == 1  # the first tensor took "too long": the others wait
    assert texts["n"] == "3"  # another type is still read
    assert budget.skipped == 2


def test_r54_linked_exception_str_not_called_after_the_deadline() -> None:
    class SlowStr(Exception):
        def __str__(self) -> str:
            _trap("exc str")
            return "slow"

    def chained() -> None:
        try:
            raise SlowStr()
        except SlowStr as e:
            raise ValueError("outer") from e

    exc = _raised(chained)
    msg = capture(exc, budget=Budget(0.0))
    assert CALLS == []
    assert msg["exception"]["message"] == "outer"  # builtin __str__ of builtin args
    (link,) = msg["chain"]
    assert link["type"].endswith("SlowStr") and link.get("message_unavailable") is True
    assert msg["truncated"] is True


def test_r54_interrupt_during_capture_is_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from test_exceptions_capture import FakeExt

    import jupyterlab_torchdbg.kernel.exceptions as exceptions_mod

    def interrupted(*a: Any, **k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(exceptions_mod, "capture", interrupted)
    ext = FakeExt()
    monitor = exceptions_mod.ExceptionMonitor(ext)  # type: ignore[arg-type]
    result = SimpleNamespace(
        error_in_exec=ValueError("x"), error_before_exec=None, execution_count=1, info=None
    )
    monitor.post_run_cell(result)  # must not raise KeyboardInterrupt into the cell
    assert monitor.last is None and ext.errors == {"exceptions:interrupted": 1}


# --- in a real kernel -------------------------------------------------------------------------

KERNEL_SETUP = textwrap.dedent(
    """
    import time, torch, torch.nn as nn
    CALLS = []
    def _trap(what):
        CALLS.append(what)
        time.sleep(5)
    class SlowFunction(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            _trap(getattr(func, '__name__', str(func)))
            return super().__torch_function__(func, types, args, kwargs or {})
    class SlowParts:
        def __len__(self): _trap('len'); return 1
        def __repr__(self): _trap('repr'); return 'x'
        @property
        def shape(self): _trap('shape'); return (1,)
    class SlowShape(torch.Tensor):
        @property
        def shape(self): _trap('tensor shape'); return (1,)
        def __len__(self): _trap('tensor len'); return 1
        def __repr__(self): _trap('tensor repr'); return 'x'
    %load_ext jupyterlab_torchdbg
    """
)


@pytest.fixture(scope="module")
def k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncKernel]:
    gen = start_kernel(tmp_path_factory.mktemp("r54-kernel"))
    kern = next(gen)
    kern.run(KERNEL_SETUP)
    kern.comm_id = kern.open_comm()  # type: ignore[attr-defined]
    yield kern
    gen.close()


def _fail_timed(k: SyncKernel, code: str) -> tuple[dict[str, Any], float, Any]:
    t0 = time.monotonic()
    cell = k.execute(code, timeout=60)
    took = time.monotonic() - t0
    assert not cell.ok
    found = cell.exceptions()
    if not found:
        n = len(k.comm)
        k.pump(1.0)
        found = [d for _, d in k.comm[n:] if d.get("method") == "exception"]
    assert found, "no exception message"
    return found[-1], took, cell


def test_r54_kernel_slow_torch_function_locals_cell_returns_fast(k: SyncKernel) -> None:
    msg, took, cell = _fail_timed(
        k,
        "def step():\n"
        "    x = torch.randn(8, 3).as_subclass(SlowFunction)\n"
        "    many = [torch.zeros(2).as_subclass(SlowFunction) for _ in range(50)]\n"
        "    extra = {f'w{i}': torch.zeros(i + 1).as_subclass(SlowFunction) for i in range(50)}\n"
        "    globals().update(extra)\n"
        "    raise RuntimeError('boom')\n"
        "step()",
    )
    assert [e["ename"] for e in cell.errors] == ["RuntimeError"]  # no extra KeyboardInterrupt
    assert msg["capture_ms"] < FAST * 1000
    assert took < SLEEP  # not one trap ran (measured on a shared machine: generous)
    rows = {r["name"]: r for r in msg["frames"][msg["focus"]]["locals"]}
    assert rows["x"]["shape"] == [8, 3] and rows["x"]["dtype"] == "float32"
    assert rows["many"]["text"] == "list of 50"
    assert k.run("print(CALLS)").stdout.strip() == "[]"
    # the user's exception, traceback and %debug target are unchanged (R16)
    out = k.run("import sys\nprint(type(sys.last_value).__name__, sys.last_value)")
    assert out.stdout.strip() == "RuntimeError boom"


def test_r54_kernel_slow_shape_len_repr_bounded(k: SyncKernel) -> None:
    msg, took, cell = _fail_timed(
        k,
        "def step():\n"
        "    obj = SlowParts()\n"
        "    t = torch.zeros(4, 5).as_subclass(SlowShape)\n"
        "    raise ValueError('bad')\n"
        "step()",
    )
    assert [e["ename"] for e in cell.errors] == ["ValueError"]
    assert msg["capture_ms"] < FAST * 1000 and took < SLEEP
    rows = {r["name"]: r for r in msg["frames"][msg["focus"]]["locals"]}
    assert rows["obj"]["text"] == "SlowParts"
    assert rows["t"]["shape"] == [4, 5]
    assert k.run("print(CALLS)").stdout.strip() == "[]"


def test_r54_kernel_deadline_sends_message_marked_partial(k: SyncKernel) -> None:
    k.run(
        "import jupyterlab_torchdbg.kernel.exceptions.summarize.budget as _b\n"
        "_saved = _b.CAPTURE_SECONDS\n_b.CAPTURE_SECONDS = 0.0"
    )
    try:
        msg, _, _ = _fail_timed(
            k,
            "def step():\n"
            "    xs = [torch.zeros(3).as_subclass(SlowFunction) for _ in range(5)]\n"
            "    a, b = torch.zeros(2), torch.zeros(3)\n"
            "    raise RuntimeError('late')\n"
            "step()",
        )
    finally:
        k.run("_b.CAPTURE_SECONDS = _saved")
    assert msg["exception"]["message"] == "late"
    assert msg["truncated"] is True
    rows = msg["frames"][msg["focus"]]["locals"]
    assert rows and all(r["text"] == "not read (time budget)" for r in rows)
    assert {r["name"] for r in rows} == {"xs", "a", "b"}
    assert k.run("print(CALLS)").stdout.strip() == "[]"
    # the next failure gets the full budget again
    msg = k.fail("def again():\n    y = torch.zeros(2)\n    raise RuntimeError('x')\nagain()")
    rows = msg["frames"][msg["focus"]]["locals"]
    assert rows[0]["shape"] == [2] and msg["truncated"] is False
