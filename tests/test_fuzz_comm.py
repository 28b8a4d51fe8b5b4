"""R43, R13, R14: a property-based fuzz test of the action comm against a real kernel.

Hypothesis generates batches of panel messages, valid and hostile mixed: real action
names with valid, mutated or arbitrary arguments, unknown names, wrong types, integers
beyond a float's range, ``NaN``/``Infinity`` literals, nesting up to 200 deep, lone
surrogates in request ids, argument names and values, non-string ids, request ids
reused within a comm and across two comms. Each batch goes out on two comms without
waiting (then a sentinel request per comm), and the replies are collected. Checked:

- exactly one ``ack``/``error`` per request message, on the comm that sent it, in
  order, with the request id echoed verbatim, or ``null`` when it is missing, not a
  string, too long or not well-formed Unicode (``malformed``);
- a request id seen before on the same comm (and still in the bounded reply cache) is
  answered with the first reply marked ``duplicate``; the same id on the other comm is
  a new request (de-duplication per comm);
- every kernel message is schema-valid (``comm_wire``/``kernel_client`` check each one);
- a batch answered only with errors (and duplicates) changed no state
  (``control``, ``grads`` settings, memory recording, series names, error counters);
- no handler crashed (no ``action:*``, ``send`` or ``dispatch`` error counted), and the
  kernel's RSS grew by less than 64 MiB over the run.

Size: 10,000 messages in CI (a fixed seed: ``derandomize=True``), about 40 s on 2
cores. For a longer run set ``TORCHDBG_FUZZ_EXAMPLES`` to the number of messages, e.g.
``TORCHDBG_FUZZ_EXAMPLES=200000 pytest tests/test_fuzz_comm.py`` (or
``scripts/fuzz_comm.sh 200000``); ``TORCHDBG_FUZZ_SEED=<int>`` then draws other
messages than CI's fixed ones.
"""

from __future__ import annotations

import math
import os
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pytest
from comm_wire import WireKernel, on_the_wire, start_wire_kernel
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from jupyterlab_torchdbg.kernel.action_args import bounds
from jupyterlab_torchdbg.kernel.action_registry import REPLY_CACHE
from jupyterlab_torchdbg.kernel.grads.action_args import THRESHOLD_NAMES

N_MESSAGES = int(os.environ.get("TORCHDBG_FUZZ_EXAMPLES", "10000"))
FUZZ_SEED = os.environ.get("TORCHDBG_FUZZ_SEED")
BATCH = 50
RSS_GROWTH_LIMIT = 64 * 2**20

NO_ARGS = ["unclip", "pause", "resume", "step", "reset_lr", "clear_alerts", "snapshot"]
NO_ARGS += ["empty_cache", "release_refs"]
ACTIONS = [*NO_ARGS, "clip", "scale_lr", "set_stride", "set_thresholds", "clear_history"]
ACTIONS += ["record_memory", "save_checkpoint"]
#: Valid requests are drawn from these (weighted): a valid ``release_refs`` runs a full
#: ``gc.collect()`` (~0.5 s) and ``snapshot`` resends everything, so they stay rare (the
#: first only with broken arguments).
VALID_ACTIONS = [a for a in ACTIONS if a not in ("release_refs", "snapshot")] * 8 + ["snapshot"]
#: Request ids that recur: duplicates on one comm, reuse across the two comms.
POOL = [f"dup-{i}" for i in range(6)]

# --- strategies ------------------------------------------------------------------------------

surrogate = st.characters(
    min_codepoint=0xD800, max_codepoint=0xDFFF, codec=None, exclude_categories=()
)
any_char = st.characters(codec=None, exclude_categories=())
texts = st.one_of(
    st.text(max_size=6),
    st.text(any_char, max_size=6),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=3), surrogate, st.text(max_size=3)),
)
huge = st.sampled_from([10**400, -(10**400), 2**1024, 10**309, 2**63, -(2**63), 10**4000])
special = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324, 1e-320])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    huge,
    special,
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)


