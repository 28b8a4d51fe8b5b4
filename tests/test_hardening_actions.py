"""Hostile input to the action comm in a real kernel (R13, R43, R45, R07) and the security
rules that keep actions data, not code (S3, S4, S5).

One kernel serves the module (torch imported, extension loaded). It is sent JSON as a
browser may send it (``comm_wire``): integers beyond a float's range, lone surrogates,
``NaN`` literals. The reply contract for request ids the kernel cannot echo: see
``action_registry``'s docstring (``malformed``, ``request_id: null``).
"""

from __future__ import annotations

import ast
import json
import math
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from comm_wire import WireKernel, start_wire_kernel
from grads_support import session

import jupyterlab_torchdbg
from jupyterlab_torchdbg.kernel.action_registry import ActionRegistry
from jupyterlab_torchdbg.kernel.comms import CommHub
from jupyterlab_torchdbg.kernel.memory.action_args import validate_filename
from jupyterlab_torchdbg.protocol import PROTOCOL_VERSION, load_schema, major, parse_version

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jupyterlab_torchdbg"
HUGE = 10**400  # a JSON integer: Python's json reads it as an int; float() overflows


@pytest.fixture(scope="module")
def cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hardening")


@pytest.fixture(scope="module")
def k(cwd: Path) -> Iterator[WireKernel]:
    yield from start_wire_kernel(cwd)


@pytest.fixture(scope="module")
def comm(k: WireKernel) -> str:
    return k.open_comm()


def action(name: str, args: Any = None, request_id: str | None = None) -> dict[str, Any]:
    return {
        "method": "action",
        "request_id": request_id or uuid.uuid4().hex,
        "action": name,
        "args": {} if args is None else args,
    }


# --- R43: huge integers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, key",
    [
        ("clip", "max_norm"),
        ("scale_lr", "factor"),
        ("set_stride", "stride"),
        ("set_thresholds", "explode_abs"),
        ("set_thresholds", "explode_factor"),
        ("set_thresholds", "explode_warmup"),
        ("set_thresholds", "vanish_floor"),
    ],
)
@pytest.mark.parametrize("value", [HUGE, -HUGE, 2**1024], ids=["1e400", "-1e400", "2^1024"])
def test_r43_integers_beyond_a_float_are_out_of_range_with_one_reply(
    k: WireKernel, comm: str, name: str, key: str, value: int
) -> None:
    before = k.state()
    reply = k.request(comm, action(name, {key: value}))
    assert reply["method"] == "error" and reply["code"] == "invalid_args", reply
    assert "out of range" in reply["message"] or "must be" in reply["message"]
    assert k.state() == before  # invalid input changes nothing


# --- R43: lone surrogates ------------------------------------------------------------------------


@pytest.mark.parametrize("request_id", ["\ud800", "a\udc00b", "\udcff" * 3, "ok\udfff"])
def test_r43_request_id_with_a_lone_surrogate_gets_one_malformed_reply_with_null_id(
    k: WireKernel, comm: str, request_id: str
) -> None:
    """The id cannot go back verbatim (UTF-8 cannot carry it): one ``malformed`` error
    with ``request_id: null``, nothing applied."""
    before = k.state()
    reply = k.request(comm, action("clip", {"max_norm": 3.0}, request_id=request_id))
    assert reply == {
        "method": "error",
        "request_id": None,
        "code": "malformed",
        "message": reply["message"],
    }
    assert "well-formed Unicode" in reply["message"]
    assert k.state() == before


def test_r43_lone_surrogates_in_names_keys_and_values_are_answered(
    k: WireKernel, comm: str
) -> None:
    before = k.state()
    bad_key = k.request(comm, action("clip", {"max_norm\udc00": 1.0}))
    assert bad_key["code"] == "invalid_args" and "max_norm\\udc00" in bad_key["message"]
    bad_name = k.request(comm, action("cl\ud800ip", {}))
    assert bad_name["code"] == "unknown_action"
    bad_value = k.request(comm, action("set_stride", {"stride": "au\udc80to"}))
    assert bad_value["code"] == "invalid_args"
    bad_file = k.request(comm, action("save_checkpoint", {"filename": "a\udc00.pt"}))
    assert bad_file["code"] == "invalid_args"
    assert k.state() == before
    # a valid action whose argument holds one: applied, and its ack arrives
    ok = k.request(comm, action("clear_history", {"names": ["nope\ud800"]}))
    assert ok["method"] == "ack" and ok["result"] == {"cleared": 0}


