"""A batch's deadline: what a client may write for it, and how long is left, in words.

A client gives either a duration from now (`"90s"`, `"30m"`, `"1h30m"`, `"1d"`, the form of
OpenAI's `completion_window: "24h"`) or a moment (RFC 3339, `"2026-11-30T09:00:00Z"` or with
an offset). Either way the result is an absolute unix time, so the dispatcher orders batches
by one number no matter how each was asked for. Nothing may be later than the configured
maximum: a deadline is a promise the fleet has to be able to keep.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from contracts.caller_echo import echoed

_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# Units in falling order, each at most once, spaces allowed between them: "1h30m", "1h 30m".
# At most 12 digits each (more is no deadline anyone keeps), so the sum stays a plain number.
_DURATION = re.compile(
    r"(?:(\d{1,12})\s*d)?\s*(?:(\d{1,12})\s*h)?\s*(?:(\d{1,12})\s*m)?\s*(?:(\d{1,12})\s*s)?", re.IGNORECASE
)


def parse_deadline(value: str | None, now: float, max_s: float) -> float:
    """The unix time `value` names, given the time `now`; none given means `now + max_s`.

    Raises ValueError, with a message meant for the client, when `value` is neither a duration
    nor an RFC 3339 time with a zone, is not in the future, or is more than `max_s` away.
    """
    text = (value or "").strip()
    if not text:
        return now + max_s
    seconds = _duration_s(text)
    if seconds is not None:
        if seconds == 0:
            raise ValueError(f"deadline {echoed(text)} is no time at all: give a duration such as '24h'")
        if seconds > max_s:  # compared as integers: never overflows a float
            raise ValueError(f"deadline must be within {_duration_text(max_s)} (got {echoed(text)})")
        deadline = now + seconds
    else:
        deadline = _rfc3339(text)
        if deadline <= now:
            raise ValueError(f"deadline {echoed(text)} is in the past")
    if deadline > now + max_s:
        raise ValueError(f"deadline must be within {_duration_text(max_s)} (got {echoed(text)})")
    return deadline


def format_duration(seconds: float) -> str:
    """A duration for people, to the largest two units: "42s", "5m 03s", "1h 05m", "2d 03h".

    Rounded up, so an ETA is never shown shorter than it is; negative durations show as "0s".
    """
    total = max(0, math.ceil(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _duration_s(text: str) -> int | None:
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groups()):
        return None
    return sum(int(amount) * _UNIT_S[unit] for amount, unit in zip(match.groups(), "dhms", strict=True) if amount)


def _rfc3339(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"deadline {echoed(text)} is neither a duration (e.g. '90s', '30m', '1h30m', '24h', '1d') "
            "nor an RFC 3339 time (e.g. '2026-11-30T09:00:00Z')"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"deadline {echoed(text)} has no time zone: end it with 'Z' or an offset such as '+02:00'")
    return moment.timestamp()


def _duration_text(seconds: float) -> str:
    """`seconds` in the syntax `parse_deadline` reads: 86400 -> "24h", 5400 -> "1h30m"."""
    total = math.floor(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{amount}{unit}" for amount, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if amount)
    return text or "0s"
