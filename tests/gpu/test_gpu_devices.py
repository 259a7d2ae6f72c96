"""asr_server.gpu.devices: which GPUs the server sees, KIND_AUTO resolving to one, and Triton's GPU gauges.

Without a GPU the NVML path is exercised with a stand-in `pynvml` module (fixed device answers), which checks
the index mapping and the metric lines' format; the real NVML/torch answers are checked where a GPU exists.
"""

from __future__ import annotations

import sys
import types

import pytest

from asr_server.gpu import devices as gpu_devices
from asr_server.metrics import render


@pytest.fixture(autouse=True)
def fresh_cache():
    gpu_devices.visible_gpus.cache_clear()
    yield
    gpu_devices.visible_gpus.cache_clear()


def fake_nvml(monkeypatch, tmp_path, count: int) -> None:
    """Pretend a driver with `count` GPUs is loaded and NVML answers for them."""
    proc = tmp_path / "gpus"
    for index in range(count):
        (proc / f"0000:0{index}:00.0").mkdir(parents=True)
    monkeypatch.setattr(gpu_devices, "NVIDIA_PROC", proc)
    memory = types.SimpleNamespace(total=8 << 30, used=1 << 30)
    module = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: count, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"Fake GPU", nvmlDeviceGetUUID=lambda h: f"GPU-uuid-{h}",
        nvmlDeviceGetMemoryInfo=lambda h: memory,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=25 * (h + 1)))
    monkeypatch.setitem(sys.modules, "pynvml", module)


def test_no_driver_means_no_gpus_and_no_gpu_metrics(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_devices, "NVIDIA_PROC", tmp_path / "absent")
    assert gpu_devices.visible_gpus() == ()
    assert gpu_devices.gpu_metric_lines() == [] and gpu_devices.describe_gpus() == []


def test_cuda_visible_devices_maps_to_physical_indices(monkeypatch, tmp_path):
    fake_nvml(monkeypatch, tmp_path, 3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert gpu_devices.visible_gpus() == (0, 1)
    lines = gpu_devices.gpu_metric_lines()
    assert 'nv_gpu_utilization{gpu_uuid="GPU-uuid-2"} 0.75' in lines  # device 0 is physical GPU 2
    assert 'nv_gpu_memory_used_bytes{gpu_uuid="GPU-uuid-0"} 1073741824' in lines
    assert "# TYPE nv_gpu_memory_total_bytes gauge" in lines
    assert gpu_devices.describe_gpus() == ["GPU 0: Fake GPU, 8192 MiB", "GPU 1: Fake GPU, 8192 MiB"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    gpu_devices.visible_gpus.cache_clear()
    assert gpu_devices.visible_gpus() == ()


async def test_kind_auto_picks_a_gpu_and_metrics_list_it(monkeypatch, tmp_path, running):
    fake_nvml(monkeypatch, tmp_path, 1)
    repo = tmp_path / "repo"
    (repo / "identity" / "1").mkdir(parents=True)
    (repo / "identity" / "1" / "model.py").write_text(
        "import triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        return [pb_utils.InferenceResponse([pb_utils.Tensor('OUT', pb_utils.get_input_tensor_by_name(r, 'IN')"
        ".as_numpy())]) for r in requests]\n")
    (repo / "identity" / "config.pbtxt").write_text(
        'name: "identity" backend: "python" max_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ] output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        "instance_group [ { kind: KIND_AUTO } ]\n")
    async with running(repo, allow_http=False) as server:
        config = server.core.manager.models["identity"].versions[1].config
        assert [(g.kind, list(g.gpus)) for g in config.instance_group] == [(1, [0])]  # KIND_GPU on GPU 0
        text = render(server.core.manager)
    assert 'nv_gpu_utilization{gpu_uuid="GPU-uuid-0"} 0.25' in text


@pytest.mark.gpu
def test_a_real_gpu_is_listed():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    assert len(gpu_devices.visible_gpus()) == torch.cuda.device_count()
    assert gpu_devices.describe_gpus()[0].startswith("GPU 0: ")
