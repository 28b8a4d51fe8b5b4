"""Live training control: the clip / pause / step / learning-rate actions.

Files: ``controller`` (the mailbox the actions write and the step boundary reads: pause,
single step, LR scaling), ``clip`` (clipping exactly as ``clip_grad_norm_``, reusing the
gradient monitor's read of the step), ``lr`` (learning rates per optimizer, as they
are). ``attach(host)`` registers the actions, the
snapshot part and nothing else: the step boundary (``step_boundary.py``) calls
``Control.at_step``; ``extension.py`` calls ``post_run_cell`` and ``detach``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..action_args import no_args, only_keys, schema_number
from ..action_registry import ActionError
from .controller import Control

if TYPE_CHECKING:
    from ..host import Host

__all__ = ["Control", "attach"]

#: A target key as the schema's pattern says (``LrTargets.seen`` makes them so).
_KEY = re.compile(r"[^\n]{1,100}#[0-9]{1,12}")


def _clip_args(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"max_norm"})
    return {"max_norm": schema_number(args, "clip", "max_norm")}


def _optimizer_arg(args: dict[str, object], out: dict[str, object]) -> dict[str, object]:
    if "optimizer" in args:
        key = args["optimizer"]
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ActionError("optimizer: a target key from control.targets (name#n)")
        out["optimizer"] = key
    return out


def _lr_args(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"factor", "optimizer"})
    return _optimizer_arg(args, {"factor": schema_number(args, "scale_lr", "factor")})


def _set_lr_args(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"lr", "optimizer", "group"})
    out: dict[str, object] = {"lr": schema_number(args, "set_lr", "lr")}
    if "group" in args:
        out["group"] = schema_number(args, "set_lr", "group")
    return _optimizer_arg(args, out)


def _reset_lr_args(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"optimizer"})
    return _optimizer_arg(args, {})


def attach(host: Host) -> tuple[Control, Callable[[], None]]:
    """Create the controller and register its actions; returns it and its cleanup."""
    control = Control(host)
    removers = [
        host.actions.register(name, validate, handler)
        for name, validate, handler in (
            ("clip", _clip_args, control.act_clip),
            ("unclip", no_args, control.act_unclip),
            ("pause", no_args, control.act_pause),
            ("resume", no_args, control.act_resume),
            ("step", no_args, control.act_step),
            ("set_lr", _set_lr_args, control.act_set_lr),
            ("scale_lr", _lr_args, control.act_scale_lr),
            ("reset_lr", _reset_lr_args, control.act_reset_lr),
        )
    ]
    removers.append(host.hub.add_snapshot_part(lambda: [control.state()]))
    removers.append(host.runs.on_change(control.on_run))

    def cleanup() -> None:
        for remove in reversed(removers):
            remove()
        control.release()

    return control, cleanup
