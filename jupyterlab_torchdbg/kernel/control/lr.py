"""Learning rates per optimizer, as they are (issue #14: controls that do what they say).

Each optimizer (or hand-updated model) that steps in the current run is a ``Target`` with
a key stable for the kernel session (``name#n``). At each of its step boundaries the
training thread reads every param group's real ``lr`` (``read``) and applies the panel's
pending changes (``apply``): ``set`` (an absolute value for one group, or for all groups
keeping their ratios), ``scale`` (a factor) and ``reset`` (back to the values before the
panel's first change in this run, ``initial``). The panel's actions only queue changes
(``Control`` holds the lock); a new run starts with no targets (``new_run``) and a run
that ends drops what is pending (``drop_pending``): an idle optimizer is never changed
behind the user's back. The one exception is Reset, which the user asks for: while idle
``Control`` applies it at once (nothing steps then), so a halved LR can be restored after
the run (issue #22).

The panel's change outlives its run, per optimizer (held weakly): when the same optimizer
steps in a later run with each changed group's lr still at the value the last run left it
at, the new run's target starts with the old ``initial`` and ``changed``, so Reset still
restores the value from before the panel's first change. A group whose lr the user's code
set in between is the user's value: nothing to reset (``_Carry``).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..backward_boundary import ModelSource
from ..lr_value import read_lr


class Stepped(Protocol):
    """What steps: a ``torch.optim.Optimizer`` or a ``ModelSource`` (its param groups)."""

    @property
    def param_groups(self) -> Sequence[MutableMapping[str, object]]: ...


#: ("set", lr, group | None), ("scale", factor, None) or ("reset", 0.0, None).
Change = tuple[str, float, int | None]


@dataclass
class Target:
    key: str
    name: str
    ref: weakref.ref[Stepped]
    by_hand: bool
    lrs: list[float | None] = field(default_factory=list)
    #: Each group's lr before the panel's first change in this run (None: no change).
    initial: list[float | None] | None = None
    changed: set[int] = field(default_factory=set)
    pending: list[Change] = field(default_factory=list)

    def to_json(self, stepping: bool) -> dict[str, object]:
        return {
            "key": self.key,
            "name": self.name,
            "stepping": stepping,
            "by_hand": self.by_hand,
            "groups": [
                {
                    "index": i,
                    "lr": lr,
                    "initial_lr": self.initial[i]
                    if self.initial is not None and i < len(self.initial)
                    else None,
                    "changed": i in self.changed,
                }
                for i, lr in enumerate(self.lrs)
            ],
        }

    @property
    def scale(self) -> float | None:
        """First group's lr over its initial value, or None when the panel changed none."""
        if not self.changed or self.initial is None or not self.lrs:
            return None
        lr, first = self.lrs[0], self.initial[0]
        if lr is None or not first:
            return None
        return lr / first


@dataclass
class _Carry:
    """What a run's target hands to the same optimizer's target in the next run."""

    initial: list[float | None]
    changed: set[int]
    #: Each group's lr as the run left it.
    lrs: list[float | None]


def _write(group: MutableMapping[str, object], value: float) -> None:
    lr = group.get("lr")
    if hasattr(lr, "fill_"):  # tensor LR (capturable optimizers)
        lr.fill_(value)
    else:
        group["lr"] = value