def _nest(depth: int, leaf: Any) -> Any:
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"a": leaf}
    return leaf


deep = st.builds(_nest, st.integers(14, 200), scalars)
values = st.one_of(
    scalars,
    st.recursive(
        scalars,
        lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(texts, c, max_size=3)),
        max_leaves=6,
    ),
    deep,
)
#: Values no numeric argument accepts.
not_numbers = st.sampled_from(
    [math.nan, math.inf, -math.inf, 10**400, -(10**400), "1", True, [1], {"v": 1}]
)


def _number(action: str, key: str) -> st.SearchStrategy[Any]:
    b = bounds(action, key)
    lo = b.minimum if b.minimum is not None else -1e12
    hi = b.maximum if b.maximum is not None else 1e12
    if b.integer:
        return st.integers(math.ceil(lo), int(hi))
    return st.floats(lo, hi, exclude_min=b.exclusive_minimum)


# Every strategy is built once, here: strategies made inside a draw are re-validated on
# each use, which made generation slower than the kernel.
_THRESHOLDS = {k: _number("set_thresholds", k) for k in sorted(THRESHOLD_NAMES)}
VALID_ARGS: dict[str, st.SearchStrategy[Any]] = {
    **{a: st.just({}) for a in NO_ARGS},
    "clip": st.fixed_dictionaries({"max_norm": _number("clip", "max_norm")}),
    "scale_lr": st.fixed_dictionaries({"factor": _number("scale_lr", "factor")}),
    "set_stride": st.fixed_dictionaries(
        {"stride": st.one_of(st.sampled_from(["auto", "off"]), _number("set_stride", "stride"))}
    ),
    "set_thresholds": st.fixed_dictionaries({}, optional=_THRESHOLDS).filter(bool),
    "clear_history": st.fixed_dictionaries(
        {"names": st.lists(st.one_of(st.sampled_from(["loss", "acc"]), texts), max_size=3)}
    ),
    "record_memory": st.sampled_from([{"op": "start"}, {"op": "stop"}]),
    # nothing to save in the kernel's namespace: refused, no file written
    "save_checkpoint": st.sampled_from([{}, {"filename": "fz.pt"}]),
}
#: Per action, a value its (first) argument never accepts.
BAD_VALUE: dict[str, st.SearchStrategy[Any]] = {
    "set_stride": st.one_of(not_numbers, texts.filter(lambda t: t not in ("auto", "off"))),
    "clear_history": st.one_of(scalars, st.lists(st.integers(), min_size=1, max_size=2)),
    "record_memory": texts.filter(lambda t: t not in ("start", "stop")),
    "save_checkpoint": st.sampled_from(["../x.pt", "a.pt\n", "x.pkl", "a\udc00.pt", 5]),
}
NOT_OBJECT = st.one_of(scalars, st.lists(scalars, max_size=2))
HOW_BROKEN = st.sampled_from(["extra_key", "bad_number", "not_object", "bad_value"])


def _numeric_keys(args: dict[str, Any]) -> list[str]:
    return [k for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]


@st.composite
def broken_args(draw: Any, action: str) -> Any:
    """Arguments ``action`` must reject."""
    base = draw(VALID_ARGS[action])
    how = draw(HOW_BROKEN)
    numeric = _numeric_keys(base)
    if how == "bad_number" and numeric:
        return {**base, draw(st.sampled_from(numeric)): draw(not_numbers)}
    if how == "not_object":
        return draw(NOT_OBJECT)
    if how == "bad_value" and base:
        key = sorted(base)[0]
        return {**base, key: draw(BAD_VALUE.get(action, not_numbers))}
    return {**base, "zz" + draw(texts): draw(values)}


