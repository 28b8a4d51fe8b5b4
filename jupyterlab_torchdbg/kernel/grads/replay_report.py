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

import os
import re
import sysconfig

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


def report(res: dict[str, object]) -> dict[str, object]:
    """Add the result's message (the panel shows it; the alert carries it)."""
    step, cause, output = res["step"], res["cause"], res.get("output")
    stack = res.get("forward_stack") or []
    top = stack[-1] if isinstance(stack, list) and stack else None
    at = ""
    if isinstance(top, dict):
        at = f" at {short_path(top['file'])}:{top['line']} ({top['code']})"
    done = f"Step {step} replayed on the {res['weights']} weights"
    if cause == "input":
        msg = f"The kept batch of step {step} already holds NaN/Inf in {output}: the data."
    elif cause == "weights":
        msg = f"{done}: they already hold NaN/Inf in {output} (an earlier update made them)."
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
    else:
        msg = (
            f"{done}: every output and gradient is finite. The NaN does not reproduce: "
            "dropout or other randomness, a data race, nondeterministic kernels, autocast, "
            "or the weights changed since."
        )
    if res["weights"] == "current":
        msg += (
            " No pre-step copy of the weights was kept (over 512 MiB, or not copyable): "
            "this replay used the current weights."
        )
    if res.get("loss_root") == "surrogate":
        msg += (
            " The model returns no loss and no loss module of the notebook matched its "
            "output: backward ran from the sum of its outputs."
        )
    res["message"] = msg
    return res


def short_path(path: object) -> str:
    """A frame's file name as the message shows it (a cell's ``<ipython-input-…>`` whole)."""
    return os.path.basename(str(path)) if not str(path).startswith("<") else str(path)
