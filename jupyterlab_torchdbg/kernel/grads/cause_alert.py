"""The ``non_finite_cause`` alert: the words of a diagnosis, and the remedy that fits.

The remedy fits the cause: a bad batch is a data pipeline problem, never "lower the
learning rate"; nor is any step before which this optimizer applied no update (``fresh``:
the first step the tool saw of it, or every one before it skipped), whose gradients its
learning rate did not make. A skipped step's alert says what the skip left as it was
(skip_facts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .alerts import Alert

if TYPE_CHECKING:
    from .finding import Finding

KIND = "non_finite_cause"

REMEDY = {
    "input": "The batch itself holds NaN/Inf, so the data pipeline is the source, not the "
    "model or its training settings: check how this tensor is built (missing values, a "
    "division by a zero std in normalisation, a corrupt sample), e.g. assert "
    "torch.isfinite(batch).all() in the DataLoader's dataset, or drop such samples.",
    "forward": "Look at that module's forward for log/sqrt/division of values that can "
    "reach 0 or below, an exp or pow that overflows, or an fp16 overflow: clamp the input "
    "or add an epsilon there (torch.log(x.clamp_min(1e-12))).",
    "overflow": "The gradients exploded (no NaN source): clip gradients "
    "(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)) or lower the learning rate.",
    "weights": "The weights were already NaN/Inf before this step (an earlier update, or "
    "code that set them): restore a checkpoint, then clip gradients or lower the learning "
    "rate.",
    "loss": "The model's outputs are finite but the loss is not: look for log(0) or a "
    "division by zero in the loss (use log_softmax / F.cross_entropy on logits instead of "
    "log(softmax), clamp probabilities), and check the targets of this batch.",
    "backward": "Forward and loss are finite, so the backward pass made the NaN/Inf. If "
    "the gradient norm was climbing before (an explosion alarm), the gradients overflowed: "
    "clip gradients (torch.nn.utils.clip_grad_norm_) or lower the learning rate. Otherwise "
    "look for the gradient of sqrt or norm at 0, pow with a negative exponent, a custom "
    "autograd Function or an fp16 overflow: click Replay to run this step under anomaly "
    "detection and see the op and the forward line.",
    "unchecked": "Look at the loss for log(0) or a division by zero (log_softmax / "
    "F.cross_entropy on logits instead of log(softmax), clamp probabilities), then click "
    "Replay to run this step under anomaly detection; assert torch.isfinite(loss) before "
    "backward() to stop at the first such step.",
}

#: Remedies at a step before which this optimizer applied no update (the first step the
#: tool saw, or every one before it skipped): the learning rate did not make these
#: gradients, so none of them says to lower it.
REMEDY_FRESH = {
    "overflow": "Clip gradients (torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)), "
    "and check the loss's scale (a sum instead of a mean, unnormalised inputs or targets) "
    "and the initialisation.",
    "weights": "Check the initialisation and any checkpoint loaded (torch.isfinite(p).all() "
    "for each parameter after loading); re-initialise, or load another checkpoint.",
    "backward": "Forward and loss are finite, so the backward pass made the NaN/Inf: look "
    "for the gradient of sqrt or norm at 0, pow with a negative exponent, a custom autograd "
    "Function or an fp16 overflow; click Replay to run this step under anomaly detection "
    "and see the op and the forward line.",
}

#: Added when skipping is off (never advised to a user who already skips).
SKIP_HINT = {
    "input": " skip_nonfinite keeps the weights finite meanwhile.",
    "weights": " skip_nonfinite (every step checked) stops the next such update.",
}

#: With gradients clipped by norm already (the clip action, or the loop's own
#: ``clip_grad_norm_``): never advise clipping; clipping by norm cannot scale gradients
#: whose norm overflows, nor make NaN finite.
REMEDY_CLIPPING = {
    "overflow": "Clipping by norm is on, but this norm overflows float32, so it "
    "cannot scale these gradients: lower the learning rate, clip by value "
    "(torch.nn.utils.clip_grad_value_), or check the loss's scale.",
    "weights": "The weights were already NaN/Inf before this step (an earlier update, or "
    "code that set them), although the gradients are clipped by norm: restore a "
    "checkpoint, then lower the learning rate or check the loss's scale.",
    "backward": "Forward and loss are finite, so the backward pass made the NaN/Inf "
    "(clipping by norm, which is on, cannot make NaN finite): look for the gradient of "
    "sqrt or norm at 0, pow with a negative exponent, a custom autograd Function or an "
    "fp16 overflow; click Replay to run this step under anomaly detection and see the op "
    "and the forward line.",
}

#: Remedy when the model's forward never ran through its hooks.
REMEDY_BYPASSED = (
    "Call the model as model(x), not model.forward(x): hooks (this tool's, and forward "
    "hooks of other libraries) run only then; its batch is then kept and the next "
    "non-finite step diagnosed in full."
)

#: Remedy when the step's batch was not kept (the model was first seen at that step).
REMEDY_UNKEPT = (
    "The next non-finite step is diagnosed in full (its batch is kept from now on). To have "
    "the first step's batch kept too, create the model in an earlier cell or call "
    "watch(model, optimizer) before the loop."
)


@dataclass
class CauseAlert(Alert):
    """An alert that names the cause: input, forward, weights, loss or backward."""

    cause: str | None = None


def alert(
    finding: Finding,
    track: str,
    step: int,
    skipped: bool,
    value: float | None,
    manual: bool = False,
    fresh: str | None = None,
    skipped_facts: str | None = None,
    clipping: bool = False,
) -> Alert:
    """The one alert of the bad step, naming the cause (``manual``: a loop without an
    optimizer, seen at the end of backward: nothing of ours can skip its update;
    ``fresh``: this optimizer applied no update before this step, "none" (its state
    says so) or "none_seen" (none since the tool watches it); ``skipped_facts``:
    what the skipped step left as it was, nonfinite.SkipFacts; ``clipping``: the
    gradients are clipped by norm already, by the clip action or by the loop's own
    ``clip_grad_norm_``). A remedy never advises what the user already does."""
    kept = (
        f" {skipped_facts}"
        if skipped and skipped_facts
        else " The optimizer step was skipped."
        if skipped
        else " Found at the end of backward, before the loop's own update of the weights."
        if manual
        else " Found before the optimizer applied it; it is applied now (its values are "
        "finite: skip_nonfinite skips only steps whose gradients hold NaN/Inf)."
        if finding.cause == "overflow"
        else " Found before the optimizer applied it (it is applied now; skip_nonfinite "
        "skips such steps and keeps the weights finite)."
    )
    first = ""
    if fresh == "none" and finding.cause in REMEDY_FRESH:
        first = (
            " No update of this optimizer was applied before this step (its state holds "
            "none), so its learning rate did not make these gradients."
        )
    elif fresh == "none_seen" and finding.cause in REMEDY_FRESH:
        first = (
            " The tool saw no update of this optimizer applied before this step, so its "
            "learning rate did not make these gradients (unless it stepped before the tool "
            "was loaded)."
        )
    msg = f"Non-finite gradient at step {step}: {finding.message}.{first}{kept}"
    severity = "warning" if finding.cause in ("backward", "unchecked") else "error"
    remedy = REMEDY_CLIPPING.get(finding.cause, "") if clipping else ""
    remedy = remedy or (REMEDY_FRESH.get(finding.cause, "") if fresh else "")
    remedy = remedy or REMEDY[finding.cause]
    if not skipped:
        remedy += SKIP_HINT.get(finding.cause, "")
    if finding.cause == "unchecked" and "first seen at this step" in finding.message:
        remedy = REMEDY_UNKEPT
    elif finding.cause == "unchecked" and "batch was not kept" in finding.message:
        remedy = REMEDY_BYPASSED
    return CauseAlert(
        KIND,
        severity,
        step,
        finding.layer,
        msg,
        remedy,
        track,
        value,
        cause=finding.cause,
    )
