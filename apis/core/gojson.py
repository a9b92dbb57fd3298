"""Go's encoding/json output (json.Marshal / MarshalIndent) for objects upstream's Go readers compare byte for byte."""

from __future__ import annotations

import json

# json.Marshal escapes these so the text is safe inside HTML; Python's json leaves them as they are.
_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def marshal(value: object, indent: int | None = None) -> str:
    """json.Marshal's text (compact), or json.MarshalIndent(value, "", " " * indent)'s: non-ASCII kept as UTF-8,
    HTML characters and U+2028/9 escaped. Key order is the caller's (Go sorts map keys, keeps struct order)."""
    if indent is None:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    else:
        text = json.dumps(value, indent=indent, ensure_ascii=False)
    for ch, esc in _ESCAPES:
        text = text.replace(ch, esc)
    return text
