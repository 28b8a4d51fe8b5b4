"""The action envelope: allowlist, validation, exactly one reply per request (R13, R14)."""

from __future__ import annotations

import math

import pytest
from kernel_client import KernelDriver

from jupyterlab_torchdbg.kernel.action_args import finite_number, no_args
from jupyterlab_torchdbg.kernel.action_registry import ActionError, ActionRegistry


def make_registry() -> tuple[ActionRegistry, list[float]]:
    applied: list[float] = []

    def validate(args: dict) -> dict:
        return {"max_norm": finite_number(args, "max_norm", minimum=0, exclusive_minimum=True)}

    def handler(args: dict) -> dict:
        applied.append(args["max_norm"])
        return {"max_norm": args["max_norm"]}

    errors: list[str] = []
    reg = ActionRegistry(errors.append)
    reg.register("clip", validate, handler)
    reg.register("noop", no_args, lambda a: {})
    return reg, applied


@pytest.mark.parametrize(
    "value, fragment",
    [
        (math.nan, "finite"),
        (math.inf, "finite"),
        (-math.inf, "finite"),
        (float("1e309"), "finite"),
        (-1, "> 0"),
        (0, "> 0"),
        ("1.0", "must be a number"),
        (True, "must be a number"),
        (None, "must be a number"),
        ([1.0], "must be a number"),
    ],
)
def test_r14_numbers_validated(value: object, fragment: str) -> None:
    reg, applied = make_registry()
    reply = reg.handle(
        {"method": "action", "request_id": "r", "action": "clip", "args": {"max_norm": value}}
    )
    assert reply["method"] == "error" and reply["code"] == "invalid_args"
    assert fragment in reply["message"]
    assert applied == []


def test_r13_duplicate_request_id_applied_once() -> None:
    reg, applied = make_registry()
    msg = {"method": "action", "request_id": "same", "action": "clip", "args": {"max_norm": 1.0}}
    first = reg.handle(msg)
    second = reg.handle(msg)
    assert first["method"] == "ack" and "duplicate" not in first
    assert second == {**first, "duplicate": True}
    assert applied == [1.0]


def test_handler_failure_is_one_failed_reply_and_counted() -> None:
    errors: list[str] = []
    reg = ActionRegistry(errors.append)

    def boom(args: dict) -> dict:
        raise RuntimeError("inside")

    def refuse(args: dict) -> dict:
        raise ActionError("gradients are non-finite", code="refused")

    reg.register("boom", no_args, boom)
    reg.register("refuse", no_args, refuse)
    r = reg.handle({"method": "action", "request_id": "1", "action": "boom", "args": {}})
    assert r["code"] == "failed" and errors == ["action:boom"]
    r = reg.handle({"method": "action", "request_id": "2", "action": "refuse", "args": {}})
    assert r["code"] == "refused" and "non-finite" in r["message"]


MALFORMED = [
    ({"method": "action", "request_id": "a1", "action": "rm -rf", "args": {}}, "unknown_action"),
    (
        {"method": "action", "request_id": "a2", "action": "__import__", "args": {}},
        "unknown_action",
    ),
    ({"method": "action", "request_id": "a3", "action": 5, "args": {}}, "malformed"),
    (
        {"method": "action", "request_id": "a4", "action": "snapshot", "args": {"x": 1}},
        "invalid_args",
    ),
    ({"method": "action", "request_id": "a5", "action": "snapshot", "args": "x"}, "invalid_args"),
    ({"method": "action", "action": "snapshot", "args": {}}, "malformed"),
    ({"method": "action", "request_id": "", "action": "snapshot", "args": {}}, "malformed"),
    ({"method": "eval", "code": "1+1"}, "malformed"),
    (
        {
            "method": "action",
            "request_id": "a6",
            "action": "clear_history",
            "args": {"names": "loss"},
        },
        "invalid_args",
    ),
]


async def test_r14_malformed_actions_over_the_comm(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    for raw, code in MALFORMED:
        reply = await loaded.action(comm_id, "", raw=raw)
        assert reply["method"] == "error", raw
        assert reply["code"] == code, (raw, reply)
    # deep JSON is rejected without recursion trouble
    deep: dict = {}
    node = deep
    for _ in range(500):
        node["a"] = {}
        node = node["a"]
    reply = await loaded.action(
        comm_id,
        "",
        raw={"method": "action", "request_id": "deep", "action": "snapshot", "args": deep},
    )
    assert reply["code"] in ("malformed", "invalid_args")
    # the kernel is fine and no code ran
    assert await loaded.value("1 + 1") == "2"


async def test_r13_every_action_gets_exactly_one_reply(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    await loaded.run("from jupyterlab_torchdbg import log\nlog(loss=1.0)")
    r1 = await loaded.action(comm_id, "clear_history", {"names": ["loss"]}, request_id="once")
    assert r1["method"] == "ack" and r1["result"] == {"cleared": 1}
    r2 = await loaded.action(comm_id, "clear_history", {"names": ["loss"]}, request_id="once")
    assert r2["duplicate"] is True and r2["result"] == {"cleared": 1}
    await loaded.drain(0.3)
    replies = [m for m in loaded.comm if m.data.get("request_id") == "once"]
    assert len(replies) == 2  # one per request message, the second marked duplicate
    # snapshot action: a fresh snapshot precedes the ack
    before = len(loaded.messages("snapshot", comm_id))
    ack = await loaded.action(comm_id, "snapshot")
    assert ack["method"] == "ack"
    assert len(loaded.messages("snapshot", comm_id)) == before + 1
