"""A caller's value, as an error message shows it back: quoted, and at most a short prefix.

Error messages quote what the caller sent so the caller sees what was wrong (`no batch 'x'`).
What the caller sent may be a 3 MB model name, a form field, an id in the path: echoed whole,
it comes back whole in the error (and in every log and dashboard that keeps error bodies).
Every message that quotes a caller's value goes through `echoed`, so none is longer than
ECHO_CHARS characters of the value, with the value's full length said after it:

    echoed("small")                   ->  'small'
    echoed("abcdef", limit=3)         ->  'abc…' (6 characters)
    echoed("x" * 3_000_000)           ->  'xxx…x…' (3,000,000 characters)   (64 x's before the …)
"""

from __future__ import annotations

# Enough to recognise a model name, an id or a date; not enough to carry a payload back.
ECHO_CHARS = 64


def echoed(value: object, limit: int = ECHO_CHARS) -> str:
    """`value` quoted as `repr` quotes it, cut to its first `limit` characters (then "…" and
    the full length) when it is longer. Anything that is not a string is shown by its `repr`,
    cut the same way."""
    if not isinstance(value, str):
        text = repr(value)
        return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
    if len(value) <= limit:
        return repr(value)
    quoted = repr(value[:limit])
    return f"{quoted[:-1]}…{quoted[-1]} ({len(value):,} characters)"
