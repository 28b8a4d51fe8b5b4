"""A dataset's error raised through a DataLoader: the original error, where, which sample.

The capture unwraps it first (capture/loader_error.py): the rules then read the original
exception (``ValueError: bad sample 7``, not torch's "Caught ValueError in DataLoader
worker process 0"), with the worker's frames appended to the stack. ``explain`` puts
what the unwrap found into the diagnosis: a rule's own diagnosis (a shape mismatch in
``collate_fn``) keeps its headline and gains where and which sample as a hint; the
generic view becomes one naming the original error, the function that raised it, the
dataset's ``__getitem__`` and the sample index — or saying why the index is not known.
Only what was read is stated (R47): an index is named only when the fetcher's own
``dataset[idx]`` call was on the traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .context import Diagnosis

if TYPE_CHECKING:
    from ..capture.loader_error import LoaderError

#: Batch indices spelled out in a sentence at most.
SHOWN_BATCH = 8


def spell(value: object) -> str:
    """An index as the worker noted it (an int, a string, a list, ``{"type"}``)."""
    if isinstance(value, dict):
        return f"(a {value.get('type') or 'value'})"
    if isinstance(value, list):
        return "(" + ", ".join(spell(v) for v in value[:SHOWN_BATCH]) + ")"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _batch(origin: dict[str, object]) -> str:
    batch, size = origin.get("batch"), origin.get("batch_size")
    if not isinstance(batch, list) or not batch:
        return ""
    shown = ", ".join(spell(v) for v in batch[:SHOWN_BATCH])
    more = len(batch) > SHOWN_BATCH or (isinstance(size, int) and size > len(batch))
    return f"[{shown}{', …' if more else ''}]"


def _at(frame: dict[str, object]) -> str:
    return f"{frame.get('file')}:{frame.get('lineno')}"


def explain(
    d: Diagnosis, loader: LoaderError, frames: list[dict[str, object]], entry: int | None
) -> Diagnosis:
    """``d`` (the rules' diagnosis of the original error) with where and which sample."""
    o = loader.origin or {}
    original = loader.original
    first = (original["message"].strip().splitlines() or [""])[0][:300]
    what = f"`{original['type']}: {first}`" if first else f"`{original['type']}`"
    raised = frames[-1] if frames else None
    at_entry = frames[entry] if entry is not None and 0 <= entry < len(frames) else None
    dataset = o.get("dataset") if isinstance(o.get("dataset"), str) else None

    def name(f: dict[str, object]) -> str:
        """The entry frame is the DataLoader's dataset's own method (a Subset's inner
        dataset is called further in)."""
        fn = str(f.get("function"))
        return f"{dataset}.{fn}" if dataset and f is at_entry else fn

    place = ""
    if raised is not None:
        place = f" in `{name(raised)}` ({_at(raised)})"
        if at_entry is not None and at_entry is not raised:
            place += f", called from `{name(at_entry)}` ({_at(at_entry)})"
    index = o.get("index")
    batch = _batch(o)
    if o.get("index_known"):
        sample = f", for sample index {spell(index)}"
        if batch and isinstance(size := o.get("batch_size"), int) and size > 1:
            sample += f" (batch {batch})"
    elif batch:
        sample = f", in the batch {batch} (which sample is not known)"
    else:
        sample = "; which sample is not known"
    where = f" in {loader.where}" if loader.in_worker else ""
    facts = {
        "where": loader.where,
        "worker_id": loader.worker_id,
        "index_known": bool(o.get("index_known")),
        "index": index if o.get("index_known") else None,
        "batch": o.get("batch"),
        "dataset": dataset,
        "original_type": original["type"],
    }
    ways = []
    if o.get("index_known") and not isinstance(index, dict):
        ways.append(f"run `dataset[{spell(index)}]` in a cell (with your dataset's name)")
    if loader.in_worker:
        ways.append("iterate once with `num_workers=0`")
    if d.get("category") != "generic":
        own, known = d.setdefault("hints", []), d.setdefault("facts", {})
        if isinstance(own, list):  # (the rules make a list and a dict)
            own.insert(0, f"Raised{place}{where}{sample}.")
        if isinstance(known, dict):
            known.update(data_loader=facts)
        return d
    if not loader.in_worker:
        remedy: str | None = (
            "The dataset's frames and their locals are in the stack: fix that sample or "
            "the code that reads it."
        )
    elif ways:
        remedy = (
            "Reproduce it in the notebook, where it shows its locals and %debug reaches "
            "it: " + ", or ".join(ways) + ". Then fix that sample or the code that reads it."
        )
    else:
        remedy = None
    hints = []
    if loader.why_unknown:
        hints.append(f"The sample's index is not known: {loader.why_unknown}.")
    if loader.in_worker:
        hints.append(
            f"torch re-raised it here as `{original['type']}: Caught {original['type']} "
            f"in {loader.where}` with the worker's traceback as text; the frames from "
            f"{loader.where} have no locals."
        )
    where_title = "the dataset" if at_entry is not None else "data loading"
    return {
        **d,
        "category": "data_loader",
        "title": f"{original['type']} in {where_title}",
        "headline": f"{what}{place}{where}{sample}.",
        "remedy": remedy,
        "hints": hints,
        "facts": facts,
        "confidence": "certain",
    }
