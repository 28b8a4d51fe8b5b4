"""What a replay found, in words: the user's frames of a forward stack and the message.

Stacks come from anomaly mode (a node's ``traceback_``, or the text of its warning) and
from the forward watch (``traceback.format_stack``). Both run inside the extension (the
replay is called from the action or the step boundary), so everything up to this
package's last frame is what ran the replay (the kernel, the training loop): dropped.
Of the rest, torch's and the standard library's frames are dropped; the user's frames
(notebook cells, their modules, model libraries such as transformers) stay, innermost
last, at most ``MAX_FRAMES``.
"""

from __future__ import annotations

import math
import os
import re
import sysconfig
from typing import TYPE_CHECKING

from .backward_root import source_of, values_state

if TYPE_CHECKING:
    from .bad_step import KeptRoot

#: Frames kept of a forward stack (the innermost).
MAX_FRAMES = 12
#: Characters kept of a frame's code line.
MAX_CODE = 160

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n(?:[ \t]+([^\n]*))?')
_OWN = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])

#: ``{file, line, name, code}`` (the protocol's ``ReplayResult.forward_stack`` items).
Frame = dict[str, object]


def user_frames(lines: list[str]) -> list[Frame]:
    """The user's frames of a formatted stack, innermost last, at most ``MAX_FRAMES``."""
    import torch

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    frames = [
        (os.path.abspath(f) if not f.startswith("<") else f, int(n), name, (code or "").strip())
        for f, n, name, code in _FRAME.findall("".join(lines))
    ]
    while frames and frames[-1][0].startswith(_OWN + os.sep):
        frames.pop()  # the forward watch itself
    for i in range(len(frames) - 1, -1, -1):
        if frames[i][0].startswith(_OWN + os.sep):
            frames = frames[i + 1 :]  # what ran the replay (the kernel, the loop) goes
            break
    kept = [
        {"file": f, "line": n, "name": name, "code": code[:MAX_CODE]}
        for f, n, name, code in frames
        if not f.startswith(torch_dir + os.sep)
        and not (f.startswith(_STDLIB + os.sep) and "site-packages" not in f)
    ]
    return kept[-MAX_FRAMES:]


def report(res: dict[str, object], root: KeptRoot | None = None) -> dict[str, object]:
    """Add the result's message (the panel shows it; the alert carries it). ``root``:
    what ``backward()`` was called on at the bad step (None: not seen)."""
    step, cause, output = res["step"], res["cause"], res.get("output")
    stack = res.get("forward_stack") or []
    top = stack[-1] if isinstance(stack, list) and stack else None
    at = ""
    if isinstance(top, dict):
        at = f" at {short_path(top['file'])}:{top['line']} ({top['code']})"
    done = f"Step {step} replayed on the {res['weights']} weights"
    user_loss = res.get("user_loss")
    if cause == "input":
        msg = f"The kept batch of step {step} already holds NaN/Inf in {output}: the data."
    elif cause == "weights":
        msg = (
            f"{done}: they already hold NaN/Inf in {output}, before this step's update (an "
            "earlier update, or code that set them)."
        )
    elif cause == "forward":
        op = res.get("forward_op")
        made = f"; first made by {op}{at}" if op else at
        msg = f"{done}: the forward pass already yields NaN/Inf in {output}{made}."
    elif cause == "backward" and res.get("backward_op"):
        msg = f"{done} under anomaly detection: {res['backward_op']} returned NaN/Inf"
        msg += f" in backward; its forward call{at}." if at else " in backward."
    elif cause == "backward":
        msg = f"{done}: the {output} is NaN/Inf (no single backward op named)."
    elif cause == "overflow":
        msg = (
            f"{done}: every gradient value is finite, but the {output} is so large that its "
            "norm overflows float32: the gradients exploded (no NaN source to find)."
        )
    elif res.get("no_graph"):
        msg = f"{done}: the outputs are finite and no gradient flows to the weights."
    elif user_loss == "same":
        msg = f"{done} with your loss: every output and gradient is finite, so the "
        msg += f"non-finite gradient does not reproduce. {_not_repeated(res)}"
    else:
        msg = f"{done}: every output and gradient of this replay is finite."
    msg += _loss_note(res, root)
    if res["weights"] == "current":
        msg += (
            " No pre-step copy of the weights was kept (over 512 MiB, or not copyable): "
            "this replay used the current weights."
        )
    bad = res.get("bad_buffers")
    if isinstance(bad, list) and bad:
        msg += f" Buffers holding NaN/Inf: {', '.join(map(str, bad[:3]))}."
    res.pop("bad_buffers", None)
    res.pop("dropout", None)
    msg += str(res.pop("rerun", "") or "")
    res["message"] = msg
    return res


def _not_repeated(res: dict[str, object]) -> str:
    """What the replay repeated and what it did not (only what applies to this model)."""
    others = []
    if res.get("dropout"):
        others.append("the step's dropout masks (the replay draws new ones)")
    if res["weights"] == "current":
        others.append("the weights, which changed since")
    others.append("module attributes that are not tensors (read as they are now)")
    others.append("autocast or nondeterministic kernels, if the step ran with them")
    return (
        "The replay repeats the batch, the pre-step weights and buffers, and the loss; it "
        f"does not repeat {', '.join(others)}."
    )


def _loss_note(res: dict[str, object], root: KeptRoot | None) -> str:
    """What backward started from, said plainly when it was not the user's loss; and,
    when nothing reproduced, the loss value read at the step."""
    if res["cause"] not in ("finite", "backward", "overflow"):
        return ""  # the batch or the forward pass: found before any loss
    user_loss, loss_root = res.get("user_loss"), res.get("loss_root")
    finite = bool(res.get("finite"))
    tail = ""
    if finite and root is not None:
        state, value = values_state(root)
        if state == "non_finite" and value is not None:
            tail = (
                f" At step {res['step']} that loss was {_spell(value)} (read at the step), "
                "on outputs this replay finds finite: the NaN/Inf starts in the loss."
            )
    if finite and user_loss != "same":
        tail = " Whether the non-finite gradient reproduces with your loss was not checked." + tail
    if user_loss == "not_rerun":
        what = source_of(root) if root is not None else "your loss"
        how = (
            "backward ran from the sum of the model's outputs instead"
            if loss_root == "surrogate"
            else "no backward ran"
        )
        return f" The replay cannot re-run your loss ({what}): {how}.{tail}"
    if user_loss == "part":
        src = root.source if root is not None else None
        return (
            f" Backward ran from {_term(loss_root, src)}, one term of your loss (the rest "
            f"of its expression was not re-run).{tail}"
        )
    if user_loss == "unseen":
        return (
            f" What backward() was called on at step {res['step']} was not seen, so "
            f"backward ran from {_term(loss_root, None)}, not known to be your loss.{tail}"
        )
    return tail


def _term(loss_root: object, src: str | None) -> str:
    if loss_root == "model":
        return f"{src}'s own loss" if src else "the model's own loss"
    if isinstance(loss_root, str) and loss_root.startswith("loss_module:"):
        return f"{loss_root.split(':', 1)[1]}(...)"
    return "the sum of the model's outputs"


def _spell(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")


def short_path(path: object) -> str:
    """A frame's file name as the message shows it (a cell's ``<ipython-input-…>`` whole)."""
    return os.path.basename(str(path)) if not str(path).startswith("<") else str(path)
