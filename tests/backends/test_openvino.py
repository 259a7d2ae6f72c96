"""The openvino backend on tiny IR and ONNX models: auto-complete, batching, Triton's parameters, errors,
and served over gRPC and HTTP with tritonclient (dynamic batching, a sequence model with implicit state)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import tritonclient.grpc.aio as grpc_aio
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import ModelContext
from asr_server.errors import ErrorCode, ServerError
from asr_server.repository import available_versions, complete_config, read_config
from asr_server.messages import InferResponse
from tests.helpers import onnx_models
from tests.helpers.backend_calls import count_runs, request
from tests.helpers.sequence_models import ACCUMULATOR_CONFIG, accumulator
from tests.helpers.served import check_add_sub_batched

# Imported through the backend, which keeps openvino's telemetry from starting.
backend_module = pytest.importorskip("asr_server.backends.openvino", reason="the openvino backend needs the 'openvino' extra")
ov = backend_module.ov
OpenVINOBackend, read_model, save_ir = backend_module.OpenVINOBackend, backend_module.read_model, backend_module.save_ir

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
RNG = np.random.default_rng(0)


def ir_folder(root: Path, name: str, config: Optional[str], write_onnx=onnx_models.add_sub_model,
              batch_layout: bool = True, **kwargs) -> Path:
    """<root>/<name>/1/model.xml (+ .bin) converted from a tiny ONNX graph, and config.pbtxt if given."""
    model_dir = root / name
    onnx_path = write_onnx(root / f"{name}.source.onnx", **kwargs)
    save_ir(read_model(onnx_path, name), model_dir / "1" / "model.xml", batch_layout=batch_layout)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def load(model_dir: Path, kind: str = "KIND_CPU") -> OpenVINOBackend:
    config = complete_config(read_config(model_dir), model_dir, available_versions(model_dir))
    backend = OpenVINOBackend(ModelContext(model_dir.name, 1, config, model_dir, model_dir / "1",
                                           instance_name=f"{model_dir.name}_0", instance_kind=kind))
    backend.load()
    return backend



def ok(result) -> InferResponse:
    assert isinstance(result, InferResponse), result
    return result


def parameters(**values: str) -> str:
    return "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in values.items())



# ---- auto-complete ---------------------------------------------------------------------------------


def test_ir_with_batch_layout_auto_completes_to_a_batching_model(tmp_path: Path) -> None:
    model_dir = ir_folder(tmp_path, "m", 'backend: "openvino"')
    config = complete_config(read_config(model_dir), model_dir, [1])
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("INPUT0", mc.TYPE_FP32, [4]), ("INPUT1", mc.TYPE_FP32, [4])]
    assert [o.name for o in config.output] == ["OUTPUT0", "OUTPUT1"]


def test_a_folder_with_only_model_xml_is_an_openvino_model(tmp_path: Path) -> None:
    model_dir = ir_folder(tmp_path, "m", None)
    config = complete_config(read_config(model_dir), model_dir, [1])
    assert config.backend == "openvino" and config.default_model_filename == "model.xml"
    assert config.instance_group[0].kind == config.instance_group[0].KIND_CPU


def test_onnx_read_by_openvino_without_layout_does_not_batch(tmp_path: Path) -> None:
    """Triton's rule: batching needs a layout with N; a plain ONNX file has none, so its dims stay whole."""
    model_dir = tmp_path / "m"
    onnx_models.add_sub_model(model_dir / "1" / "model.onnx")
    (model_dir / "config.pbtxt").write_text('backend: "openvino"\ndefault_model_filename: "model.onnx"')
    backend = load(model_dir)
    config = backend.context.config
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [-1, 4]
    a, b = RNG.random((3, 4), dtype=np.float32), RNG.random((3, 4), dtype=np.float32)
    response = ok(backend.execute([request(INPUT0=a, INPUT1=b)])[0])
    np.testing.assert_allclose(response.output("OUTPUT0").data, a + b, rtol=1e-6)
    np.testing.assert_allclose(response.output("OUTPUT1").data, a - b, rtol=1e-6)


# ---- execution -------------------------------------------------------------------------------------