def test_r43_nan_and_infinity_literals_and_deep_nesting_are_rejected(
    k: WireKernel, comm: str
) -> None:
    before = k.state()
    for value in (math.nan, math.inf, -math.inf):
        reply = k.request(comm, action("clip", {"max_norm": value}))
        assert reply["code"] == "invalid_args" and "finite" in reply["message"]
    deep: Any = 1.0
    for _ in range(200):
        deep = [deep]
    reply = k.request(comm, action("clip", {"max_norm": deep}))
    assert reply["code"] in ("malformed", "invalid_args")
    assert k.state() == before


def test_r43_a_reply_that_cannot_be_sent_is_replaced_by_one_failed_error() -> None:
    """The dispatcher's last resort: the send itself fails (not a closed comm)."""

    class Comm:
        comm_id = "c1"
        _closed = False

        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []
            self.fail_next = True

        def send(self, data: dict[str, Any], buffers: Any = None) -> None:
            if self.fail_next:
                self.fail_next = False
                raise UnicodeEncodeError("utf-8", "x", 0, 1, "surrogates not allowed")
            self.sent.append(data)

    errors: list[str] = []
    hub = CommHub(
        object(),
        hello=dict,
        handle_action=lambda data, comm_id: {"method": "ack", "request_id": "r1"},
        snapshot=lambda deliver: None,
        on_error=errors.append,
    )
    c = Comm()
    hub._on_msg(c, {"header": {}, "content": {"data": action("x", request_id="r1")}})
    assert c.sent == [
        {
            "method": "error",
            "request_id": "r1",
            "code": "failed",
            "message": c.sent[0]["message"],
        }
    ]
    assert errors == ["send"]
    # a handler that raises: still one reply
    hub2 = CommHub(
        object(),
        hello=dict,
        handle_action=lambda data, comm_id: 1 / 0,  # type: ignore[arg-type,return-value]
        snapshot=lambda deliver: None,
        on_error=errors.append,
    )
    c2 = Comm()
    c2.fail_next = False
    hub2._on_msg(c2, {"header": {}, "content": {"data": action("x", request_id="r2")}})
    assert [(m["request_id"], m["code"]) for m in c2.sent] == [("r2", "failed")]


# --- R13: de-duplication per comm ----------------------------------------------------------------


def test_r13_a_request_id_reused_on_another_comm_is_a_new_request(k: WireKernel) -> None:
    a, b = k.open_comm(), k.open_comm()
    start = len(k.events)
    rid = "same-" + uuid.uuid4().hex
    first = k.request(a, action("clip", {"max_norm": 1.5}, request_id=rid))
    assert first["method"] == "ack" and "duplicate" not in first
    other = k.request(b, action("clip", {"max_norm": 2.5}, request_id=rid))
    assert other["method"] == "ack" and "duplicate" not in other  # applied, not a duplicate
    assert other["result"]["clip"] == 2.5
    assert k.state()["control"]["clip"] == 2.5
    again = k.request(a, action("clip", {"max_norm": 9.0}, request_id=rid))
    assert again == {**first, "duplicate": True}  # same comm: the original answer
    assert k.state()["control"]["clip"] == 2.5  # and not applied
    k.pump(0.3)
    # each reply went to the comm that sent the request, once
    assert [d["request_id"] for d in k.replies(a, start)] == [rid, rid]
    assert [d["request_id"] for d in k.replies(b, start)] == [rid]
    k.request(a, action("unclip"))


def test_r13_the_reply_cache_stays_bounded() -> None:
    reg = ActionRegistry(lambda site: None)
    reg.register("noop", lambda a: {}, lambda a: {})
    for i in range(5000):
        reg.handle(action("noop", request_id=f"r{i}"), origin=f"comm{i % 7}")
    assert len(reg._replies) <= 512


# --- R07: strict protocol versions ---------------------------------------------------------------


@pytest.mark.parametrize(
    "version", ["\u0662.0", "02.0", "\u00b2.0", "2.0\n", " 2.0", "2", "2.0.1", "2.00", "\ud800.0"]
)
def test_r07_only_ascii_major_minor_is_accepted_and_a_refusal_says_why_before_closing(
    k: WireKernel, version: str
) -> None:
    comm_id = uuid.uuid4().hex
    start = len(k.events)
    k.open_raw(comm_id, {"method": "open", "protocol_version": version})
    k.wait_for(lambda: any(e[0] == "close" and e[1] == comm_id for e in k.events[start:]))
    mine = [(kind, d) for kind, c, d in k.events[start:] if c == comm_id]
    kinds = [kind if kind == "close" else d["method"] for kind, d in mine]
    assert kinds == ["hello", "error", "close"], (version, kinds)
    assert mine[0][1]["accepted"] is False
    error = mine[1][1]
    assert error["code"] == "protocol_mismatch" and PROTOCOL_VERSION in error["message"]


