"""Kaldi fbank in torch, batched, on any torch device (the GPU feature path when kaldifeat is not installed).

Written by hand because kaldifeat builds from source and torchaudio (whose compliance.kaldi.fbank would do)
is not a dependency of this project. It is the algorithm of `fbank.NumpyFbank` (DC removal per frame,
pre-emphasis 0.97, Povey window, power spectrum of the next power of two, Kaldi's mel banks, natural log with
float epsilon floor) and reuses NumpyFbank's mel banks, so the two cannot drift apart. Checked against
kaldi-native-fbank on CPU (tests/gpu/test_torch_fbank.py); the CUDA run is in scripts/gpu_check.sh.

__call__: waveforms as `fbank.fbank` takes them -> one (num_frames, num_mel_bins) float32 numpy array each.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from asr_server.asr.features.fbank import _FLT_EPSILON, FbankConfig, NumpyFbank, apply_noise_floor


class TorchFbank:
    """Batched Kaldi fbank on `device` ("cpu", "cuda", "cuda:1")."""

    def __init__(self, config: FbankConfig = FbankConfig(), device: str = "cpu"):
        import torch

        self._torch = torch
        self.config = config
        self.device = torch.device(device)
        reference = NumpyFbank(config)  # its window and mel banks, computed once in float64
        self.fft_size = reference.fft_size
        self.window = torch.from_numpy(reference.window).to(self.device, torch.float64)
        banks = reference._mel_banks()  # (num_mel_bins, fft_size // 2 + 1)
        self.banks_t = torch.from_numpy(np.ascontiguousarray(banks.T)).to(self.device, torch.float64)

    def __call__(self, waveforms: Sequence[np.ndarray]) -> list[np.ndarray]:
        torch, c = self._torch, self.config
        n, shift = c.window_samples, c.shift_samples
        counts = [c.num_frames(np.size(w)) for w in waveforms]
        if not sum(counts):
            return [np.zeros((0, c.num_mel_bins), np.float32) for _ in waveforms]
        frames = []
        for w, count in zip(waveforms, counts):
            if count:
                x = torch.from_numpy(c.input_samples(w)).to(self.device, torch.float64)
                frames.append(x.unfold(0, n, shift)[:count])  # (count, n), a view: no copy
        z = torch.cat(frames)  # (frames of every waveform, n)
        z = z - z.mean(dim=1, keepdim=True)
        # Kaldi's per-frame pre-emphasis: y_j = z_j - p z_{j-1}, and y_0 = z_0 - p z_0.
        previous = torch.cat([z[:, :1], z[:, :-1]], dim=1)
        z = (z - NumpyFbank.PREEMPHASIS * previous) * self.window
        power = torch.fft.rfft(z, n=self.fft_size).abs().square()
        feats = torch.log(torch.clamp(power @ self.banks_t, min=_FLT_EPSILON)).to(torch.float32).cpu().numpy()
        apply_noise_floor(feats, c)
        return list(np.split(feats, np.cumsum(counts)[:-1]))
