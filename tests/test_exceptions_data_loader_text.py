"""torch's ``ExceptionWrapper`` text read back without a kernel: bounds (R09), odd
exceptions (R20), and what is stated when the worker noted nothing (R47).

Each case builds the wrapper torch's DataLoader worker builds (``ExceptionWrapper(where=
"in DataLoader worker process N")`` inside ``except``) and raises it the way the main
process does (``reraise``), so the capture sees the same traceback and message a real
worker error gives; the worker's traceback text is that of the real exception.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from torch._utils import ExceptionWrapper

from jupyterlab_torchdbg.kernel.exceptions.capture import Limits, capture
from jupyterlab_torchdbg.kernel.exceptions.capture.loader_error import parse_traceback
from jupyterlab_torchdbg.ranks.worker import loader_errors


def wrapped(fn: Any, worker: int = 0) -> BaseException:
    """The main process's exception for ``fn`` raising in DataLoader worker ``worker``."""
    try:
        fn()
    except Exception:
        w = ExceptionWrapper(where=f"in DataLoader worker process {worker}")
    else:
        raise AssertionError("did not raise")
    try:
        w.reraise()
    except Exception as e:
        return e
    raise AssertionError("reraise did not raise")


def size(msg: dict[str, Any]) -> int:
    return len(json.dumps(msg, allow_nan=False, ensure_ascii=False).encode("utf-8"))


def _bad_sample() -> None:
    raise ValueError("bad sample")


def test_without_the_workers_note_the_index_is_not_known_and_said_so() -> None:
    msg = capture(wrapped(_bad_sample, 3))
    u: Any = msg["unwrapped"]
    assert u["where"] == "DataLoader worker process 3" and u["worker_id"] == 3
    assert u["exception"] == {
        "type": "ValueError",
        "module": "builtins",
        "message": "bad sample",
        "message_truncated": False,
    }
    assert u["index_known"] is False and u["index"] is None and u["pid"] is None
    assert "only its traceback text" in u["why_unknown"]
    frames: Any = msg["frames"]
    f = frames[u["frame"]]
    assert f["function"] == "_bad_sample" and f["process"] == "DataLoader worker process 3"
    assert f["line"] == 'raise ValueError("bad sample")' and f["origin"] == "file"
    assert msg["focus"] == u["frame"]  # the innermost user frame is the worker's
    d: Any = msg["diagnosis"]
    assert d["category"] == "data_loader"
    assert "`ValueError: bad sample`" in d["headline"]
    assert "which sample is not known" in d["headline"]
    assert "sample index" not in d["headline"]  # R47: no index was read


class TwoArgs(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(code, text)


def _two_args() -> None:
    raise TwoArgs(3, "needs two")


def test_r20_an_exception_torch_cannot_rebuild_keeps_its_own_type() -> None:
    # torch raises RuntimeError(msg) when the type cannot be built from one string
    exc = wrapped(_two_args)
    assert type(exc) is RuntimeError
    u: Any = capture(exc)["unwrapped"]
    assert u["exception"]["type"] == "TwoArgs"
    assert u["exception"]["module"] == __name__
    assert u["exception"]["message"] == "(3, 'needs two')"


def _chained() -> None:
    try:
        {}["missing"]
    except KeyError:
        raise OSError("while reading the file") from None


def _context() -> None:
    try:
        {}["missing"]
    except KeyError:
        raise OSError("during handling")  # noqa: B904 - a __context__ chain


def test_r20_chained_worker_tracebacks_read_the_raised_exception() -> None:
    for fn, message in ((_chained, "while reading the file"), (_context, "during handling")):
        u: Any = capture(wrapped(fn))["unwrapped"]
        assert u["exception"]["type"] == "OSError" and u["exception"]["message"] == message


def _huge() -> None:
    raise ValueError("line\n" * 1_000_000 + "\udc80")


def test_r09_r20_five_megabyte_worker_message_is_bounded_and_encodable() -> None:
    msg = capture(wrapped(_huge))
    u: Any = msg["unwrapped"]
    assert u["exception"]["message_truncated"] is True
    assert len(u["exception"]["message"]) <= 10_000
    assert size(msg) < 200_000
    json.dumps(msg, ensure_ascii=False).encode("utf-8")  # no lone surrogate left


def _down(n: int) -> None:
    _down(n + 1)


def _recursion() -> None:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(3200)
    try:
        _down(0)
    finally:
        sys.setrecursionlimit(old)


def test_r09_worker_recursion_is_one_frame_and_a_repeated_gap() -> None:
    msg: Any = capture(wrapped(_recursion))
    assert msg["unwrapped"]["exception"]["type"] == "RecursionError"
    worker = [i for i, f in enumerate(msg["frames"]) if f.get("process")]
    downs = [i for i in worker if msg["frames"][i]["function"] == "_down"]
    (gap,) = [e for e in msg["elided"] if e["reason"] == "repeated"]
    assert gap["after"] == downs[-1] and gap["count"] > 2900
    assert msg["truncated"] is True and msg["frames_total"] > 3000
    assert size(msg) < 200_000


def _deep(n: int) -> None:
    if n == 0:
        raise ValueError("bottom")
    _deep(n - 1) if n % 2 else _deep_other(n - 1)


def _deep_other(n: int) -> None:
    _deep(n)


def test_r09_deep_worker_stack_keeps_the_innermost_frames_and_marks_the_gap() -> None:
    msg: Any = capture(wrapped(lambda: _deep(300)), limits=Limits(frames=40))
    worker = [f for f in msg["frames"] if f.get("process")]
    assert len(worker) == 40 and worker[-1]["function"] == "_deep"
    assert worker[-1]["line"] == 'raise ValueError("bottom")'
    (gap,) = [e for e in msg["elided"] if e["reason"] == "limit"]
    assert msg["frames"][gap["after"]].get("process") is None  # before the worker's frames
    assert gap["count"] > 400 and msg["truncated"] is True
    assert size(msg) < 1_000_000


def test_r20_text_that_is_not_a_traceback_gives_the_plain_view() -> None:
    for text in (
        "Traceback (most recent call last):\n  <garbage>\n",
        "no traceback at all",
        "Traceback (most recent call last):\n",
        "",
    ):
        assert parse_traceback(text, Limits()) is None
    exc = ValueError("Caught ValueError in DataLoader worker process 0.\nOriginal nothing")
    msg: Any = capture(exc)
    assert "unwrapped" not in msg and msg["diagnosis"]["category"] == "generic"


def test_the_workers_note_is_read_when_torch_pickles_the_wrapper() -> None:
    # the wrapper crosses the data queue pickled: the note travels in its __dict__
    import pickle

    class Note:
        def __init__(self) -> None:
            self.__dict__[loader_errors.ORIGIN_ATTR] = {
                "index": 7,
                "index_known": True,
                "batch": [6, 7],
                "batch_size": 2,
                "dataset": "Samples",
                "iterable": False,
                "worker_id": 0,
                "pid": 4242,
                "junk": object(),  # anything else is dropped
            }

    try:
        _bad_sample()
    except Exception:
        w = ExceptionWrapper(where="in DataLoader worker process 0")
    w.__dict__.update({k: v for k, v in Note().__dict__.items()})
    del w.__dict__[loader_errors.ORIGIN_ATTR]["junk"]
    w = pickle.loads(pickle.dumps(w))
    try:
        w.reraise()
    except Exception as e:
        u: Any = capture(e)["unwrapped"]
    assert (u["index"], u["batch"], u["pid"], u["dataset"]) == (7, [6, 7], 4242, "Samples")