def test_r07_version_parsing_is_strict_ascii() -> None:
    assert parse_version("2.0") == (2, 0) and parse_version("10.12") == (10, 12)
    assert major(PROTOCOL_VERSION) == int(PROTOCOL_VERSION.split(".")[0])
    for bad in ("\u0662.0", "02.0", "\u00b2.0", "2.0\n", "2.", ".0", "2.0.0", "+2.0", 2.0, None):
        assert parse_version(bad) is None, bad


# --- R45: a failed memory-snapshot write keeps the recording -------------------------------------

SNAP = {
    "segments": [],
    "device_traces": [
        [{"action": "alloc", "size": 4096, "frames": [{"filename": "/w/t.py", "line": 3}]}]
    ],
}


def test_r45_failed_snapshot_write_keeps_recording_and_a_retry_writes_it(
    k: WireKernel, comm: str, cwd: Path
) -> None:
    k.run(
        "import os\n"
        "from jupyterlab_torchdbg.testing import memory_monitor\n"
        "from jupyterlab_torchdbg.kernel.memory.recording import ReplayHistory\n"
        f"_hist = ReplayHistory({SNAP!r})\n"
        "memory_monitor().recorder.history = _hist\n"
        "os.makedirs('gone', exist_ok=True); os.chdir('gone')"
    )
    try:
        started = k.request(comm, action("record_memory", {"op": "start"}))
        assert started["method"] == "ack" and started["result"]["state"] == "on"
        k.run("os.rmdir(os.getcwd())")  # the directory the snapshot goes to is gone
        failed = k.request(comm, action("record_memory", {"op": "stop"}))
        assert failed["method"] == "error" and failed["code"] == "failed", failed
        assert "still recording" in failed["message"]
        assert "No such file" in failed["message"] and str(cwd) not in failed["message"]
        assert k.state()["recording"]["state"] == "on"
        assert k.value("_hist.calls") == "['enable', 'snapshot']"  # never disabled
    finally:
        k.run(f"os.chdir({str(cwd)!r})")
    done = k.request(comm, action("record_memory", {"op": "stop"}))
    assert done["method"] == "ack" and done["result"]["state"] == "off"
    assert (cwd / done["result"]["file"]).is_file()
    assert k.value("_hist.calls") == "['enable', 'snapshot', 'snapshot', 'disable']"
    assert k.state()["recording"]["last"]["file"] == done["result"]["file"]


# --- save_checkpoint names ---------------------------------------------------------------------


def test_r14_checkpoint_name_must_match_whole(k: WireKernel, comm: str) -> None:
    for name in ("a.pt\n", "a.pt\nb", "a.pth\n"):
        reply = k.request(comm, action("save_checkpoint", {"filename": name}))
        assert reply["code"] == "invalid_args", name
    assert validate_filename("run 1.pth") == "run 1.pth"


def test_r45_default_checkpoint_names_never_collide_and_chosen_ones_never_overwrite(
    k: WireKernel, comm: str, cwd: Path
) -> None:
    k.run(
        "import torch.nn as nn\nmodel = nn.Linear(2, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)"
    )
    # Every default name of the next few seconds is taken already: the save still succeeds.
    now = time.time()
    taken = {
        time.strftime("checkpoint_%Y%m%d-%H%M%S.pt", time.localtime(now + d)) for d in range(8)
    }
    for name in taken:
        (cwd / name).write_bytes(b"someone else's")
    try:
        saved = [k.request(comm, action("save_checkpoint"))["result"] for _ in range(2)]
        files = [r["file"] for r in saved]
        assert len(set(files)) == 2 and not set(files) & taken, files
        assert all(
            f.endswith(".pt") and r["overwritten"] is False
            for f, r in zip(files, saved, strict=True)
        )
        for name in taken:
            assert (cwd / name).read_bytes() == b"someone else's"
        # a name the user chose: still refused unless overwrite is true
        again = k.request(comm, action("save_checkpoint", {"filename": files[0]}))
        assert again["code"] == "refused" and "already exists" in again["message"]
    finally:
        k.run("del model, opt")


# --- S3 / S4 / S5 ------------------------------------------------------------------------------

#: String arguments that are not an enum: each is pattern-checked or a list of series names.
FREE_STRINGS = {("save_checkpoint", "filename"), ("clear_history", "names")}
FREE_STRINGS |= {("replay_step", "track")}
# a control target's key, "name#n" (issue #14)
FREE_STRINGS |= {("set_lr", "optimizer"), ("scale_lr", "optimizer"), ("reset_lr", "optimizer")}
# a recorded kernel's id, 16 hex digits (issue #24)
FREE_STRINGS |= {
    ("open_record", "kernel"),
    ("dismiss_record", "kernel"),
    ("export_tensorboard", "kernel"),
}


