"""What the door says about itself and its models: each served model (`small`, `large`) looks
like `llm` with its public tensors only (tensors.DOOR_INPUTS), decoupled, one request a batch,
and TensorRT-LLM's guided decoding and log-probability tensors (trtllm_tensors.py), optional,
under the names NVIDIA's ensemble gives them.

The gateway-only inputs (`input_ids`, `cache_namespace`, `resume_token_ids`) are not listed: a
client built from this metadata never learns of them, and the door refuses them by name. So the
door requires what its body requires (`text_input`, `max_tokens`), though `llm` itself may take
its prompt as `input_ids` instead.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2, service_pb2

from contracts.llm_tensors import LLM_OUTPUTS, LlmInput
from contracts.schemas import GenerateBody
from gateway.grpc_door.tensors import DOOR_INPUTS, MODEL_VERSION
from gateway.grpc_door.trtllm_tensors import TRTLLM_INPUTS, TRTLLM_OUTPUTS

SERVER_NAME = "switchyard"
SERVER_VERSION = "0.1.0"
# What the door implements of Triton's protocol extensions.
EXTENSIONS = ("classification", "sequence", "model_configuration", "parameters")
PLATFORM = "switchyard"

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


def _door_inputs() -> list[tuple[str, str, list[int], bool]]:
    """(name, datatype, dims, optional) of every input the door takes, `llm`'s first."""
    llm = [(spec.name, spec.datatype, spec.dims, not _required(spec)) for spec in DOOR_INPUTS.values()]
    return llm + [(spec.name, spec.datatype, list(spec.dims), True) for spec in TRTLLM_INPUTS.values()]


def _door_outputs() -> list[tuple[str, str, list[int]]]:
    """(name, datatype, dims) of every output the door sends: `llm`'s every response carries
    (its own log-probabilities are the gateway's), then TensorRT-LLM's log-probabilities."""
    llm = [(spec.name, spec.datatype, spec.dims) for spec in LLM_OUTPUTS if not spec.when_asked]
    return llm + [(spec.name, spec.datatype, list(spec.dims)) for spec in TRTLLM_OUTPUTS]


def model_metadata(model_id: str) -> service_pb2.ModelMetadataResponse:
    """`model_id`'s inputs and outputs as `llm` and TensorRT-LLM declare them (-1: any length)."""
    tensor = service_pb2.ModelMetadataResponse.TensorMetadata
    return service_pb2.ModelMetadataResponse(
        name=model_id,
        versions=[MODEL_VERSION],
        platform=PLATFORM,
        inputs=[tensor(name=name, datatype=datatype, shape=dims) for name, datatype, dims, _ in _door_inputs()],
        outputs=[tensor(name=name, datatype=datatype, shape=dims) for name, datatype, dims in _door_outputs()],
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
            model_config_pb2.ModelInput(name=name, data_type=_CONFIG_TYPE[datatype], dims=dims, optional=optional)
            for name, datatype, dims, optional in _door_inputs()
        ],
        output=[
            model_config_pb2.ModelOutput(name=name, data_type=_CONFIG_TYPE[datatype], dims=dims)
            for name, datatype, dims in _door_outputs()
        ],
    )
    return service_pb2.ModelConfigResponse(config=config)


def _required(spec: LlmInput) -> bool:
    """Whether the door refuses a request without `spec`: its body field has no default."""
    return GenerateBody.model_fields[spec.request_field].is_required()
