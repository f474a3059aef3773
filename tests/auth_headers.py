"""The one way the tests send an API key: `Authorization: Bearer KEY`.

The header's name is lower case because gRPC metadata must be (tritonclient refuses a capital
letter); HTTP reads header names without regard to case, so the same headers serve both doors.
A test of a malformed header writes that header out itself.
"""

from __future__ import annotations


def bearer(key: str) -> dict[str, str]:
    """Headers that present `key` as a bearer token, over HTTP or gRPC."""
    return {"authorization": f"Bearer {key}"}
