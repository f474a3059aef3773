"""What the door says about itself and its models: each served model (`small`, `large`) looks
like `llm` with its public tensors only (tensors.DOOR_INPUTS), decoupled, one request a batch.

The gateway-only inputs (`cache_namespace`, `resume_token_ids`) are not listed: a client built
from this metadata never learns of them, and the door refuses them by name.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2, service_pb2

from contracts.llm_tensors import (
    CACHED_TOKENS,
    COMPLETION_TOKENS,
    DISCARDED_TOKENS,
    FINISH_REASON,
    OUTPUT_TOKEN_IDS,
    PROMPT_TOKENS,
    TEXT_OUTPUT,
)
from gateway.grpc_door.tensors import DOOR_INPUTS, MODEL_VERSION

SERVER_NAME = "switchyard"
SERVER_VERSION = "0.1.0"
# What the door implements of Triton's protocol extensions.
EXTENSIONS = ("classification", "sequence", "model_configuration", "parameters")
PLATFORM = "switchyard"

# (name, datatype, is_list) of `llm`'s outputs, in config.pbtxt's order.
_OUTPUTS = (
    (TEXT_OUTPUT, "BYTES", False),
    (OUTPUT_TOKEN_IDS, "INT32", True),
    (FINISH_REASON, "BYTES", False),
    (PROMPT_TOKENS, "INT32", False),
    (CACHED_TOKENS, "INT32", False),
    (COMPLETION_TOKENS, "INT32", False),
    (DISCARDED_TOKENS, "INT32", False),
)
# Triton's config names for the wire datatypes.
_CONFIG_TYPE = {
    "BYTES": model_config_pb2.TYPE_STRING,
    "INT32": model_config_pb2.TYPE_INT32,
    "INT64": model_config_pb2.TYPE_INT64,
    "FP32": model_config_pb2.TYPE_FP32,
    "BOOL": model_config_pb2.TYPE_BOOL,
}


def server_metadata() -> service_pb2.ServerMetadataResponse:
    return service_pb2.ServerMetadataResponse(name=SERVER_NAME, version=SERVER_VERSION, extensions=list(EXTENSIONS))


def model_metadata(model_id: str) -> service_pb2.ModelMetadataResponse:
    """`model_id`'s inputs and outputs as `llm` declares them (shape -1: a list)."""
    tensor = service_pb2.ModelMetadataResponse.TensorMetadata
    return service_pb2.ModelMetadataResponse(
        name=model_id,
        versions=[MODEL_VERSION],
        platform=PLATFORM,
        inputs=[
            tensor(name=name, datatype=spec.datatype, shape=[-1 if spec.is_list else 1])
            for name, (spec, _) in DOOR_INPUTS.items()
        ],
        outputs=[
            tensor(name=name, datatype=datatype, shape=[-1 if is_list else 1]) for name, datatype, is_list in _OUTPUTS
        ],
    )


def model_config(model_id: str) -> service_pb2.ModelConfigResponse:
    """A config like `llm`'s (decoupled, `max_batch_size: 0`), with the door's inputs."""
    config = model_config_pb2.ModelConfig(
        name=model_id,
        platform=PLATFORM,
        backend=PLATFORM,
        max_batch_size=0,
        model_transaction_policy=model_config_pb2.ModelTransactionPolicy(decoupled=True),
        input=[
            model_config_pb2.ModelInput(
                name=name,
                data_type=_CONFIG_TYPE[spec.datatype],
                dims=[-1 if spec.is_list else 1],
                optional=not spec.required,
            )
            for name, (spec, _) in DOOR_INPUTS.items()
        ],
        output=[
            model_config_pb2.ModelOutput(name=name, data_type=_CONFIG_TYPE[datatype], dims=[-1 if is_list else 1])
            for name, datatype, is_list in _OUTPUTS
        ],
    )
    return service_pb2.ModelConfigResponse(config=config)
