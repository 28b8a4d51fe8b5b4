"""Series names as they go on the wire: at most 512 characters, always encodable (R44).

Every name the stream keeps passes through ``bound_name`` once, when its series or block
is created, whoever made it (``log()``, the gradient monitor, the memory monitor), so
nothing longer than the schema's ``maxLength`` is ever kept or sent:

- A lone surrogate (e.g. ``"\\ud800"``, which no UTF-8 message can carry) becomes U+FFFD.
- A name longer than ``limits.MAX_NAME_LENGTH`` (512) keeps its first 500 characters
  followed by ``…#`` and 10 hex digits of a hash of the whole name: 512 characters in
  all. Two long names that share their first 500 characters stay distinct, and the
  same long name always gives the same short one (PROTOCOL.md, "Series names").

``bound_name`` is idempotent, so a panel that sends back a name it was given (e.g. in
``clear_history``) finds the same series.
"""

from __future__ import annotations

import hashlib
import re

from . import limits

#: Between the kept prefix of a cut name and its hash.
CUT_MARKER = "…#"
#: Hex digits of the hash of the whole name that end a cut name.
HASH_DIGITS = 10

_SURROGATE = re.compile("[\ud800-\udfff]")


def bound_name(name: str) -> str:
    """``name`` as the stream keeps and sends it (see the module docstring)."""
    if not name.isascii():
        try:
            name.encode("utf-8")
            clean = name
        except UnicodeEncodeError:
            clean = _SURROGATE.sub("\ufffd", name)
    else:
        clean = name
    limit = limits.MAX_NAME_LENGTH
    if len(clean) <= limit:
        return clean
    # Hash the original (lone surrogates and all), so names that differ only there and
    # past the prefix stay distinct.
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogatepass"), digest_size=(HASH_DIGITS + 1) // 2
    ).hexdigest()[:HASH_DIGITS]
    keep = max(0, limit - len(CUT_MARKER) - HASH_DIGITS)
    return clean[:keep] + CUT_MARKER + digest