BROKEN_ARGS = {a: broken_args(a) for a in ACTIONS}
request_ids = st.one_of(
    st.sampled_from(POOL),
    st.uuids().map(str),
    texts,
    st.text(min_size=129, max_size=140),
    st.none(),
    st.integers(),
    st.lists(st.text(max_size=2), max_size=2),
)
BAD_IDS = st.one_of(st.just(""), st.none(), st.integers(), surrogate, st.text(min_size=129))
JUNK = st.one_of(
    scalars,
    st.lists(values, max_size=2),
    st.fixed_dictionaries({"method": st.one_of(texts, scalars), "request_id": request_ids}),
)
UNKNOWN_NAMES = st.one_of(texts.map(lambda t: "no_such:" + t), scalars)
KINDS = {
    False: st.sampled_from(["valid"] * 6 + ["broken", "unknown", "junk"]),
    True: st.sampled_from(["broken", "unknown", "junk", "bad_id"]),
}
VALID_NAMES, ALL_NAMES = st.sampled_from(VALID_ACTIONS), st.sampled_from(ACTIONS)
ONE_IN_TEN = st.integers(0, 9)


@st.composite
def message(draw: Any, invalid: bool) -> Any:
    """One panel message; ``invalid``: one that must be answered with an error (or as a
    duplicate of an earlier request)."""
    kind = draw(KINDS[invalid])
    if kind == "junk":  # not an action message at all
        return draw(JUNK)
    rid = draw(BAD_IDS if kind == "bad_id" else request_ids)
    msg: dict[str, Any] = {"method": "action", "request_id": rid}
    if kind == "unknown":
        msg["action"], msg["args"] = draw(UNKNOWN_NAMES), draw(values)
        return msg
    action = draw(VALID_NAMES if kind == "valid" else ALL_NAMES)
    msg["action"] = action
    if kind == "broken":
        msg["args"] = draw(BROKEN_ARGS[action])
    elif kind == "bad_id" or draw(ONE_IN_TEN):
        msg["args"] = draw(VALID_ARGS[action])
    # else: args left out (the registry reads {}), valid for actions without arguments
    return msg


def _batch(invalid: bool) -> st.SearchStrategy[tuple[bool, list[tuple[int, Any]]]]:
    items = st.lists(st.tuples(st.integers(0, 1), message(invalid)), min_size=BATCH, max_size=BATCH)
    return st.tuples(st.just(invalid), items)


batches = st.one_of(_batch(False), _batch(True))

# --- the model of the reply contract -----------------------------------------------------------


