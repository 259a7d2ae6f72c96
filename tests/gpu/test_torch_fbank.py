"""asr_server.asr.features.torch_fbank.TorchFbank equals kaldi-native-fbank (features.fbank) on CPU, and on CUDA where
a GPU is present."""

from __future__ import annotations

import numpy as np
import pytest

from asr_server.asr.features.fbank import fbank

torch = pytest.importorskip("torch", reason="TorchFbank needs torch (the 'torch' extra)")

from asr_server.asr.features.torch_fbank import TorchFbank  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4  # kaldi-native-fbank computes in float32 frame by frame; this in float64 (values up to ~25)


def waveforms() -> list[np.ndarray]:
    from asr_client.audio import load_audio
    from asr_server.gpu.engine_check import DATA

    rng = np.random.default_rng(7)
    speech = [load_audio(path).samples for path in sorted(DATA.glob("*.flac"))[:2]]
    return speech + [rng.uniform(-0.5, 0.5, 16000).astype(np.float32),  # noise, 1 s
                     rng.uniform(-0.1, 0.1, 400).astype(np.float32),  # exactly one window
                     np.zeros(399, np.float32),  # shorter than a window: no frame
                     np.zeros(4000, np.float32)]  # silence: the log floor


def assert_matches_kaldi(device: str) -> None:
    inputs = waveforms()
    got = TorchFbank(device=device)(inputs)
    assert len(got) == len(inputs)
    for waveform, features in zip(inputs, got):
        want = fbank(waveform)
        assert features.shape == want.shape and features.dtype == np.float32
        np.testing.assert_allclose(features, want, rtol=RTOL, atol=ATOL)


def test_torch_fbank_equals_kaldi_native_fbank_on_cpu():
    assert_matches_kaldi("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")
def test_torch_fbank_equals_kaldi_native_fbank_on_cuda():
    assert_matches_kaldi("cuda")
