"""Kaldi-compatible log-mel filterbank features, as WeNet computes them.

WeNet's ``compute_fbank`` scales float samples in [-1, 1] to the int16 range (Kaldi's convention) and calls
Kaldi fbank with dither 0 at inference, 25 ms windows, 10 ms shift and ``snip_edges=True``; these defaults
reproduce that, so a WeNet checkpoint sees the features it was trained on.

One addition (``FbankConfig.noise_floor``): every log-mel energy is floored at that of 16-bit rounding noise.
Audio resampled in float from 8 or 11.025 kHz has an upper band emptier than any 16-bit file holds; with dither 0
its log energies there fall to log(float epsilon), far outside what a model saw in training, and an 8 kHz call
came out as garbage while the same audio saved as 16-bit was heard. With the floor both give the same features,
whichever client resampled; above that level (all real recordings) nothing changes. The floor is elementwise, so
streaming features still equal whole-utterance ones.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Sequence

import kaldi_native_fbank as knf
import numpy as np

INT16_SCALE = 32768.0  # WeNet multiplies [-1, 1] samples by 1 << 15 before fbank
_FLT_EPSILON = float(np.finfo(np.float32).eps)  # Kaldi's log floor
# Frames per FFT call in NumpyFbank: 128 frames' samples and spectra take ~1 MB; a whole round of 16 chunks
# (6 MB) spilled out of L2 and cost 1.6x as much per frame here.
FFT_BLOCK_FRAMES = 128


@dataclass(frozen=True)
class FbankConfig:
    sample_rate: int = 16000        # Hz
    num_mel_bins: int = 80          # mel filters = feature dim
    frame_length_ms: float = 25.0   # analysis window
    frame_shift_ms: float = 10.0    # hop
    dither: float = 0.0             # 0 at inference: features are deterministic
    snip_edges: bool = True         # Kaldi/WeNet default; sherpa-onnx uses False
    scale_to_int16: bool = True     # input is float in [-1, 1]; Kaldi expects int16-range values
    noise_floor: bool = True        # log-mel energies floored at 16-bit rounding noise's (module docstring)

    @property
    def window_samples(self) -> int:
        return int(self.sample_rate * self.frame_length_ms / 1000)

    @property
    def shift_samples(self) -> int:
        return int(self.sample_rate * self.frame_shift_ms / 1000)

    def num_frames(self, num_samples: int) -> int:
        """Frames produced by ``num_samples`` samples (snip_edges semantics when ``snip_edges``)."""
        if self.snip_edges:
            if num_samples < self.window_samples:
                return 0
            return 1 + (num_samples - self.window_samples) // self.shift_samples
        return (num_samples + self.shift_samples // 2) // self.shift_samples

    def input_samples(self, waveform: np.ndarray) -> np.ndarray:
        """(num_samples,) float32 as the fbank libraries take them: scaled to int16 range if configured."""
        samples = np.asarray(waveform, dtype=np.float32).reshape(-1)
        return samples * INT16_SCALE if self.scale_to_int16 else samples

    def knf_options(self) -> knf.FbankOptions:
        return self.fill_options(knf.FbankOptions())

    def fill_options(self, opts):
        """Set these values on a Kaldi-style ``FbankOptions`` (kaldi-native-fbank's and kaldifeat's share the
        field names); returns it."""
        opts.frame_opts.samp_freq = float(self.sample_rate)
        opts.frame_opts.frame_length_ms = self.frame_length_ms
        opts.frame_opts.frame_shift_ms = self.frame_shift_ms
        opts.frame_opts.dither = self.dither
        opts.frame_opts.snip_edges = self.snip_edges
        opts.mel_opts.num_bins = self.num_mel_bins
        # WeNet passes energy_floor=0.0 (torchaudio's default is 1.0); only matters with use_energy.
        opts.energy_floor = 0.0
        return opts


NOISE_FLOOR_SECONDS = 20  # of seeded rounding noise measured for the floor (2,000 frames: a smooth mean)


@functools.lru_cache(maxsize=8)
def rounding_noise_floor(config: FbankConfig) -> np.ndarray:
    """(num_mel_bins,) float32: the log of the mean mel energies of 16-bit rounding noise (uniform in +-0.5 of
    one int16 step), as these options compute them."""
    plain = dataclasses.replace(config, noise_floor=False)
    noise = np.random.default_rng(0).uniform(-0.5, 0.5, config.sample_rate * NOISE_FLOOR_SECONDS)
    if config.scale_to_int16:
        noise = noise / INT16_SCALE
    energies = np.exp(fbank(noise.astype(np.float32), plain).astype(np.float64)).mean(axis=0)
    return np.log(energies).astype(np.float32)


def apply_noise_floor(feats: np.ndarray, config: FbankConfig) -> np.ndarray:
    """``feats`` (frames, num_mel_bins) log-mel, floored in place when the config asks for it; returned."""
    if config.noise_floor and feats.size:
        np.maximum(feats, rounding_noise_floor(config), out=feats)
    return feats


def checked_waveform(samples: np.ndarray, length: int) -> np.ndarray:
    """The first `length` samples of a request's audio, or ValueError in the client's terms (WAV, WAV_LENS).

    samples: (N,) the WAV row as sent (WeNet's client zero-pads chunks to a fixed size); length: its WAV_LENS.
    """
    if not 0 <= length <= samples.size:
        raise ValueError(f"WAV_LENS is {length}, outside [0, {samples.size}] (the samples sent in WAV)")
    valid = samples[:length]
    if not np.isfinite(valid).all():
        raise ValueError("WAV holds NaN or infinite samples")
    return valid


def fbank(waveform: np.ndarray, config: FbankConfig = FbankConfig()) -> np.ndarray:
    """Fbank of one utterance.

    waveform: (num_samples,) float samples in [-1, 1] (or int16-range floats if ``not config.scale_to_int16``)
    returns:  (num_frames, num_mel_bins) float32
    """
    samples = config.input_samples(waveform)
    computer = knf.OnlineFbank(config.knf_options())
    computer.accept_waveform(float(config.sample_rate), samples)
    computer.input_finished()
    n = computer.num_frames_ready
    if n == 0:
        return np.zeros((0, config.num_mel_bins), dtype=np.float32)
    feats = np.stack([computer.get_frame(i) for i in range(n)]).astype(np.float32, copy=False)
    return apply_noise_floor(feats, config)


def batch_fbank(waveforms: Sequence[np.ndarray], config: FbankConfig = FbankConfig(),
                pad_value: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Fbank of several utterances, zero-padded into one batch.

    returns: feats (B, T_max, num_mel_bins) float32, feat_lens (B,) int32
    """
    feats = [fbank(w, config) for w in waveforms]
    lens = np.array([f.shape[0] for f in feats], dtype=np.int32)
    out = np.full((len(feats), int(lens.max(initial=0)), config.num_mel_bins), pad_value, dtype=np.float32)
    for i, f in enumerate(feats):
        out[i, : f.shape[0]] = f
    return out, lens


def _frames_into(x, count, n, shift, p, window, z, row):
    """z[row + f] = frame f of samples x as Kaldi prepares it for the FFT: n samples from f * shift, their mean
    removed, pre-emphasised (y_j = x'_j - p x'_{j-1}, y_0 = (1 - p) x'_0), windowed, zero-padded to z's width.
    One pass per frame (numpy needed five over the whole batch, and a Python loop per waveform)."""
    for f in range(count):
        s = f * shift
        m = 0.0
        for j in range(n):
            m += x[s + j]
        m /= n
        prev = x[s] - m
        z[row + f, 0] = (1.0 - p) * prev * window[0]
        for j in range(1, n):
            cur = x[s + j] - m
            z[row + f, j] = (cur - p * prev) * window[j]
            prev = cur
        for j in range(n, z.shape[1]):
            z[row + f, j] = 0.0


def _mel_energies(spectrum, index, weight, start, stop, out):
    """out (F, bins) = the mel energies of the power spectrum of `spectrum` (F, fft/2+1) complex, the banks
    given as runs index[start[b]:stop[b]] with their weights."""
    for f in range(spectrum.shape[0]):
        for b in range(start.size):
            acc = 0.0
            for k in range(start[b], stop[b]):
                v = spectrum[f, index[k]]
                acc += (v.real * v.real + v.imag * v.imag) * weight[k]
            out[f, b] = acc


try:  # compiled: these loops are the fbank's cost beside the FFT (no numpy routine does either in one pass)
    from numba import njit

    _frames_into = njit(cache=True, nogil=True)(_frames_into)
    _mel_energies = njit(cache=True, nogil=True)(_mel_energies)
except ImportError:  # pragma: no cover - numba is a dependency; the loops still give the same numbers
    pass


class NumpyFbank:
    """Kaldi's fbank (the algorithm of ``fbank``: DC removal, pre-emphasis 0.97, Povey window, 512-point power
    spectrum, Kaldi's triangular mel banks, natural log) over every frame of every waveform of a call: frames
    prepared and mel-weighted by compiled loops, numpy FFTs over blocks of frames of the whole batch; several times
    cheaper than kaldi-native-fbank's frame-by-frame loop. It agrees with kaldi-native-fbank to float32
    rounding.

    __call__: waveforms as ``fbank`` takes them -> one (num_frames, num_mel_bins) float32 array each.
    """

    PREEMPHASIS = 0.97  # Kaldi's preemph_coeff default

    def __init__(self, config: FbankConfig = FbankConfig()):
        if not config.snip_edges:
            raise ValueError("NumpyFbank implements snip_edges=True framing only")
        self.config = config
        n = config.window_samples
        self.fft_size = 1 << (n - 1).bit_length()  # Kaldi's round_to_power_of_two
        self.window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / (n - 1))) ** 0.85  # Povey
        # The banks as a sparse product (each bin's triangle is a contiguous run of FFT bins): numpy's matmul
        # would call a multi-threaded BLAS, whose thread wake-ups cost more than this product on a busy host.
        banks = self._mel_banks()
        runs = [np.flatnonzero(row) for row in banks]
        self._mel_index = np.concatenate(runs)
        self._mel_weight = np.concatenate([banks[b, r] for b, r in enumerate(runs)])
        self._mel_stop = np.cumsum([r.size for r in runs])
        self._mel_start = self._mel_stop - [r.size for r in runs]

    def _mel_banks(self) -> np.ndarray:
        """Kaldi's MelBanks: triangles equally spaced on the mel scale between 20 Hz and Nyquist, weights taken
        at the FFT bins' frequencies (the Nyquist bin gets none)."""
        def mel(f):
            return 1127.0 * np.log(1.0 + f / 700.0)

        c = self.config
        bins = self.fft_size // 2
        low, high = mel(20.0), mel(0.5 * c.sample_rate)
        delta = (high - low) / (c.num_mel_bins + 1)
        freqs = mel(np.arange(bins) * c.sample_rate / self.fft_size)
        left = low + np.arange(c.num_mel_bins)[:, None] * delta
        center, right = left + delta, left + 2 * delta
        up = (freqs - left) / (center - left)
        down = (right - freqs) / (right - center)
        weights = np.where((freqs > left) & (freqs < right), np.where(freqs <= center, up, down), 0.0)
        return np.concatenate([weights, np.zeros((c.num_mel_bins, 1))], axis=1)

    def __call__(self, waveforms: Sequence[np.ndarray]) -> list[np.ndarray]:
        c = self.config
        counts = [c.num_frames(np.size(w)) for w in waveforms]
        total = sum(counts)
        if not total:
            return [np.zeros((0, c.num_mel_bins), dtype=np.float32) for _ in waveforms]
        z = np.empty((total, self.fft_size))
        row = 0
        for w, count in zip(waveforms, counts):
            if count:
                _frames_into(c.input_samples(w), count, c.window_samples, c.shift_samples, self.PREEMPHASIS,
                             self.window, z, row)
                row += count
        feats = np.empty((total, c.num_mel_bins), dtype=np.float32)
        for block in range(0, total, FFT_BLOCK_FRAMES):  # frames and spectra stay in the core's L2 cache
            rows = slice(block, block + FFT_BLOCK_FRAMES)
            _mel_energies(np.fft.rfft(z[rows]), self._mel_index, self._mel_weight, self._mel_start,
                          self._mel_stop, feats[rows])
        # numpy's float32 log is vectorised (SIMD); Kaldi floors the energies at float epsilon first
        np.log(np.maximum(feats, _FLT_EPSILON, out=feats), out=feats)
        apply_noise_floor(feats, c)
        return list(np.split(feats, np.cumsum(counts)[:-1]))


