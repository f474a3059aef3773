from __future__ import annotations

import numpy as np
import pytest

from bls.tensors import (
    DictTensorSource,
    InputError,
    bytes_tensor,
    read_bool,
    read_float,
    read_int,
    read_int_list,
    read_optional_int,
    read_str,
    read_str_list,
)


def src(**tensors: np.ndarray) -> DictTensorSource:
    return DictTensorSource(tensors)


def test_defaults_apply_when_absent_and_required_inputs_are_named() -> None:
    empty = src()
    assert read_int(empty, "top_k", 0) == 0
    assert read_float(empty, "top_p", 1.0) == 1.0
    assert read_bool(empty, "stream", True) is True
    assert read_str(empty, "request_class", "interactive") == "interactive"
    assert read_optional_int(empty, "seed") is None
    assert read_int_list(empty, "resume_token_ids") == ()
    assert read_str_list(empty, "stop") == ()
    with pytest.raises(InputError, match="'max_tokens' is required"):
        read_int(empty, "max_tokens")


def test_scalars_accept_shape_1_and_1x1() -> None:
    assert read_int(src(n=np.array([7], dtype=np.int32)), "n") == 7
    assert read_int(src(n=np.array([[7]], dtype=np.int32)), "n") == 7
    with pytest.raises(InputError, match="exactly one value"):
        read_int(src(n=np.array([1, 2], dtype=np.int32)), "n")


def test_types_are_checked() -> None:
    with pytest.raises(InputError, match="integer"):
        read_int(src(n=np.array([1.5], dtype=np.float32)), "n")
    with pytest.raises(InputError, match="BOOL"):
        read_bool(src(b=np.array([1], dtype=np.int32)), "b", False)
    with pytest.raises(InputError, match="finite"):
        read_float(src(t=np.array([np.nan], dtype=np.float32)), "t", 0.0)
    with pytest.raises(InputError, match="UTF-8"):
        read_str(src(s=bytes_tensor([b"\xff\xfe"])), "s")
    with pytest.raises(InputError, match="integers"):
        read_int_list(src(ids=np.array([1.0], dtype=np.float32)), "ids")


def test_bytes_round_trip() -> None:
    tensor = bytes_tensor(["a", "é🚀"])
    assert tensor.dtype == np.object_
    assert read_str_list(src(stop=tensor), "stop") == ("a", "é🚀")
