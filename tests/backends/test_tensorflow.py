"""The tensorflow backend on tiny SavedModels and a frozen GraphDef: auto-complete, batching, errors, and
served over gRPC and HTTP with tritonclient (dynamic batching, a SavedModel with implicit state)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpc_aio
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import ModelContext
from asr_server.errors import ErrorCode, ServerError
from asr_server.repository import available_versions, complete_config, read_config
from asr_server.messages import InferResponse
from tests.helpers.backend_calls import request
from tests.helpers.served import check_add_sub_batched

tf = pytest.importorskip("tensorflow", reason="the tensorflow backend needs the 'tensorflow' extra (tensorflow-cpu)")
from asr_server.backends.tensorflow import TensorFlowBackend  # noqa: E402  (after the skip)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore::pytest.PytestUnraisableExceptionWarning")
RNG = np.random.default_rng(0)


class AddSub(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="INPUT0"),
                                  tf.TensorSpec([None, 4], tf.float32, name="INPUT1")])
    def serve(self, INPUT0, INPUT1):  # noqa: N803  (Triton's example names)
        return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}


class Accumulator(tf.Module):
    """OUTPUT = STATE_OUT = STATE_IN + INPUT (the onnxruntime sequence tests' accumulator)."""

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="INPUT"),
                                  tf.TensorSpec([None, 1], tf.float32, name="STATE_IN")])
    def serve(self, INPUT, STATE_IN):  # noqa: N803
        total = INPUT + STATE_IN
        return {"OUTPUT": tf.identity(total), "STATE_OUT": tf.identity(total)}


class RowTimesMatrix(tf.Module):
    """Fails at run time unless rows are 3 long."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = tf.Variable(tf.ones([3, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="INPUT0")])
    def serve(self, INPUT0):  # noqa: N803
        return {"OUTPUT0": tf.matmul(INPUT0, self.weight)}


class Strings(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.string, name="TEXT")])
    def serve(self, TEXT):  # noqa: N803
        return {"UPPER": tf.strings.upper(TEXT)}


def savedmodel_folder(root: Path, name: str, module: tf.Module, config: str | None) -> Path:
    model_dir = root / name
    tf.saved_model.save(module, str(model_dir / "1" / "model.savedmodel"), signatures={"serving_default": module.serve})
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def graphdef_folder(root: Path, name: str, config: str) -> Path:
    """A frozen GraphDef: Y = X * 2 + 1 with placeholder X and output node Y."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="X")
        tf.identity(x * 2.0 + 1.0, name="Y")
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.graphdef").write_bytes(graph.as_graph_def().SerializeToString())
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def load(model_dir: Path) -> TensorFlowBackend:
    config = complete_config(read_config(model_dir), model_dir, available_versions(model_dir))
    backend = TensorFlowBackend(ModelContext(model_dir.name, 1, config, model_dir, model_dir / "1",
                                             instance_name=f"{model_dir.name}_0"))
    backend.load()
    return backend



def ok(result) -> InferResponse:
    assert isinstance(result, InferResponse), result
    return result


def test_savedmodel_auto_completes_and_batches(tmp_path: Path) -> None:
    backend = load(savedmodel_folder(tmp_path, "m", AddSub(), None))  # no config at all
    config = backend.context.config
    assert (config.backend, config.platform, config.default_model_filename) == (
        "tensorflow", "tensorflow_savedmodel", "model.savedmodel")
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert sorted((i.name, i.data_type, list(i.dims)) for i in config.input) == [
        ("INPUT0", mc.TYPE_FP32, [4]), ("INPUT1", mc.TYPE_FP32, [4])]
    assert sorted(o.name for o in config.output) == ["OUTPUT0", "OUTPUT1"]
    sizes = []
    original = backend._run
    backend._run = lambda feeds: sizes.append(len(feeds["INPUT0"])) or original(feeds)  # type: ignore[method-assign]
    pairs = [(RNG.random((n, 4), dtype=np.float32), RNG.random((n, 4), dtype=np.float32)) for n in (1, 2)]
    results = backend.execute([request(INPUT0=a, INPUT1=b) for a, b in pairs])
    assert sizes == [3]
    for (a, b), result in zip(pairs, results):
        np.testing.assert_allclose(ok(result).output("OUTPUT0").data, a + b, rtol=1e-6)
        np.testing.assert_allclose(ok(result).output("OUTPUT1").data, a - b, rtol=1e-6)


def test_graphdef_with_a_complete_config(tmp_path: Path) -> None:
    config = ('platform: "tensorflow_graphdef"\nmax_batch_size: 8\n'
              'input [{ name: "X" data_type: TYPE_FP32 dims: [3] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [3] }]')
    backend = load(graphdef_folder(tmp_path, "m", config))
    assert (backend.context.config.backend, backend.context.config.default_model_filename) == ("tensorflow", "model.graphdef")
    x = RNG.random((2, 3), dtype=np.float32)
    np.testing.assert_allclose(ok(backend.execute([request(X=x)])[0]).output("Y").data, x * 2 + 1, rtol=1e-6)