def test_requests_are_concatenated_run_once_and_split_back(tmp_path: Path) -> None:
    backend = load(ir_folder(tmp_path, "m", 'backend: "openvino"'))
    runs = count_runs(backend)
    pairs = [(RNG.random((n, 4), dtype=np.float32), RNG.random((n, 4), dtype=np.float32)) for n in (1, 2, 1)]
    results = backend.execute([request(INPUT0=a, INPUT1=b) for a, b in pairs])
    assert runs == [4]
    for (a, b), result in zip(pairs, results):
        response = ok(result)
        np.testing.assert_allclose(response.output("OUTPUT0").data, a + b, rtol=1e-6)
        np.testing.assert_allclose(response.output("OUTPUT1").data, a - b, rtol=1e-6)
        assert response.output("OUTPUT0").datatype == "FP32"


def test_a_static_batch_ir_gets_a_dynamic_batch_dim(tmp_path: Path) -> None:
    """An IR exported at batch 1 still serves the batcher's batches of any size."""
    model_dir = ir_folder(tmp_path, "m", 'backend: "openvino"\nmax_batch_size: 8', shape=[1, 4])
    backend = load(model_dir)
    a = RNG.random((5, 4), dtype=np.float32)
    np.testing.assert_allclose(ok(backend.execute([request(INPUT0=a, INPUT1=a)])[0]).output("OUTPUT0").data, 2 * a)


def test_skip_dynamic_batchsize_needs_full_batches_unless_padding(tmp_path: Path) -> None:
    static = ('backend: "openvino"\nmax_batch_size: 4\n'
              'parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value { string_value: "YES" } }\n')
    backend = load(ir_folder(tmp_path, "m", static))
    assert backend.compiled.inputs[0].get_partial_shape().to_string() == "[4,4]"
    one = np.ones((1, 4), np.float32)
    failed = backend.execute([request(INPUT0=one, INPUT1=one)])[0]
    assert isinstance(failed, ServerError) and failed.code is ErrorCode.INTERNAL
    assert failed.message.startswith("expected requests with batch size '4', got '1'... this error can be avoided")

    padded = load(ir_folder(tmp_path / "p", "m", static + 'parameters { key: "ENABLE_BATCH_PADDING" '
                                                           'value { string_value: "YES" } }\n'))
    a = RNG.random((3, 4), dtype=np.float32)
    out = ok(padded.execute([request(INPUT0=a, INPUT1=one.repeat(3, 0))])[0]).output("OUTPUT1").data
    np.testing.assert_allclose(out, a - 1, rtol=1e-6)
    assert out.shape == (3, 4)


def test_config_data_type_is_converted_by_openvino(tmp_path: Path) -> None:
    """As in Triton's backend, the config's type is what clients send: FP16 over an FP32 model."""
    config = ('backend: "openvino"\nmax_batch_size: 4\n'
              'input [{ name: "INPUT0" data_type: TYPE_FP16 dims: [3] }]\n'
              'output [{ name: "OUTPUT0" data_type: TYPE_FP16 dims: [3] }]')
    backend = load(ir_folder(tmp_path, "m", config, onnx_models.identity_model))
    data = np.array([[0.5, -2.0, 3.25]], np.float16)
    out = ok(backend.execute([request(INPUT0=data)])[0]).output("OUTPUT0")
    assert out.datatype == "FP16"
    np.testing.assert_array_equal(out.data, data)