def _action_args() -> dict[str, dict[str, Any]]:
    defs = load_schema()["$defs"]
    out = {}
    for definition in defs.values():
        props = definition.get("properties", {}) if isinstance(definition, dict) else {}
        name = props.get("action", {}).get("const")
        if isinstance(name, str):
            args = props["args"]
            if "$ref" in args:
                args = defs[args["$ref"].rsplit("/", 1)[-1]]
            out[name] = args
    return out


def _leaves(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for branch in schema.get("oneOf", [schema]):
        for key, prop in branch.get("properties", {}).items():
            for option in prop.get("oneOf", [prop]):
                yield key, option


def test_s3_actions_take_no_free_form_code_and_every_number_is_bounded() -> None:
    actions = _action_args()
    assert actions, "no actions in the schema"
    for name, args in actions.items():
        assert args.get("type") == "object" or "oneOf" in args, name
        for branch in args.get("oneOf", [args]):
            assert branch.get("additionalProperties") is False, name
        for key, option in _leaves(args):
            t = option.get("type")
            if t == "string" and "enum" not in option and "const" not in option:
                assert (name, key) in FREE_STRINGS, f"{name}.{key} is a free-form string"
                assert "pattern" in option, f"{name}.{key} has no pattern"
            elif t == "array":
                assert (name, key) in FREE_STRINGS and option["items"]["type"] == "string"
                assert "maxItems" in option, f"{name}.{key} is unbounded"
            elif t in ("number", "integer"):
                assert "maximum" in option, f"{name}.{key} has no maximum"
                assert "minimum" in option or "exclusiveMinimum" in option, f"{name}.{key}"
            else:
                fixed = "enum" in option or "const" in option
                assert fixed or t in ("boolean", "null"), (name, key, option)


def test_s3_every_numeric_argument_rejects_non_numbers_and_out_of_range() -> None:
    hostile: list[Any] = [math.nan, math.inf, -math.inf, HUGE, -HUGE, "1", True, [1], {"v": 1}]
    with session({}) as s:
        registered = set(s.ext.actions.names())
        assert registered == set(_action_args())  # the allowlist is the schema's list
        for name, args in _action_args().items():
            for key, option in _leaves(args):
                if option.get("type") not in ("number", "integer"):
                    continue
                for value in hostile:
                    reply = s.ext.actions.handle(action(name, {key: value}), origin="t")
                    assert reply["method"] == "error", (name, key, value, reply)
                    assert reply["code"] == "invalid_args", (name, key, value, reply)
        assert not [e for e in s.ext.errors if e.startswith("action:")]


_FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "execfile", "input"}
_UNPICKLERS = {"pickle", "cPickle", "marshal", "dill", "cloudpickle", "shelve", "jsonpickle"}


def test_s4_kernel_side_never_evaluates_executes_or_unpickles() -> None:
    """An AST scan of the kernel package: no eval/exec/compile/__import__, no pickle or
    marshal loads (writing a pickle with ``pickle.dump`` is fine), no ``torch.load``, no
    ``importlib.import_module`` of a computed name."""
    found = []
    for path in sorted((PACKAGE / "kernel").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(f, ast.Name) and f.id in _FORBIDDEN_CALLS:
                found.append(f"{where} {f.id}()")
            if isinstance(f, ast.Attribute):
                owner = f.value.id if isinstance(f.value, ast.Name) else ""
                if owner in _UNPICKLERS and f.attr in ("load", "loads", "Unpickler", "open"):
                    found.append(f"{where} {owner}.{f.attr}()")
                if owner == "torch" and f.attr == "load":
                    found.append(f"{where} torch.load()")
                if f.attr == "import_module" and not (
                    node.args and isinstance(node.args[0], ast.Constant)
                ):
                    found.append(f"{where} import_module(<computed>)")
                if owner == "builtins" and f.attr in _FORBIDDEN_CALLS:
                    found.append(f"{where} builtins.{f.attr}()")
    assert found == []


def test_s5_the_package_registers_no_server_extension() -> None:
    for attr in (
        "_jupyter_server_extension_points",
        "_jupyter_server_extension_paths",
        "load_jupyter_server_extension",
        "_load_jupyter_server_extension",
    ):
        assert not hasattr(jupyterlab_torchdbg, attr), attr
    # shared-data installs only the lab extension: no jupyter_server_config.d json
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for needle in ("jupyter_server_config", "jupyter_notebook_config", "jupyter-config"):
        assert needle not in pyproject, needle
    assert not (ROOT / "jupyter-config").exists()
    # nothing in the package imports the server or tornado (no handlers, no routes)
    for path in PACKAGE.rglob("*.py"):
        if "labextension" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                assert not n.startswith(("jupyter_server", "tornado", "notebook")), (path, n)
    assert json.loads((ROOT / "install.json").read_text())["packageName"] == "jupyterlab_torchdbg"
