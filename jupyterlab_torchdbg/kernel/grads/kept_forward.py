"""Re-run a model's last kept forward call, for the memory panel's activation meter.

The meter (``memory/activations``) measures the activations of one forward pass; when the
panel asks while nothing trains, it re-runs the last forward call the gradient monitor
kept (R53). It never imports this feature: ``extension.py`` hands it
``rerun_kept_forward`` bound to this monitor's keeper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .rerun import allowed, copied_call, restored, user_code, user_globals

if TYPE_CHECKING:
    from torch.nn import Module

    from .inputs import InputKeeper


def rerun_kept_forward(
    keeper_of: Callable[[], InputKeeper | None],
    ns: object,
    roots: list[tuple[str, Module]],
    ready: bool,
    finished: Callable[[], bool],
) -> str | None:
    """Re-run the last kept forward call of the first of ``roots`` that has one; None
    when it ran (and ``finished()``: the meter saw it), else why not.

    ``keeper_of`` reads the keeper when called (it exists once torch is attached), ``ns``
    is the notebook's namespace, ``ready`` whether the meter's hooks are in place.
    """
    try:
        import torch
    except Exception:
        return "the gradient monitor is not loaded"
    keeper = keeper_of()
    if keeper is None:
        return "no forward call was kept to re-run"
    if not ready:
        return "its hooks could not be put in place now"
    why = "no forward call of it was kept to re-run (train a step first)"
    for _, root in roots:
        call = keeper.call_of(root)
        if call is None:
            continue
        who = user_code([root])
        if who is not None and id(root) not in allowed():
            why = (
                f"re-running its forward would run your code ({who}); "
                "watch(model, rerun_forward=True) allows it"
            )
            continue
        was = keeper.paused
        keeper.paused = True  # the re-run's call is not the user's: not kept
        try:
            spaces = ([ns] if isinstance(ns, dict) else []) + user_globals([root])
            with restored([root], spaces):
                c = copied_call(call)
                with torch.enable_grad():
                    out = root(*c.args, **c.kwargs)
                del out, c
        except Exception as e:  # the report says "failed" (the root's hook ran)
            return f"the re-run forward raised {type(e).__name__}"
        finally:
            keeper.paused = was
        return None if finished() else "the re-run forward was not seen"
    return why
