"""read_config / config_from_json / complete_config, checked against what real Triton 2.51 reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends import base
from asr_server.backends.base import Backend
from asr_server.errors import ErrorCode, ServerError
from asr_server.repository import available_versions, complete_config, config_from_json, read_config
from tests.helpers import onnx_models

FIXTURES = Path(__file__).parent / "fixtures"  # ModelConfig responses of a real Triton 2.51 server


class ConfigOnlyBackend(Backend):
    """Stands in for the python backend: config completion must not depend on running model.py."""

    default_model_filename = "model.py"

    def load(self) -> None: ...

    def execute(self, requests, senders=None):
        return []


@pytest.fixture
def fake_python_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(base._BACKEND_MODULES, "python", f"{__name__}:ConfigOnlyBackend")


def triton_fixture(name: str) -> mc.ModelConfig:
    return json_format.ParseDict(json.loads((FIXTURES / f"config_{name}.json").read_text())["config"], mc.ModelConfig())


def as_dict(config: mc.ModelConfig) -> dict:
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def folder(tmp_path: Path, name: str, config_text: str | None, versions=(1,)) -> Path:
    model_dir = tmp_path / name
    for version in versions:
        (model_dir / str(version)).mkdir(parents=True)
    if config_text is not None:
        (model_dir / "config.pbtxt").write_text(config_text)
    return model_dir


def complete(model_dir: Path, **kwargs) -> mc.ModelConfig:
    return complete_config(read_config(model_dir), model_dir, available_versions(model_dir), **kwargs)


# --- reading ----------------------------------------------------------------------------------------


def test_read_config_parses_text_format(tmp_path: Path) -> None:
    model_dir = folder(tmp_path, "m", 'name: "m"\nbackend: "pytorch"\nmax_batch_size: 8\n'
                       'input [{ name: "A" data_type: TYPE_FP32 dims: [ -1 ] }]')
    config = read_config(model_dir)
    assert (config.name, config.backend, config.max_batch_size) == ("m", "pytorch", 8)
    assert list(config.input[0].dims) == [-1]


def test_read_config_reports_file_and_protobuf_message(tmp_path: Path) -> None:
    model_dir = folder(tmp_path, "m", 'nam: "m"')
    with pytest.raises(ServerError) as caught:
        read_config(model_dir)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message == (
        f"failed to read text proto from {model_dir / 'config.pbtxt'}: "
        '1:1 : Message type "inference.ModelConfig" has no field named "nam".'
    )


def test_read_config_rejects_unknown_enum_value(tmp_path: Path) -> None:
    model_dir = folder(tmp_path, "m", 'input [{ name: "A" data_type: TYPE_FOO dims: [1] }]')
    with pytest.raises(ServerError, match='has no value named TYPE_FOO') as caught:
        read_config(model_dir)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_missing_config_yields_the_folder_name(tmp_path: Path) -> None:
    config = read_config(folder(tmp_path, "bare", None))
    assert as_dict(config) == {"name": "bare"}


def test_config_from_json_override() -> None:
    config = config_from_json('{"backend": "onnxruntime", "max_batch_size": 2, '
                              '"input": [{"name": "X", "data_type": "TYPE_FP32", "dims": ["-1"]}]}')
    assert (config.backend, config.max_batch_size, config.input[0].dims[0]) == ("onnxruntime", 2, -1)


def test_config_from_json_rejects_unknown_field() -> None:
    with pytest.raises(ServerError, match="failed to parse model configuration override: .*max_batch") as caught:
        config_from_json('{"max_batch": 2}')
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


# --- completion: matches Triton ---------------------------------------------------------------------


def test_onnx_model_without_config_matches_triton_autocomplete(tmp_path: Path) -> None:
    """Triton's autocfg fixture is a python model X[-1,3] -> Y[-1,3]; an ONNX model of that signature gets
    the same config, plus what Triton sets for onnxruntime (platform, backend, file name, and two CPU
    instances: Triton's default count for onnxruntime CPU groups)."""
    model_dir = onnx_models.model_folder(tmp_path, "autocfg", None, input_name="X", output_name="Y")
    expected = triton_fixture("autocfg")
    expected.platform, expected.backend = "onnxruntime_onnx", "onnxruntime"
    expected.default_model_filename = "model.onnx"
    expected.instance_group[0].count = 2
    assert as_dict(complete(model_dir)) == as_dict(expected)


@pytest.mark.parametrize("fixture", ["pyadd", "pyseq"])
def test_completing_the_user_config_reproduces_triton(tmp_path: Path, fake_python_backend, fixture: str) -> None:
    """Strip from Triton's answer what Triton fills in; completing it again must give Triton's answer."""
    expected = triton_fixture(fixture)
    user = mc.ModelConfig()
    user.CopyFrom(expected)
    for field in ("version_policy", "default_model_filename", "optimization"):
        user.ClearField(field)
    for group in user.instance_group:
        group.ClearField("name")
        group.ClearField("count")
    model_dir = folder(tmp_path, fixture, str(user))
    assert as_dict(complete(model_dir)) == as_dict(expected)


def test_ensemble_completion_matches_triton(tmp_path: Path) -> None:
    expected = triton_fixture("ens")
    user = mc.ModelConfig()
    user.CopyFrom(expected)
    user.ClearField("version_policy")
    user.ClearField("model_transaction_policy")
    model_dir = folder(tmp_path, "ens", str(user))
    assert as_dict(complete(model_dir)) == as_dict(expected)


def test_config_name_must_match_folder(tmp_path: Path) -> None:
    model_dir = folder(tmp_path, "folder", 'name: "other"\nbackend: "pytorch"')
    with pytest.raises(ServerError) as caught:
        complete(model_dir)
    assert caught.value.message == (
        "unexpected directory name 'folder' for model 'other', directory name must equal model name"
    )
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("text", "platform", "backend"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime_onnx", "onnxruntime"),
        ('backend: "onnxruntime"', "onnxruntime_onnx", "onnxruntime"),
        ('platform: "pytorch_libtorch"', "pytorch_libtorch", "pytorch"),
        ('backend: "pytorch"', "pytorch_libtorch", "pytorch"),
    ],
)
def test_platform_and_backend_fill_each_other(tmp_path: Path, text: str, platform: str, backend: str) -> None:
    config = complete(folder(tmp_path, "m", text))
    assert (config.platform, config.backend) == (platform, backend)