def test_backend_tensorflow_without_platform_finds_the_graphdef(tmp_path: Path) -> None:
    config = ('backend: "tensorflow"\nmax_batch_size: 8\n'
              'input [{ name: "X" data_type: TYPE_FP32 dims: [3] }]\noutput [{ name: "Y" data_type: TYPE_FP32 dims: [3] }]')
    backend = load(graphdef_folder(tmp_path, "m", config))
    assert backend.context.config.platform == "tensorflow_graphdef"


def test_graphdef_config_naming_a_missing_node_fails_the_load(tmp_path: Path) -> None:
    config = ('platform: "tensorflow_graphdef"\nmax_batch_size: 8\n'
              'input [{ name: "X" data_type: TYPE_FP32 dims: [3] }]\noutput [{ name: "Z" data_type: TYPE_FP32 dims: [3] }]')
    with pytest.raises(ServerError, match="configuration expects output 'Z', which is not a node of the graph"):
        load(graphdef_folder(tmp_path, "m", config))


def test_string_tensors(tmp_path: Path) -> None:
    backend = load(savedmodel_folder(tmp_path, "m", Strings(), None))
    assert backend.context.config.input[0].data_type == mc.TYPE_STRING
    text = np.array([[b"hello"], ["w\u00f6rld".encode()]], dtype=np.object_)
    out = ok(backend.execute([request(TEXT=text)])[0]).output("UPPER")
    assert out.datatype == "BYTES" and out.data.tolist() == [[b"HELLO"], ["W\u00f6RLD".encode()]]


def test_a_failing_run_fails_only_its_group(tmp_path: Path) -> None:
    backend = load(savedmodel_folder(tmp_path, "m", RowTimesMatrix(), None))
    results = backend.execute([request(INPUT0=np.ones((1, 4), np.float32)), request(INPUT0=np.ones((2, 3), np.float32))])
    assert isinstance(results[0], ServerError) and results[0].code is ErrorCode.INTERNAL
    assert "InvalidArgumentError" in results[0].message  # TensorFlow's reason reaches the client
    np.testing.assert_array_equal(ok(results[1]).output("OUTPUT0").data, np.full((2, 2), 3, np.float32))


def test_unknown_signature_fails_the_load(tmp_path: Path) -> None:
    config = 'platform: "tensorflow_savedmodel"\nparameters { key: "TF_SIGNATURE_DEF" value { string_value: "other" } }'
    with pytest.raises(ServerError, match="signature 'other' not found; the model has: serving_default"):
        load(savedmodel_folder(tmp_path, "m", AddSub(), config))


async def test_served_over_grpc_and_http_with_dynamic_batching(tmp_path: Path, running) -> None:
    savedmodel_folder(tmp_path, "tf_add_sub", AddSub(),
                      'platform: "tensorflow_savedmodel"\nmax_batch_size: 16\n'
                      'instance_group [{ kind: KIND_CPU, count: 1 }]\ndynamic_batching { max_queue_delay_microseconds: 200000 }')
    async with running(tmp_path) as server:
        config = await check_add_sub_batched(server, "tf_add_sub")
        assert config["platform"] == "tensorflow_savedmodel"


ACCUMULATOR = """
platform: "tensorflow_savedmodel"
max_batch_size: 16
sequence_batching {
  oldest { max_candidate_sequences: 16 preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2000 }
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
            initial_state { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
"""


async def test_savedmodel_with_implicit_state_over_grpc_stream(tmp_path: Path, running) -> None:
    model_dir = savedmodel_folder(tmp_path, "tf_accumulator", Accumulator(), ACCUMULATOR)
    config = complete_config(read_config(model_dir), model_dir, [1])
    assert [i.name for i in config.input] == ["INPUT"] and [o.name for o in config.output] == ["OUTPUT"]
    sequences, steps = 6, 3
    requests = []
    for step in range(steps):
        for seq in range(sequences):
            inputs = [grpc_aio.InferInput("INPUT", [1, 1], "FP32")]
            inputs[0].set_data_from_numpy(np.array([[seq + 1]], np.float32))
            requests.append(dict(model_name="tf_accumulator", inputs=inputs, request_id=f"{seq}:{step}",
                                 sequence_id=100 + seq, sequence_start=step == 0, sequence_end=step == steps - 1))

    async def iterate():
        for item in requests:
            yield item

    async with running(tmp_path, allow_http=False) as server:
        client = grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            got = {}
            async for result, error in client.stream_infer(iterate()):
                assert error is None, error
                got[result.get_response().id] = float(result.as_numpy("OUTPUT")[0, 0])
                if len(got) == len(requests):
                    break
            assert got == {f"{seq}:{step}": float((seq + 1) * (step + 1)) for seq in range(sequences) for step in range(steps)}
        finally:
            await client.close()