def _well_formed(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def echoed_id(wire: Any) -> str | None:
    """The request id a reply to ``wire`` (as the kernel decoded it) must carry."""
    if not isinstance(wire, dict) or wire.get("method") != "action":
        return None
    rid = wire.get("request_id")
    if isinstance(rid, str) and 0 < len(rid) <= 128 and _well_formed(rid):
        return rid
    return None


class ReplyModel:
    """The registry's bounded (comm, request id) -> reply cache, as the panel sees it."""

    def __init__(self) -> None:
        self.cache: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()

    def check(self, comm: str, wire: Any, reply: dict[str, Any]) -> bool:
        """Assert ``reply`` answers ``wire``; True when it applied something (a fresh ack)."""
        rid = echoed_id(wire)
        assert reply["request_id"] == rid, (wire, reply)
        if rid is None:
            assert reply["method"] == "error" and reply["code"] == "malformed", (wire, reply)
            return False
        first = self.cache.get((comm, rid))
        if first is not None:
            assert reply == {**first, "duplicate": True}, (wire, reply, first)
            return False
        assert "duplicate" not in reply, (wire, reply)
        self.cache[(comm, rid)] = reply
        while len(self.cache) > REPLY_CACHE:
            self.cache.popitem(last=False)
        return reply["method"] == "ack"


# --- the test ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WireKernel]:
    yield from start_wire_kernel(tmp_path_factory.mktemp("fuzz"))


def test_r43_fuzzed_requests_get_exactly_one_reply_and_invalid_ones_change_nothing(
    k: WireKernel,
) -> None:
    k.run("from jupyterlab_torchdbg import log\nlog(loss=1.0, acc=0.5)")
    comms = [k.open_comm(), k.open_comm()]
    model = ReplyModel()
    stats = {"messages": 0, "batches": 0, "state_checked": 0, "acks": 0}
    rss: list[int] = []
    t0 = time.monotonic()

    last_state: list[dict[str, Any] | None] = [None]  # the state after the last batch

    def run_batch(batch: tuple[bool, list[tuple[int, Any]]]) -> None:
        invalid, items = batch
        before = (last_state[0] or k.state()) if invalid else None
        last_state[0] = None
        start = len(k.events)
        for ci, msg in items:
            k.send_comm(comms[ci], msg)
        sentinels = [f"sentinel-{stats['batches']}-{ci}" for ci in range(2)]
        for ci, sid in enumerate(sentinels):  # an unknown action: answered, changes nothing
            k.send_comm(comms[ci], {"method": "action", "request_id": sid, "action": "?"})

        def all_in() -> bool:
            return all(
                any(r["request_id"] == sid for r in k.replies(c, start))
                for c, sid in zip(comms, sentinels, strict=True)
            )

        k.wait_for(all_in, timeout=60)
        got = [k.replies(c, start) for c in comms]
        for ci in range(2):  # none lost, none doubled; the sentinel comes last
            assert len(got[ci]) == sum(c == ci for c, _ in items) + 1, (ci, got[ci])
            assert got[ci][-1]["request_id"] == sentinels[ci]
        # The kernel handles the messages in the order sent (one shell): check the
        # replies in that order, so the model's cache evicts as the kernel's does.
        sent = [
            *items,
            *(
                (ci, {"method": "action", "request_id": sid, "action": "?"})
                for ci, sid in enumerate(sentinels)
            ),
        ]
        at = [0, 0]
        applied = False
        for ci, msg in sent:
            reply = got[ci][at[ci]]
            at[ci] += 1
            applied |= model.check(comms[ci], on_the_wire(msg), reply)
            stats["acks"] += reply["method"] == "ack"
        if invalid and not applied:
            after = k.state()
            assert after == before, "an invalid request changed the state"
            last_state[0] = after
            stats["state_checked"] += 1
        stats["messages"] += len(items)
        stats["batches"] += 1
        # Replies on a comm come in order, so a doubled one would have come before the
        # sentinel's and been counted above: the log can go (long runs stay small).
        k.events.clear()
        k.comm.clear()
        if stats["batches"] == 2:
            rss.append(k.rss_bytes())

    n_batches = max(1, -(-N_MESSAGES // BATCH))
    fuzz = settings(
        max_examples=n_batches,
        derandomize=FUZZ_SEED is None,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )(given(batches)(run_batch))
    if FUZZ_SEED is not None:
        fuzz = seed(int(FUZZ_SEED))(fuzz)
    fuzz()

    k.pump(0.5)  # anything after the last sentinel would be a doubled reply
    assert [k.replies(c) for c in comms] == [[], []]
    state = k.state()
    crashed = {
        e: n for e, n in state["errors"].items() if e.startswith(("action:", "send", "dispatch"))
    }
    assert crashed == {}
    rss.append(k.rss_bytes())
    assert stats["messages"] >= N_MESSAGES, stats
    assert stats["state_checked"] >= stats["batches"] // 5, stats
    assert stats["acks"] > stats["messages"] // 20, stats
    growth = rss[-1] - rss[0]
    assert growth < RSS_GROWTH_LIMIT, f"kernel RSS grew by {growth / 2**20:.0f} MiB"
    print(f"fuzz: {stats} in {time.monotonic() - t0:.1f}s, RSS +{growth / 2**20:.1f} MiB")
