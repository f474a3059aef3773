"""Token ids packed as INT32, the form a gateway holds a prompt's ids in while its reply runs.

The gateway tokenizes every prompt (its context check and KV lease) and sends the ids on to
`llm` as `input_ids` (docs/tensors.md), so it keeps them for as long as the reply may need
sending again (a failover resumes it on another server). A tuple of Python ints costs ~36 bytes
a token (an 8-byte slot and a 28-byte int); packed, a token costs the 4 bytes the INT32 tensor
carries, and the tensor's array is a view of them, not a conversion:

    6,000 streams x 2,000-token prompts    tuples ~430 MB     packed ~48 MB
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

_WIRE = np.dtype("<i4")  # INT32 as Triton carries it: little-endian
_INT32 = np.iinfo(np.int32)


@dataclass(frozen=True, slots=True, repr=False)
class PackedTokenIds:
    """Immutable token ids, 4 bytes each; empty by default (no ids: the server tokenizes)."""

    packed: bytes = b""  # INT32, little-endian

    def __repr__(self) -> str:
        return f"PackedTokenIds.pack({self.tolist()})"

    @classmethod
    def pack(cls, ids: Sequence[int]) -> PackedTokenIds:
        """`ids` packed; ValueError for an id INT32 cannot hold (numpy would wrap it)."""
        try:
            wide = np.asarray(ids, dtype=np.int64).reshape(-1)
        except OverflowError:
            wide = None
        if wide is None or (wide.size and (wide.min() < _INT32.min or wide.max() > _INT32.max)):
            bad = next(i for i in ids if not _INT32.min <= i <= _INT32.max)
            raise ValueError(f"token id {bad} does not fit INT32")
        return cls(wide.astype(_WIRE).tobytes())

    def __len__(self) -> int:
        return len(self.packed) // _WIRE.itemsize

    def array(self) -> npt.NDArray[np.int32]:
        """The ids as a read-only INT32 array (a view of the packed bytes)."""
        return np.frombuffer(self.packed, dtype=_WIRE)

    def tolist(self) -> list[int]:
        ids: list[int] = self.array().tolist()
        return ids
