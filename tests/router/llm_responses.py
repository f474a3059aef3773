"""Real `llm` responses for tests: the `ModelInferResponse` Triton makes of what the BLS model
sent, its outputs in the table's order, each in its raw wire form."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2

from contracts.llm_tensors import LLM_OUTPUTS
from contracts.triton_wire import raw_contents


def response_of(outputs: Mapping[str, np.ndarray[Any, Any]]) -> service_pb2.ModelInferResponse:
    response = service_pb2.ModelInferResponse(model_name="llm")
    for spec in LLM_OUTPUTS:
        if spec.name in outputs:
            response.outputs.add(name=spec.name, datatype=spec.datatype, shape=list(outputs[spec.name].shape))
            response.raw_output_contents.append(raw_contents(outputs[spec.name], spec.datatype))
    return response