class LrTargets:
    """The current run's targets (see the module docstring). Guarded by Control's lock."""

    def __init__(self) -> None:
        self._keys: weakref.WeakKeyDictionary[Stepped, str] = weakref.WeakKeyDictionary()
        self._serial = itertools.count(1)
        self.targets: dict[str, Target] = {}
        #: The target that stepped most recently (the default of the actions).
        self.last_key: str | None = None
        #: optimizer -> the panel's change it carries into its next run (weakly held).
        self._carry: weakref.WeakKeyDictionary[Stepped, _Carry] = weakref.WeakKeyDictionary()

    def run_ended(self) -> None:
        """The run ended: read each group's lr as it is left (after the last
        ``scheduler.step()``, which comes after the last boundary)."""
        for t in self.targets.values():
            opt = t.ref()
            if opt is not None and not t.by_hand:
                t.lrs = [read_lr(g.get("lr")) for g in opt.param_groups]

    def new_run(self) -> None:
        for t in self.targets.values():
            opt = t.ref()
            if opt is not None and t.changed and t.initial is not None:
                self._carry[opt] = _Carry(list(t.initial), set(t.changed), list(t.lrs))
        self.targets = {}
        self.last_key = None

    def _take_carry(self, t: Target, opt: Stepped) -> None:
        """A target new in this run: the panel's change of the last run, for the groups
        whose lr is still what that run left (see the module docstring)."""
        carry = self._carry.pop(opt, None)
        if carry is None or t.by_hand:
            return
        now = [read_lr(g.get("lr")) for g in opt.param_groups]
        kept = {
            i
            for i in carry.changed
            if i < len(now) and i < len(carry.lrs) and now[i] is not None and now[i] == carry.lrs[i]
        }
        if kept:
            t.initial, t.changed = carry.initial, kept

    def drop_pending(self) -> bool:
        dropped = False
        for t in self.targets.values():
            dropped = dropped or bool(t.pending)
            t.pending.clear()
        return dropped

    def seen(self, opt: Stepped, name: Callable[[], str]) -> Target:
        """The target of ``opt`` in this run (created on its first boundary)."""
        key = self._keys.get(opt)
        if key is None:
            shown = name().replace("\n", " ")[:100] or "optimizer"
            key = self._keys[opt] = f"{shown}#{next(self._serial)}"
        t = self.targets.get(key)
        if t is None:
            shown = key.rsplit("#", 1)[0]
            t = self.targets[key] = Target(
                key, shown, weakref.ref(opt), isinstance(opt, ModelSource)
            )
            self._take_carry(t, opt)
        self.last_key = key
        return t

    def forget(self, opt: Stepped) -> bool:
        """Drop ``opt``'s target of this run (a hand-updated model an optimizer took over
        at its first step: the step boundary's hand-over). True when there was one."""
        key = self._keys.pop(opt, None)
        if key is None or self.targets.pop(key, None) is None:
            return False
        if self.last_key == key:
            self.last_key = None
        return True

    def resolve(self, key: str | None) -> Target | None:
        """The target an action names (``key``), else the default; None when unknown."""
        return self.targets.get(key if key is not None else self.last_key or "")

    def read(self, t: Target, opt: Stepped) -> bool:
        """Read the groups' real lrs; True when they differ from the last reading."""
        if t.by_hand:
            return False
        lrs = [read_lr(g.get("lr")) for g in opt.param_groups]
        if lrs == t.lrs:
            return False
        t.lrs = lrs
        return True

    def apply(self, t: Target, opt: Stepped, changes: list[Change]) -> None:
        """Apply the panel's changes to ``opt`` (training thread, at its boundary)."""
        groups = opt.param_groups
        cur = [read_lr(g.get("lr")) for g in groups]
        for op, value, index in changes:
            if op == "reset":
                if t.initial is not None:
                    for i in sorted(t.changed):
                        first = t.initial[i] if i < len(t.initial) else None
                        if first is not None and i < len(groups):
                            _write(groups[i], first)
                            cur[i] = first
                t.initial, t.changed = None, set()
                continue
            if t.initial is None:
                t.initial = list(cur)
            if op == "scale":
                new = {i: lr * value for i, lr in enumerate(cur) if lr is not None}
            elif index is not None:
                new = {index: value} if index < len(groups) else {}
            elif cur and cur[0]:
                ratio = value / cur[0]
                new = {i: lr * ratio for i, lr in enumerate(cur) if lr is not None}
            else:
                new = dict.fromkeys(range(len(groups)), value)
            for i, v in new.items():
                _write(groups[i], v)
                cur[i] = v
                t.changed.add(i)
        t.lrs = [read_lr(g.get("lr")) for g in groups]
