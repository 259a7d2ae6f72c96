"""The onnxruntime backend on tiny ONNX graphs: batching, grouping, reshape, dtypes, error isolation."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from onnx import TensorProto, helper

from asr_server.backends.base import ModelContext
from asr_server.backends.onnxruntime import OnnxRuntimeBackend
from asr_server.errors import ErrorCode, ServerError
from asr_server.repository import available_versions, complete_config, read_config
from asr_server.messages import InferResponse
from tests.helpers import onnx_models
from tests.helpers.backend_calls import count_runs, request

RNG = np.random.default_rng(0)


def load(tmp_path: Path, config_text: Optional[str], write_onnx=onnx_models.identity_model, **kwargs) -> OnnxRuntimeBackend:
    model_dir = onnx_models.model_folder(tmp_path, "m", config_text, write_onnx, **kwargs)
    config = complete_config(read_config(model_dir), model_dir, available_versions(model_dir))
    backend = OnnxRuntimeBackend(ModelContext("m", 1, config, model_dir, model_dir / "1", instance_name="m_0"))
    backend.load()
    return backend




def ok(result) -> InferResponse:
    assert isinstance(result, InferResponse), result
    return result


def test_requests_are_concatenated_and_split_back(tmp_path: Path) -> None:
    backend = load(tmp_path, None, onnx_models.add_sub_model)  # auto-completed: max_batch_size 4
    runs = count_runs(backend)
    pairs = [(RNG.random((n, 4), dtype=np.float32), RNG.random((n, 4), dtype=np.float32)) for n in (1, 3, 2)]
    results = backend.execute([request(INPUT0=a, INPUT1=b) for a, b in pairs])
    assert runs == [6]
    for (a, b), result in zip(pairs, results):
        response = ok(result)
        np.testing.assert_allclose(response.output("OUTPUT0").data, a + b)
        np.testing.assert_allclose(response.output("OUTPUT1").data, a - b)
        assert response.output("OUTPUT0").datatype == "FP32"
        assert (response.model_name, response.model_version) == ("m", "1")


def test_requests_of_different_shapes_run_in_separate_groups(tmp_path: Path) -> None:
    config = ('backend: "onnxruntime"\nmax_batch_size: 8\n'
              'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [-1] }]\n'
              'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] }]')
    backend = load(tmp_path, config, shape=["batch", "time"])
    runs = count_runs(backend)
    arrays = [np.ones((2, 3), np.float32), np.full((1, 5), 2, np.float32), np.full((1, 3), 3, np.float32)]
    results = backend.execute([request(INPUT0=a) for a in arrays])
    assert sorted(runs) == [1, 3]
    for array, result in zip(arrays, results):
        np.testing.assert_array_equal(ok(result).output("OUTPUT0").data, array)


def test_a_failing_run_fails_only_its_own_requests(tmp_path: Path) -> None:
    backend = load(tmp_path, None, onnx_models.add_sub_model, shape=["batch", "n"])
    good = request(INPUT0=np.ones((1, 4), np.float32), INPUT1=np.ones((1, 4), np.float32))
    # INPUT0 and INPUT1 disagree on their second dim: onnxruntime's Add fails at run time.
    bad = [request(INPUT0=np.ones((1, 3), np.float32), INPUT1=np.ones((1, 5), np.float32)) for _ in range(2)]
    results = backend.execute([bad[0], good, bad[1]])
    np.testing.assert_array_equal(ok(results[1]).output("OUTPUT0").data, np.full((1, 4), 2, np.float32))
    for failed in (results[0], results[2]):
        assert isinstance(failed, ServerError) and failed.code is ErrorCode.INTERNAL
        assert "Attempting to broadcast" in failed.message  # onnxruntime's own explanation reaches the client


def test_a_request_missing_an_input_fails_alone(tmp_path: Path) -> None:
    backend = load(tmp_path, None, onnx_models.add_sub_model)
    ones = np.ones((1, 4), np.float32)
    results = backend.execute([request(INPUT0=ones), request(INPUT0=ones, INPUT1=ones)])
    assert isinstance(results[0], ServerError) and results[0].code is ErrorCode.INVALID_ARGUMENT
    assert results[0].message == "expected input 'INPUT1' for model 'm'"
    ok(results[1])


def test_reshape_between_wire_dims_and_model_shape(tmp_path: Path) -> None:
    config = ('backend: "onnxruntime"\nmax_batch_size: 4\n'
              'input [{ name: "X" data_type: TYPE_FP32 dims: [6] reshape { shape: [2, 3] } }]\n'
              'output [{ name: "Y" data_type: TYPE_FP32 dims: [6] reshape { shape: [2, 3] } }]')
    backend = load(tmp_path, config, onnx_models.reshape_to_matrix_model)
    first, second = np.arange(12, dtype=np.float32).reshape(2, 6), np.zeros((1, 6), np.float32)
    results = backend.execute([request(X=first), request(X=second)])
    np.testing.assert_array_equal(ok(results[0]).output("Y").data, first + 1)
    np.testing.assert_array_equal(ok(results[1]).output("Y").data, second + 1)


def test_batch_only_tensor_uses_the_empty_reshape(tmp_path: Path) -> None:
    backend = load(tmp_path, None, elem_type=TensorProto.INT64, shape=["batch"])  # wire [b, 1], model [b]
    results = backend.execute([request(INPUT0=np.array([[7]], np.int64)), request(INPUT0=np.array([[8], [9]], np.int64))])
    np.testing.assert_array_equal(ok(results[0]).output("OUTPUT0").data, [[7]])
    np.testing.assert_array_equal(ok(results[1]).output("OUTPUT0").data, [[8], [9]])


@pytest.mark.parametrize(
    ("elem_type", "data", "datatype"),
    [
        (TensorProto.FLOAT16, np.array([[0.5, -2.0, 65504.0]], np.float16), "FP16"),
        (TensorProto.INT64, np.array([[2**40, -1, 0]], np.int64), "INT64"),
        (TensorProto.BOOL, np.array([[True, False, True]]), "BOOL"),
        (TensorProto.UINT8, np.array([[0, 128, 255]], np.uint8), "UINT8"),
        (TensorProto.DOUBLE, np.array([[1e-300, 2.5, -3.0]], np.float64), "FP64"),
    ],
)
def test_datatypes_round_trip(tmp_path: Path, elem_type: int, data: np.ndarray, datatype: str) -> None:
    backend = load(tmp_path, None, elem_type=elem_type)
    out = ok(backend.execute([request(INPUT0=data)])[0]).output("OUTPUT0")
    assert out.datatype == datatype and out.data.dtype == data.dtype
    np.testing.assert_array_equal(out.data, data)


def test_string_tensors_take_and_give_bytes(tmp_path: Path) -> None:
    backend = load(tmp_path, None, elem_type=TensorProto.STRING, shape=["batch", 2])
    first = np.array([[b"hello", "w\u00f6rld".encode()]], dtype=np.object_)
    second = np.array([[b"a", b""], [b"b", b"c"]], dtype=np.object_)
    results = backend.execute([request(INPUT0=first), request(INPUT0=second)])
    for sent, result in zip((first, second), results):
        out = ok(result).output("OUTPUT0")
        assert out.datatype == "BYTES" and out.data.dtype == np.object_
        assert out.data.tolist() == sent.tolist()


def test_bytes_for_a_numeric_input_is_a_clear_error(tmp_path: Path) -> None:
    backend = load(tmp_path, None)
    result = backend.execute([request(INPUT0=np.array([[b"1", b"2", b"3"]], dtype=np.object_))])[0]
    assert isinstance(result, ServerError) and result.code is ErrorCode.INVALID_ARGUMENT
    assert "onnxruntime takes BYTES only for string tensors" in result.message


def test_non_batching_model_runs_each_request_alone(tmp_path: Path) -> None:
    backend = load(tmp_path, None, shape=[2, 3])
    assert backend.context.config.max_batch_size == 0
    runs = count_runs(backend)
    arrays = [np.full((2, 3), value, np.float32) for value in (1, 2)]
    results = backend.execute([request(INPUT0=a) for a in arrays])
    assert runs == [2, 2]
    for array, result in zip(arrays, results):
        np.testing.assert_array_equal(ok(result).output("OUTPUT0").data, array)


def test_every_model_output_is_returned(tmp_path: Path) -> None:
    config = ('backend: "onnxruntime"\nmax_batch_size: 4\n'
              'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]')  # inputs and OUTPUT1 auto-completed
    backend = load(tmp_path, config, onnx_models.add_sub_model)
    ones = np.ones((1, 4), np.float32)
    response = ok(backend.execute([request(INPUT0=ones, INPUT1=ones)])[0])
    assert [t.name for t in response.outputs] == ["OUTPUT0", "OUTPUT1"]


def test_config_input_the_model_lacks_fails_the_load(tmp_path: Path) -> None:
    config = ('backend: "onnxruntime"\nmax_batch_size: 4\n'
              'input [{ name: "WRONG" data_type: TYPE_FP32 dims: [3] }]')
    with pytest.raises(ServerError) as caught:
        load(tmp_path, config)
    assert caught.value.message == "unexpected inference input 'WRONG' for model 'm', allowed inputs are: INPUT0"


def test_config_datatype_must_match_the_model(tmp_path: Path) -> None:
    config = ('backend: "onnxruntime"\nmax_batch_size: 4\n'
              'input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [3] }]')
    with pytest.raises(ServerError) as caught:
        load(tmp_path, config)
    assert caught.value.message == (
        "unexpected datatype TYPE_INT32 for inference input 'INPUT0' of model 'm', expecting TYPE_FP32"
    )


def test_thread_count_parameter(tmp_path: Path) -> None:
    config = 'backend: "onnxruntime"\nparameters { key: "intra_op_thread_count" value { string_value: "2" } }'
    backend = load(tmp_path, config)
    assert backend.session.get_session_options().intra_op_num_threads == 2


def test_gpu_instance_without_cuda_falls_back_to_cpu(tmp_path: Path) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("onnxruntime has a CUDA provider here")
    model_dir = onnx_models.model_folder(tmp_path, "m", None)
    config = complete_config(read_config(model_dir), model_dir, [1])
    backend = OnnxRuntimeBackend(ModelContext("m", 1, config, model_dir, model_dir / "1", instance_kind="KIND_GPU"))
    backend.load()
    assert backend.session.get_providers() == ["CPUExecutionProvider"]


def test_broken_model_file_fails_the_load_with_the_reason(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.onnx").write_bytes(b"not an onnx file")
    config = complete_config(read_config(model_dir), model_dir, [1], auto_complete=False)
    backend = OnnxRuntimeBackend(ModelContext("m", 1, config, model_dir, model_dir / "1"))
    with pytest.raises(ServerError, match="^failed to load model 'm': ") as caught:
        backend.load()
    assert caught.value.code is ErrorCode.INTERNAL


def test_model_with_an_unused_initializer_input(tmp_path: Path) -> None:
    """Older exporters list initializers among the graph inputs: they are not config inputs."""
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    path = tmp_path / "m" / "1" / "model.onnx"
    onnx_models.write_model(
        path,
        [helper.make_node("Add", ["INPUT0", "bias"], ["OUTPUT0"])],
        [("INPUT0", TensorProto.FLOAT, ["batch", 3]), ("bias", TensorProto.FLOAT, [3])],
        [("OUTPUT0", TensorProto.FLOAT, ["batch", 3])],
        [bias],
    )
    model_dir = tmp_path / "m"
    config = complete_config(read_config(model_dir), model_dir, [1])
    assert [i.name for i in config.input] == ["INPUT0"] and config.max_batch_size == 4


REPO_ROOT = Path(__file__).resolve().parents[2]


def test_bundled_identity_example_is_current_and_serves(tmp_path: Path) -> None:
    from tests.helpers.scripts import load_script

    script = load_script("make_example_models")
    script.identity_fp32(tmp_path / "model.onnx")
    model_dir = REPO_ROOT / "model_repo" / "identity_fp32"
    assert (model_dir / "1" / "model.onnx").read_bytes() == (tmp_path / "model.onnx").read_bytes()

    config = complete_config(read_config(model_dir), model_dir, available_versions(model_dir))
    assert (config.max_batch_size, list(config.dynamic_batching.preferred_batch_size)) == (8, [8])
    backend = OnnxRuntimeBackend(ModelContext("identity_fp32", 1, config, model_dir, model_dir / "1"))
    backend.load()
    audio = RNG.random((3, 7), dtype=np.float32)
    np.testing.assert_array_equal(ok(backend.execute([request(INPUT0=audio)])[0]).output("OUTPUT0").data, audio)


def test_sequence_control_and_state_tensors_are_not_auto_completed_as_io(tmp_path: Path) -> None:
    """START and the implicit state come from the sequence batcher: the config must not ask clients for them."""
    path = tmp_path / "m" / "1" / "model.onnx"
    onnx_models.write_model(
        path,
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"]), helper.make_node("Identity", ["cache_in"], ["cache_out"])],
        [("INPUT0", TensorProto.FLOAT, ["b", 3]), ("START", TensorProto.INT32, ["b", 1]),
         ("cache_in", TensorProto.FLOAT, ["b", 4])],
        [("OUTPUT0", TensorProto.FLOAT, ["b", 3]), ("cache_out", TensorProto.FLOAT, ["b", 4])],
    )
    (tmp_path / "m" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 2\nsequence_batching {\n'
        '  control_input [{ name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] }]\n'
        '  state [{ input_name: "cache_in" output_name: "cache_out" data_type: TYPE_FP32 dims: [4] }]\n}'
    )
    model_dir = tmp_path / "m"
    config = complete_config(read_config(model_dir), model_dir, [1])
    assert [i.name for i in config.input] == ["INPUT0"] and [o.name for o in config.output] == ["OUTPUT0"]

    backend = OnnxRuntimeBackend(ModelContext("m", 1, config, model_dir, model_dir / "1"))
    backend.load()
    cache = RNG.random((1, 4), dtype=np.float32)
    # The sequence batcher adds the control and state tensors to each request.
    response = ok(backend.execute([request(INPUT0=np.ones((1, 3), np.float32), START=np.ones((1, 1), np.int32),
                                           cache_in=cache)])[0])
    np.testing.assert_array_equal(response.output("cache_out").data, cache)
