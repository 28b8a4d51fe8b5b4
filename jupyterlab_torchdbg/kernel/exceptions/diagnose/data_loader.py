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
    at_entry = frames[entry] if entry is not None and 0 <= entry < len(frames) else None
    named = o.get("dataset")
    dataset = named if isinstance(named, str) else None
    place = _place(frames[-1] if frames else None, at_entry, dataset)
    sample = _sample(o)
    where = f" in {loader.where}" if loader.in_worker else ""
    facts = {
        "where": loader.where,
        "worker_id": loader.worker_id,
        "index_known": bool(o.get("index_known")),
        "index": o.get("index") if o.get("index_known") else None,
        "batch": o.get("batch"),
        "dataset": dataset,
        "original_type": original["type"],
    }
    if d.get("category") != "generic":
        own, known = d.setdefault("hints", []), d.setdefault("facts", {})
        if isinstance(own, list):  # (the rules make a list and a dict)
            own.insert(0, f"Raised{place}{where}{sample}.")
        if isinstance(known, dict):
            known.update(data_loader=facts)
        return d
    where_title = "the dataset" if at_entry is not None else "data loading"
    return {
        **d,
        "category": "data_loader",
        "title": f"{original['type']} in {where_title}",
        "headline": f"{what}{place}{where}{sample}.",
        "remedy": _remedy(loader, o),
        "hints": _hints(loader),
        "facts": facts,
        "confidence": "certain",
    }


def _place(
    raised: dict[str, object] | None, at_entry: dict[str, object] | None, dataset: str | None
) -> str:
    """ " in `fn` (file:line), called from `Dataset.__getitem__` (file:line)"; the entry
    frame is named by the DataLoader's dataset (a Subset's inner dataset is called further
    in)."""

    def name(f: dict[str, object]) -> str:
        fn = str(f.get("function"))
        return f"{dataset}.{fn}" if dataset and f is at_entry else fn

    if raised is None:
        return ""
    place = f" in `{name(raised)}` ({_at(raised)})"
    if at_entry is not None and at_entry is not raised:
        place += f", called from `{name(at_entry)}` ({_at(at_entry)})"
    return place


def _sample(o: dict[str, object]) -> str:
    """Which sample, as far as the DataLoader's fetch told."""
    batch = _batch(o)
    if o.get("index_known"):
        sample = f", for sample index {spell(o.get('index'))}"
        if batch and isinstance(size := o.get("batch_size"), int) and size > 1:
            sample += f" (batch {batch})"
        return sample
    if batch:
        return f", in the batch {batch} (which sample is not known)"
    return "; which sample is not known"


def _remedy(loader: LoaderError, o: dict[str, object]) -> str | None:
    """How to reach the failing sample with its locals: in the notebook, or in the
    stack already (no worker)."""
    if not loader.in_worker:
        return (
            "The dataset's frames and their locals are in the stack: fix that sample or "
            "the code that reads it."
        )
    ways = []
    index = o.get("index")
    if o.get("index_known") and not isinstance(index, dict):
        ways.append(f"run `dataset[{spell(index)}]` in a cell (with your dataset's name)")
    ways.append("iterate once with `num_workers=0`")
    return (
        "Reproduce it in the notebook, where it shows its locals and %debug reaches "
        "it: " + ", or ".join(ways) + ". Then fix that sample or the code that reads it."
    )


def _hints(loader: LoaderError) -> list[str]:
    """Why the index is not known; that a worker's frames are text without locals."""
    hints = []
    if loader.why_unknown:
        hints.append(f"The sample's index is not known: {loader.why_unknown}.")
    if loader.in_worker:
        t = loader.original["type"]
        hints.append(
            f"torch re-raised it here as `{t}: Caught {t} in {loader.where}` with the "
            f"worker's traceback as text; the frames from {loader.where} have no locals."
        )
    return hints
