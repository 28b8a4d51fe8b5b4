"""Turn a failed cell's exception into an ``exception`` message: strings, never frames.

``capture(exc, shell=, cells=, limits=)`` (in ``message``) builds the message body; it
never keeps a tensor or a frame alive (R23), degrades anything that fails while
summarising to ``"n/a"`` (R17, R20) and bounds the whole message (R09). It runs no user
code without a bound and ends within its time budget, sending what it read (R54).

Files, one idea each: ``message`` (the capture itself), ``stack`` (walking and eliding
the traceback), ``origin`` (cell / user file / library, and the names shown),
``frame`` (one frame's row: source, span, locals), ``exception`` (the raised exception's
type, message, SyntaxError position), ``linked`` (cause/context chain, ExceptionGroup
leaves), ``bounds`` (``Limits`` and the size bound), ``loader_error`` (a DataLoader
worker's error unwrapped: the original exception, its frames, the sample).
"""

from __future__ import annotations

from .bounds import LIMITS, Limits
from .exception import exception_summary
from .message import capture

__all__ = ["LIMITS", "Limits", "capture", "exception_summary"]
