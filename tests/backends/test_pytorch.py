"""The pytorch backend on tiny TorchScript modules: Triton's naming conventions, batching, errors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from asr_server import dtypes
from asr_server.backends.base import ModelContext
from asr_server.backends.pytorch import PyTorchBackend, order_inputs
from asr_server.errors import ErrorCode, ServerError
from asr_server.repository import complete_config, read_config
from asr_server.messages import InferResponse
from tests.helpers.backend_calls import request

torch = pytest.importorskip("torch", reason="the pytorch backend needs torch")


class AddSub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


class Difference(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a - b


class SumAndProduct(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"SUM": x + y, "PRODUCT": x * y}


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


class RowTimesMatrix(torch.nn.Module):
    """Fails at run time unless the row length is 3."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3, 2), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def io(kind: str, name: str, data_type: str = "TYPE_FP32", dims: str = "[ -1 ]") -> str:
    return f'{kind} [{{ name: "{name}" data_type: {data_type} dims: {dims} }}]\n'


def load(tmp_path: Path, module: torch.nn.Module, config_text: str) -> PyTorchBackend:
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    torch.jit.script(module).save(str(model_dir / "1" / "model.pt"))
    (model_dir / "config.pbtxt").write_text('backend: "pytorch"\n' + config_text)
    config = complete_config(read_config(model_dir), model_dir, [1])
    backend = PyTorchBackend(ModelContext("m", 1, config, model_dir, model_dir / "1", instance_name="m_0"))
    backend.load()
    return backend



def ok(result) -> InferResponse:
    assert isinstance(result, InferResponse), result
    return result


ADD_SUB_CONFIG = (
    "max_batch_size: 8\n" + io("input", "INPUT__0") + io("input", "INPUT__1")
    + io("output", "OUTPUT__0") + io("output", "OUTPUT__1")
)


def test_indexed_names_with_batching_concat_and_split(tmp_path: Path) -> None:
    backend = load(tmp_path, AddSub(), ADD_SUB_CONFIG)
    rng = np.random.default_rng(0)
    pairs = [(rng.random((n, 5), dtype=np.float32), rng.random((n, 5), dtype=np.float32)) for n in (2, 1, 3)]
    results = backend.execute([request(INPUT__0=a, INPUT__1=b) for a, b in pairs])
    for (a, b), result in zip(pairs, results):
        response = ok(result)
        np.testing.assert_allclose(response.output("OUTPUT__0").data, a + b, rtol=1e-6)
        np.testing.assert_allclose(response.output("OUTPUT__1").data, a - b, rtol=1e-6)


def test_index_suffix_orders_inputs_whatever_the_config_order(tmp_path: Path) -> None:
    config = "max_batch_size: 4\n" + io("input", "IN__1") + io("input", "IN__0") + io("output", "OUT__0")
    backend = load(tmp_path, Difference(), config)
    result = backend.execute([request(IN__0=np.full((1, 2), 5, np.float32), IN__1=np.ones((1, 2), np.float32))])[0]
    np.testing.assert_array_equal(ok(result).output("OUT__0").data, np.full((1, 2), 4, np.float32))


def test_forward_argument_names_order_inputs(tmp_path: Path) -> None:
    config = "max_batch_size: 4\n" + io("input", "b") + io("input", "a") + io("output", "diff")
    backend = load(tmp_path, Difference(), config)
    result = backend.execute([request(a=np.full((1, 2), 5, np.float32), b=np.ones((1, 2), np.float32))])[0]
    np.testing.assert_array_equal(ok(result).output("diff").data, np.full((1, 2), 4, np.float32))


def test_order_inputs_falls_back_to_config_order() -> None:
    assert order_inputs(["Y", "X"], ["a", "b"]) == ["Y", "X"]
    assert order_inputs(["in__2", "in__0", "in__1"], []) == ["in__0", "in__1", "in__2"]


def test_dict_output_maps_by_key(tmp_path: Path) -> None:
    config = "max_batch_size: 4\n" + io("input", "INPUT__0") + io("input", "INPUT__1") + io("output", "SUM") + io("output", "PRODUCT")
    backend = load(tmp_path, SumAndProduct(), config)
    x, y = np.full((1, 3), 2, np.float32), np.full((1, 3), 3, np.float32)
    response = ok(backend.execute([request(INPUT__0=x, INPUT__1=y)])[0])
    np.testing.assert_array_equal(response.output("SUM").data, x + y)
    np.testing.assert_array_equal(response.output("PRODUCT").data, x * y)


