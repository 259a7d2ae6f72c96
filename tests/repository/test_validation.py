"""validate_config: Triton's rules and wording, one config snippet per rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import ErrorCode, ServerError
from asr_server.repository import complete_config, validate_config

IO_A = 'input [{ name: "A" data_type: TYPE_FP32 dims: [ -1 ] }]\noutput [{ name: "B" data_type: TYPE_FP32 dims: [ -1 ] }]'
START_END = (
    'control_input [{ name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] },'
    '{ name: "END" control [{ kind: CONTROL_SEQUENCE_END fp32_false_true: [0, 1] }] },'
    '{ name: "READY" control [{ kind: CONTROL_SEQUENCE_READY bool_false_true: [false, true] }] },'
    '{ name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }] }]'
)
ENSEMBLE_IO = (
    'platform: "ensemble"\nmax_batch_size: 8\n'
    'input [{ name: "A" data_type: TYPE_FP32 dims: [-1] }]\noutput [{ name: "O" data_type: TYPE_FP32 dims: [-1] }]\n'
)


def completed(tmp_path: Path, text: str, **kwargs) -> mc.ModelConfig:
    """Complete (and so validate) a pytorch config named 'm': pytorch reads no model file to complete."""
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    config = text_format.Parse(text, mc.ModelConfig())
    if not config.platform and not config.backend:
        config.backend = "pytorch"
    return complete_config(config, model_dir, [1], **kwargs)


def error_of(tmp_path: Path, text: str, **kwargs) -> str:
    with pytest.raises(ServerError) as caught:
        completed(tmp_path, text, **kwargs)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    return caught.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('input [{ data_type: TYPE_FP32 dims: [1] }]', "model input must specify 'name' for m"),
        ('input [{ name: "A" dims: [1] }]', "model input 'A' must specify 'data_type' for m"),
        ('output [{ name: "B" data_type: TYPE_FP32 }]', "model output 'B' must specify 'dims' for m"),
        ('input [{ name: "A" data_type: TYPE_FP32 dims: [0] }]',
         "model input 'A' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m"),
        ('input [{ name: "A" data_type: TYPE_FP32 dims: [4] reshape { shape: [2, 3] } }]',
         "model input 'A' has different size for dims and reshape for m"),
        ('input [{ name: "A" data_type: TYPE_FP32 dims: [-1, -1] reshape { shape: [-1] } }]',
         "model input 'A' has different number of variable-size dimensions for dims and reshape for m"),
        ('input [{ name: "A" data_type: TYPE_FP32 dims: [-1] reshape { shape: [-1, 2] } }]',
         "model input 'A' has different size for dims and reshape for m"),
        ('input [{ name: "A" data_type: TYPE_FP32 dims: [2] reshape { shape: [0] } }]',
         "model input 'A' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for m"),
        ('input [{ name: "A" data_type: TYPE_FP32 dims: [1] reshape { } }]',
         "model input 'A' cannot have empty reshape for non-batching model for m"),
        ('input [{ name: "A" data_type: TYPE_FP32 dims: [1] }, { name: "A" data_type: TYPE_INT32 dims: [1] }]',
         "model input 'A' is specified more than once for m"),
        ("max_batch_size: -1", "'max_batch_size' must be non-negative value for m"),
        ("max_batch_size: 4\ndynamic_batching { preferred_batch_size: [2, 8] }",
         "dynamic batching preferred size must be <= max batch size for m"),
        ("max_batch_size: 4\ndynamic_batching { preferred_batch_size: [0] }",
         "dynamic batching preferred size must be positive for m"),
        ("max_batch_size: 4\ndynamic_batching { priority_levels: 2 default_priority_level: 3 }",
         "default priority level must be in range [1, 2] for m"),
        ("max_batch_size: 4\nsequence_batching { oldest { preferred_batch_size: [5] } }",
         "sequence batching preferred batch size must be <= max batch size for m"),
        ('sequence_batching { control_input [{ control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }] }',
         "sequence batching control tensor must have a name for m"),
        ('sequence_batching { control_input [{ name: "S" control [{ kind: CONTROL_SEQUENCE_START }] }] }',
         "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' "
         "for CONTROL_SEQUENCE_START for m"),
        ('sequence_batching { control_input [{ name: "S" control [{ int32_false_true: [0, 1, 1] }] }] }',
         "sequence batching control 'int32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_START for m"),
        ('sequence_batching { control_input [{ name: "S" control [{ int32_false_true: [0, 1] fp32_false_true: [0, 1] }] }] }',
         "sequence batching specifies both 'int32_false_true' and 'fp32_false_true' for CONTROL_SEQUENCE_START for m"),
        ('sequence_batching { control_input [{ name: "S" control [{ int32_false_true: [0, 1] }] },'
         '{ name: "S2" control [{ int32_false_true: [0, 1] }] }] }',
         "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m"),
        ('sequence_batching { control_input [{ name: "S" control [{ int32_false_true: [0, 1] }] },'
         '{ name: "S" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] }] }] }',
         "sequence batching control tensor 'S' is specified for multiple control kinds for m"),
        ('sequence_batching { control_input [{ name: "C" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 }] }] }',
         "unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are TYPE_UINT64, "
         "TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"),
        ('sequence_batching { state [{ input_name: "in" data_type: TYPE_FP32 dims: [1] }] }',
         "sequence batching state must specify 'output_name' for m"),
        ('instance_group [{ kind: KIND_CPU gpus: [0] }]',
         "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs"),
        ('platform: "ensemble"\nensemble_scheduling { }\ninstance_group [{ kind: KIND_CPU }]',
         "instance group should not be specified for ensemble 'm'"),
        ('backend: "pytorch"\nensemble_scheduling { step [{ model_name: "x" }] }',
         "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble"),
        ('platform: "ensemble"', "ensemble scheduling must be set for ensemble m whose platform is ensemble"),
        ('platform: "ensemble"\nensemble_scheduling { }', "must specify 'step' for ensemble 'm'"),
        (ENSEMBLE_IO + 'ensemble_scheduling { step [{ input_map { key: "X" value: "A" } output_map { key: "Y" value: "O" } }] }',
         "must specify 'model_name' in step 0 of ensemble 'm'"),
        (ENSEMBLE_IO + 'ensemble_scheduling { step [{ model_name: "x" output_map { key: "Y" value: "O" } }] }',
         "must specify 'input_map' in step 0 of ensemble 'm'"),
        (ENSEMBLE_IO + 'ensemble_scheduling { step [{ model_name: "x" input_map { key: "X" value: "A" } '
         'output_map { key: "Y" value: "O" } }, { model_name: "y" input_map { key: "X" value: "A" } '
         'output_map { key: "Y" value: "O" } }] }',
         "ensemble tensor 'O' can appear in an output map only once for ensemble 'm' step 1"),
        (ENSEMBLE_IO + 'ensemble_scheduling { step [{ model_name: "x" input_map { key: "X" value: "other" } '
         'output_map { key: "Y" value: "O" } }] }',
         "ensemble input 'A' for ensemble 'm' is not used"),
        (ENSEMBLE_IO + 'ensemble_scheduling { step [{ model_name: "x" input_map { key: "X" value: "A" } '
         'output_map { key: "Y" value: "mid" } }] }',
         "ensemble output 'O' for ensemble 'm' is not used"),
        (ENSEMBLE_IO + 'ensemble_scheduling { step [{ model_name: "x" input_map [{ key: "X" value: "A" }, '
         '{ key: "Z" value: "missing" }] output_map { key: "Y" value: "O" } }] }',
         "output 'O' for ensemble 'm' is not written"),
        (ENSEMBLE_IO + 'ensemble_scheduling { step [{ model_name: "x" input_map { key: "X" value: "A" } '
         'output_map [{ key: "Y" value: "O" }, { key: "EXTRA" value: "dangling" }] }] }',
         "ensemble tensor 'dangling' is unused in ensemble 'm'"),
    ],
)
def test_invalid_config(tmp_path: Path, text: str, message: str) -> None:
    assert error_of(tmp_path, text) == message


@pytest.mark.parametrize(
    "text",
    [
        IO_A,
        'max_batch_size: 2\ninput [{ name: "A" data_type: TYPE_FP32 dims: [1] reshape { } }]',  # scalar per item
        'input [{ name: "A" data_type: TYPE_FP32 dims: [2, 4, -1, 6] reshape { shape: [8, -1, 1, 6] } }]',
        "dynamic_batching { }",  # no batching to do with max_batch_size 0, but Triton accepts it
        "sequence_batching { " + START_END + " }",  # sequence batching without batching: one slot per sequence
        "max_batch_size: 4\nsequence_batching { direct { } state [{ input_name: \"cache_in\" "
        "output_name: \"cache_out\" data_type: TYPE_FP32 dims: [-1, 4] }] }",
        ENSEMBLE_IO + 'ensemble_scheduling { step [{ model_name: "x" input_map { key: "X" value: "A" } '
        'output_map { key: "Y" value: "mid" } }, { model_name: "y" input_map { key: "X" value: "mid" } '
        'output_map { key: "Y" value: "O" } }] }',
    ],
)
def test_valid_config(tmp_path: Path, text: str) -> None:
    completed(tmp_path, text)


def test_missing_name() -> None:
    with pytest.raises(ServerError, match="^model configuration must specify 'name'$"):
        validate_config(mc.ModelConfig(backend="pytorch"))


def test_unsupported_gpu_id(tmp_path: Path) -> None:
    message = error_of(tmp_path, "instance_group [{ kind: KIND_GPU gpus: [3] }]", gpus=[0, 1])
    assert message == "instance group m_0 of model m specifies invalid or unsupported gpu id 3. GPUs available are: 0, 1"