def test_mismatched_platform_and_backend(tmp_path: Path) -> None:
    with pytest.raises(ServerError) as caught:
        complete(folder(tmp_path, "m", 'platform: "onnxruntime_onnx"\nbackend: "pytorch"'))
    assert caught.value.message == "unexpected 'platform' and 'backend' pair, got:onnxruntime_onnx, pytorch"


def test_unknown_platform(tmp_path: Path) -> None:
    with pytest.raises(ServerError) as caught:
        complete(folder(tmp_path, "m", 'platform: "caffe2_netdef"'))
    assert caught.value.message == "unexpected platform type 'caffe2_netdef' for m"


def test_no_config_and_no_model_file(tmp_path: Path) -> None:
    with pytest.raises(ServerError) as caught:
        complete(folder(tmp_path, "m", None))
    assert caught.value.message == "must specify 'platform' or 'backend' for 'm'"


def test_model_file_names_the_backend(tmp_path: Path) -> None:
    model_dir = folder(tmp_path, "torchy", None)
    (model_dir / "1" / "model.pt").write_bytes(b"")
    config = complete(model_dir)
    assert (config.backend, config.platform, config.default_model_filename) == ("pytorch", "pytorch_libtorch", "model.pt")
    assert [(g.name, g.count, g.kind) for g in config.instance_group] == [("torchy", 1, mc.ModelInstanceGroup.KIND_CPU)]


def test_instance_groups_are_named_and_resolved(tmp_path: Path) -> None:
    text = 'backend: "pytorch"\ninstance_group [{ count: 3 }, { kind: KIND_GPU }, { name: "mine" kind: KIND_CPU }]'
    config = complete(folder(tmp_path, "m", text), gpus=[0, 1])
    assert [(g.name, g.count, mc.ModelInstanceGroup.Kind.Name(g.kind), list(g.gpus)) for g in config.instance_group] == [
        ("m_0", 3, "KIND_GPU", [0, 1]),
        ("m_1", 1, "KIND_GPU", [0, 1]),
        ("mine", 1, "KIND_CPU", []),
    ]