def reshape_to_rows_of_three(path: Path) -> Path:
    """OUTPUT0 = INPUT0 reshaped to [-1, 3]: fails at run time unless the element count divides by 3."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 3])
    return onnx_models.write_model(path, [helper.make_node("Reshape", ["INPUT0", "shape"], ["OUTPUT0"])],
                                   [("INPUT0", TensorProto.FLOAT, ["batch", "n"])],
                                   [("OUTPUT0", TensorProto.FLOAT, ["rows", 3])], [shape])


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_failing_run_fails_only_its_group(tmp_path: Path, threads: str) -> None:
    """With two threads OpenVINO raises; with one it returns an empty output (its bug), which is refused."""
    config = 'backend: "openvino"\nmax_batch_size: 4\n' + parameters(INFERENCE_NUM_THREADS=threads)
    backend = load(ir_folder(tmp_path, "m", config, reshape_to_rows_of_three, batch_layout=False))
    results = backend.execute([request(INPUT0=np.ones((1, 4), np.float32)), request(INPUT0=np.ones((2, 3), np.float32))])
    assert isinstance(results[0], ServerError) and results[0].code is ErrorCode.INTERNAL
    np.testing.assert_array_equal(ok(results[1]).output("OUTPUT0").data, np.ones((2, 3), np.float32))


# ---- parameters and load errors --------------------------------------------------------------------


def test_triton_parameters_reach_the_compiled_model(tmp_path: Path) -> None:
    config = 'backend: "openvino"\n' + parameters(INFERENCE_NUM_THREADS="2", NUM_STREAMS="2",
                                                  PERFORMANCE_HINT="THROUGHPUT")
    compiled = load(ir_folder(tmp_path, "m", config)).compiled
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 2
    assert compiled.get_property("NUM_STREAMS") == 2
    assert str(compiled.get_property("PERFORMANCE_HINT")) == "THROUGHPUT"


def test_default_threads_are_per_instance(tmp_path: Path) -> None:
    from asr_server.backends.openvino_options import DEFAULT_INFERENCE_THREADS

    compiled = load(ir_folder(tmp_path, "m", 'backend: "openvino"')).compiled
    assert compiled.get_property("INFERENCE_NUM_THREADS") == DEFAULT_INFERENCE_THREADS
    assert compiled.get_property("NUM_STREAMS") == 1
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32  # bf16 only with HINT_BF16


def test_hint_bf16_asks_for_bf16(tmp_path: Path) -> None:
    compiled = load(ir_folder(tmp_path, "m", 'backend: "openvino"\n' + parameters(HINT_BF16="YES"))).compiled
    has_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == (ov.Type.bf16 if has_bf16 else ov.Type.f32)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("INFERENCE_NUM_THREADS", "many", "expected the parameter 'INFERENCE_NUM_THREADS' to be a non-negative number, got many"),
    ("NUM_STREAMS", "lots", "expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got lots"),
    ("PERFORMANCE_HINT", "fast", "expected the parameter 'PERFORMANCE_HINT' to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast"),
    ("HINT_BF16", "no", "expected the parameter 'HINT_BF16' to be YES, got no"),
])
def test_bad_parameter_values_fail_the_load_in_tritons_words(tmp_path: Path, key: str, value: str, message: str) -> None:
    model_dir = ir_folder(tmp_path, "m", 'backend: "openvino"\n' + parameters(**{key: value}))
    with pytest.raises(ServerError) as caught:
        load(model_dir)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and caught.value.message == message


def test_gpu_instances_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="Triton OpenVINO backend supports only Kind CPU and AUTO"):
        load(ir_folder(tmp_path, "m", 'backend: "openvino"'), kind="KIND_GPU")


def test_config_input_the_model_lacks_fails_the_load(tmp_path: Path) -> None:
    config = ('backend: "openvino"\nmax_batch_size: 4\n'
              'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }, { name: "WRONG" data_type: TYPE_FP32 dims: [4] }]')
    with pytest.raises(ServerError) as caught:
        load(ir_folder(tmp_path, "m", config))
    assert caught.value.message == "unexpected inference input 'WRONG' for model 'm', allowed inputs are: INPUT0, INPUT1"


def test_missing_and_broken_model_files(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(
        'backend: "openvino"\ninput [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]')
    with pytest.raises(ServerError, match=r"^unable to find '.*model.xml' for model 'm'$"):
        load(model_dir)
    (model_dir / "1" / "model.xml").write_text("<net>not an IR")
    with pytest.raises(ServerError, match="^failed to load model 'm': ") as caught:
        load(model_dir)
    assert caught.value.code is ErrorCode.INTERNAL


# ---- served over gRPC and HTTP ---------------------------------------------------------------------

BATCHED = """
name: "ov_batched"
backend: "openvino"
max_batch_size: 16
instance_group [ { kind: KIND_CPU, count: 1 } ]
dynamic_batching { max_queue_delay_microseconds: 200000 }
"""


async def test_served_over_grpc_and_http_with_dynamic_batching(tmp_path: Path, running) -> None:
    ir_folder(tmp_path, "ov_batched", BATCHED)
    async with running(tmp_path) as server:
        config = await check_add_sub_batched(server, "ov_batched")
        assert config["backend"] == "openvino" and [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]


async def test_sequence_model_with_implicit_state_over_grpc_stream(tmp_path: Path, running) -> None:
    """The accumulator of the onnxruntime sequence tests, as OpenVINO IR: running sums kept as implicit state."""
    source = accumulator(tmp_path / "src")
    model_dir = tmp_path / "repo" / "ov_accumulator"
    save_ir(read_model(source / "1" / "model.onnx", "ov_accumulator"), model_dir / "1" / "model.xml")
    config = ACCUMULATOR_CONFIG.format(name="ov_accumulator", idle_us=5_000_000)
    (model_dir / "config.pbtxt").write_text(config.replace('backend: "onnxruntime"', 'backend: "openvino"'))
    sequences, steps = 12, 4
    requests = []
    for step in range(steps):
        for seq in range(sequences):
            value = np.array([[(seq + 1) * (step + 1)]], np.float32)
            inputs = [grpc_aio.InferInput("INPUT", [1, 1], "FP32")]
            inputs[0].set_data_from_numpy(value)
            requests.append(dict(model_name="ov_accumulator", inputs=inputs, request_id=f"{seq}:{step}",
                                 sequence_id=500 + seq, sequence_start=step == 0, sequence_end=step == steps - 1))

    async def iterate():
        for item in requests:
            yield item

    async with running(tmp_path / "repo", allow_http=False) as server:
        client = grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            got = {}
            async for result, error in client.stream_infer(iterate()):
                assert error is None, error
                got[result.get_response().id] = float(result.as_numpy("OUTPUT")[0, 0])
                if len(got) == len(requests):
                    break
            for seq in range(sequences):
                for step in range(steps):
                    assert got[f"{seq}:{step}"] == (seq + 1) * sum(k + 1 for k in range(step + 1)), (seq, step)
            stats = (await client.get_inference_statistics("ov_accumulator", as_json=True))["model_stats"][0]
            assert int(stats["execution_count"]) < sequences * steps  # sequences shared batches
            assert server.manager.get("ov_accumulator").scheduler.sequences == {}
        finally:
            await client.close()


def test_kind_auto_stays_on_the_cpu_where_gpus_are_seen(tmp_path: Path) -> None:
    """Triton's openvino backend prefers KIND_CPU, so KIND_AUTO does not become KIND_GPU (which it refuses)."""
    model_dir = ir_folder(tmp_path, "m", 'backend: "openvino"\ninstance_group [{ kind: KIND_AUTO }]')
    config = complete_config(read_config(model_dir), model_dir, [1], gpus=[0])
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU


def test_reshape_io_layers_gives_inputs_the_config_dims(tmp_path: Path) -> None:
    """An IR exported at [1, 4] takes rows of any length once RESHAPE_IO_LAYERS applies the config's [-1]."""
    config = ('backend: "openvino"\nmax_batch_size: 8\n'
              'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [-1] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [-1] }]\n'
              'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [-1] }]\n')
    fixed = load(ir_folder(tmp_path / "fixed", "m", config, shape=[1, 4]))
    assert fixed.compiled.inputs[0].get_partial_shape().to_string() == "[?,4]"
    backend = load(ir_folder(tmp_path / "reshaped", "m", config + parameters(RESHAPE_IO_LAYERS="YES"), shape=[1, 4]))
    assert backend.compiled.inputs[0].get_partial_shape().to_string() == "[?,?]"
    a = RNG.random((2, 6), dtype=np.float32)
    np.testing.assert_allclose(ok(backend.execute([request(INPUT0=a, INPUT1=a)])[0]).output("OUTPUT0").data, 2 * a)