def test_a_failing_run_fails_only_its_group(tmp_path: Path) -> None:
    config = "max_batch_size: 4\n" + io("input", "INPUT__0") + io("output", "OUTPUT__0")
    backend = load(tmp_path, RowTimesMatrix(), config)
    results = backend.execute([request(INPUT__0=np.ones((1, 4), np.float32)), request(INPUT__0=np.ones((2, 3), np.float32))])
    assert isinstance(results[0], ServerError) and results[0].code is ErrorCode.INTERNAL
    assert "RuntimeError" in results[0].message
    np.testing.assert_array_equal(ok(results[1]).output("OUTPUT__0").data, np.full((2, 2), 3, np.float32))


@pytest.mark.parametrize(
    ("data_type", "data"),
    [
        ("TYPE_FP16", np.array([[0.5, -2.0]], np.float16)),
        ("TYPE_INT64", np.array([[2**40, -7]], np.int64)),
        ("TYPE_BOOL", np.array([[True, False]])),
        ("TYPE_INT32", np.array([[1, -1]], np.int32)),
    ],
)
def test_datatypes_round_trip(tmp_path: Path, data_type: str, data: np.ndarray) -> None:
    config = "max_batch_size: 4\n" + io("input", "INPUT__0", data_type) + io("output", "OUTPUT__0", data_type)
    backend = load(tmp_path, Identity(), config)
    read_only = data.copy()
    read_only.flags.writeable = False  # as arrays over received wire bytes are
    out = ok(backend.execute([request(INPUT__0=read_only)])[0]).output("OUTPUT__0")
    assert out.data.dtype == data.dtype and out.datatype == dtypes.wire_name(data.dtype)
    np.testing.assert_array_equal(out.data, data)


def test_non_batching_model(tmp_path: Path) -> None:
    config = io("input", "INPUT__0", dims="[ 2, 2 ]") + io("output", "OUTPUT__0", dims="[ 2, 2 ]")
    backend = load(tmp_path, Identity(), config)
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    np.testing.assert_array_equal(ok(backend.execute([request(INPUT__0=data)])[0]).output("OUTPUT__0").data, data)


def test_bytes_input_is_a_clear_error(tmp_path: Path) -> None:
    config = "max_batch_size: 4\n" + io("input", "INPUT__0") + io("output", "OUTPUT__0")
    backend = load(tmp_path, Identity(), config)
    result = backend.execute([request(INPUT__0=np.array([[b"x"]], dtype=np.object_))])[0]
    assert isinstance(result, ServerError) and result.code is ErrorCode.INVALID_ARGUMENT
    assert result.message == "input 'INPUT__0' of model 'm': the pytorch backend takes no BYTES"


def test_too_few_returned_outputs(tmp_path: Path) -> None:
    config = "max_batch_size: 4\n" + io("input", "INPUT__0") + io("output", "OUTPUT__0") + io("output", "OUTPUT__1")
    backend = load(tmp_path, Identity(), config)
    result = backend.execute([request(INPUT__0=np.ones((1, 1), np.float32))])[0]
    assert isinstance(result, ServerError)
    assert result.message == "model 'm' returned 1 output(s), no element 1 for 'OUTPUT__1'"


def test_thread_count_parameter(tmp_path: Path) -> None:
    before = torch.get_num_threads()
    try:
        config = 'parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }\n'
        load(tmp_path, Identity(), config + io("input", "INPUT__0") + io("output", "OUTPUT__0"))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("value, optimized", [(None, True), ("true", False), ("false", True)])
def test_disable_optimized_execution_parameter(tmp_path: Path, value, optimized) -> None:
    """Triton's DISABLE_OPTIMIZED_EXECUTION: the module runs with TorchScript's graph optimiser off."""
    config = f'parameters {{ key: "DISABLE_OPTIMIZED_EXECUTION" value {{ string_value: "{value}" }} }}\n' if value else ""
    backend = load(tmp_path, Identity(), "max_batch_size: 4\n" + config + io("input", "INPUT__0") + io("output", "OUTPUT__0"))
    seen = []
    scripted = backend.module

    def recording(*tensors):
        seen.append(torch._C._get_graph_executor_optimize())  # the flag torch.jit.optimized_execution sets
        return scripted(*tensors)

    backend.module = recording
    data = np.ones((1, 2), np.float32)
    np.testing.assert_array_equal(ok(backend.execute([request(INPUT__0=data)])[0]).output("OUTPUT__0").data, data)
    assert seen == [optimized]
    assert torch._C._get_graph_executor_optimize()  # restored after the call


def test_missing_torch_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    context = ModelContext("m", 1, mc.ModelConfig(name="m", backend="pytorch", default_model_filename="model.pt"),
                           model_dir, model_dir / "1")
    with pytest.raises(ServerError, match=r"the pytorch backend needs torch, which is not installed here") as caught:
        PyTorchBackend(context).load()
    assert caught.value.code is ErrorCode.INTERNAL