def test_gpu_group_without_gpus_is_an_error_when_gpus_are_known(tmp_path: Path) -> None:
    model_dir = folder(tmp_path, "m", 'backend: "pytorch"\ninstance_group [{ kind: KIND_GPU }]')
    with pytest.raises(ServerError) as caught:
        complete(model_dir, gpus=[])
    assert caught.value.message == "instance group m_0 of model m has kind KIND_GPU but no GPUs are available"
    # Unknown GPUs (None): left for the backend, which falls back to the CPU.
    assert complete(model_dir).instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU


def test_explicit_io_is_kept_and_batching_not_guessed(tmp_path: Path) -> None:
    text = 'backend: "onnxruntime"\ninput [{ name: "INPUT0" data_type: TYPE_FP32 dims: [-1, 3] }]'
    model_dir = onnx_models.model_folder(tmp_path, "m", text)
    config = complete(model_dir)
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [-1, 3]
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUTPUT0", [-1, 3])]  # filled, full shape


def test_explicit_max_batch_size_strips_the_batch_dim(tmp_path: Path) -> None:
    model_dir = onnx_models.model_folder(tmp_path, "m", "max_batch_size: 16", onnx_models.add_sub_model)
    config = complete(model_dir)
    assert config.backend == "onnxruntime" and config.max_batch_size == 16
    assert not config.HasField("dynamic_batching")  # only autofilled batching turns on the batcher
    assert [(i.name, list(i.dims)) for i in config.input] == [("INPUT0", [4]), ("INPUT1", [4])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUTPUT0", [4]), ("OUTPUT1", [4])]


def test_fixed_batch_dim_model_is_not_batched(tmp_path: Path) -> None:
    model_dir = onnx_models.model_folder(tmp_path, "m", None, shape=[2, 3])
    config = complete(model_dir)
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [2, 3]


def test_max_batch_size_on_a_model_without_batch_dim(tmp_path: Path) -> None:
    model_dir = onnx_models.model_folder(tmp_path, "m", "max_batch_size: 4", shape=[2, 3])
    with pytest.raises(ServerError) as caught:
        complete(model_dir)
    assert caught.value.message == (
        "autofill failed for model 'm': model does not support batching while non-zero max_batch_size is specified"
    )


def test_batch_only_tensor_gets_dims_1_and_empty_reshape(tmp_path: Path) -> None:
    model_dir = onnx_models.model_folder(tmp_path, "m", None, elem_type=TensorProto.INT64, shape=["batch"])
    config = complete(model_dir)
    assert config.max_batch_size == 4
    assert list(config.input[0].dims) == [1] and config.input[0].HasField("reshape")
    assert list(config.input[0].reshape.shape) == [] and config.input[0].data_type == mc.TYPE_INT64


def test_auto_complete_reads_the_newest_version_and_custom_file_name(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    onnx_models.identity_model(model_dir / "1" / "net.onnx", input_name="OLD", output_name="OLD_OUT")
    onnx_models.identity_model(model_dir / "3" / "net.onnx", input_name="NEW", output_name="NEW_OUT")
    (model_dir / "config.pbtxt").write_text('backend: "onnxruntime"\ndefault_model_filename: "net.onnx"')
    config = complete(model_dir)
    assert [i.name for i in config.input] == ["NEW"]


def test_auto_complete_can_be_disabled(tmp_path: Path) -> None:
    model_dir = onnx_models.model_folder(tmp_path, "m", 'backend: "onnxruntime"')
    config = complete(model_dir, auto_complete=False)
    assert not config.input and config.max_batch_size == 0


def test_complete_config_does_not_modify_its_argument(tmp_path: Path) -> None:
    model_dir = onnx_models.model_folder(tmp_path, "m", None)
    original = read_config(model_dir)
    complete_config(original, model_dir, [1])
    assert as_dict(original) == {"name": "m"}


def test_scheduler_defaults(tmp_path: Path) -> None:
    text = ('backend: "pytorch"\nmax_batch_size: 8\n'
            'sequence_batching { oldest { max_candidate_sequences: 4 } }')
    config = complete(folder(tmp_path, "m", text))
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [8]