class KaldifeatFbank:
    """Batched fbank with kaldifeat (torch; on a CUDA device for GPU feature extraction), same options as
    ``fbank``. kaldifeat is optional (it builds from source); import errors surface when this is built.

    __call__: waveforms as ``fbank`` takes them -> one (num_frames, num_mel_bins) float32 array each.
    """

    def __init__(self, config: FbankConfig = FbankConfig(), device: str = "cpu"):
        import kaldifeat
        import torch

        self._torch = torch
        self.config = config
        self.device = torch.device(device)
        opts = config.fill_options(kaldifeat.FbankOptions())
        opts.device = self.device
        self._compute = kaldifeat.Fbank(opts)

    def __call__(self, waveforms: Sequence[np.ndarray]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = []
        batch, where = [], []
        for w in waveforms:
            samples = self.config.input_samples(w)
            if self.config.num_frames(samples.size) == 0:  # no whole window: nothing for kaldifeat to do
                out.append(np.zeros((0, self.config.num_mel_bins), dtype=np.float32))
                continue
            where.append(len(out))
            out.append(None)
            batch.append(self._torch.from_numpy(samples).to(self.device))
        if batch:
            with self._torch.no_grad():
                feats = self._compute(batch)  # one batched call for every utterance
            for i, f in zip(where, feats):
                out[i] = apply_noise_floor(f.to("cpu").numpy().astype(np.float32), self.config)
        return out


def batch_fbank_computer(backend: str, config: FbankConfig, device: str = "cpu"):
    """A function waveforms -> fbank arrays: "kaldi-native-fbank" (CPU, the default), "numpy" (the same
    features, batched: what the serving configs use) or "kaldifeat"."""
    if backend == "kaldifeat":
        return KaldifeatFbank(config, device)
    if backend == "numpy":
        return NumpyFbank(config)
    if backend == "kaldi-native-fbank":
        return lambda waveforms: [fbank(w, config) for w in waveforms]
    raise ValueError(f"unknown fbank backend '{backend}' (kaldi-native-fbank, numpy or kaldifeat)")


class StreamingFbank:
    """Per-stream fbank buffer: accepts audio of any length, emits frames identical to the whole-utterance fbank.

    With dither 0 every Kaldi frame depends only on its own window of samples, so computing fbank over a buffer
    that starts on a frame boundary gives bit-identical frames; we keep the samples from the start of the first
    frame that is not yet complete (the "residual") and drop the rest.
    """

    def __init__(self, config: FbankConfig = FbankConfig()):
        if not config.snip_edges:
            # Without snip_edges the first frames reflect samples around t=0 and the last ones depend on the
            # end of the utterance, so incremental output would not equal the full fbank.
            raise ValueError("StreamingFbank needs snip_edges=True")
        self.config = config
        self._residual = np.zeros(0, dtype=np.float32)  # (n,) samples not yet consumed by complete frames
        self.num_frames_emitted = 0                     # frames returned so far

    def take(self, samples: np.ndarray) -> np.ndarray:
        """Append samples; returns the samples whose fbank is exactly the frames that became complete (empty
        when none did), so a caller can featurise many streams' samples in one batched call."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        buf = np.concatenate([self._residual, samples]) if self._residual.size else samples
        n = self.config.num_frames(buf.size)
        if n == 0:
            self._residual = buf.copy()
            return np.zeros(0, dtype=np.float32)
        used = self.config.window_samples + (n - 1) * self.config.shift_samples
        self._residual = buf[n * self.config.shift_samples:].copy()
        self.num_frames_emitted += n
        return buf[:used]

    def accept_waveform(self, samples: np.ndarray) -> np.ndarray:
        """Append samples; returns the frames that became complete: (n_new, num_mel_bins) float32."""
        ready = self.take(samples)
        if ready.size == 0:
            return np.zeros((0, self.config.num_mel_bins), dtype=np.float32)
        return fbank(ready, self.config)

    @property
    def residual_samples(self) -> int:
        return int(self._residual.size)

    def reset(self) -> None:
        self._residual = np.zeros(0, dtype=np.float32)
        self.num_frames_emitted = 0
