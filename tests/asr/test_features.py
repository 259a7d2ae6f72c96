import numpy as np
import pytest

from asr_server.asr.features.cmvn import CmvnStats, load_cmvn, save_json_cmvn
from asr_server.asr.features.fbank import (FbankConfig, rounding_noise_floor, StreamingFbank, batch_fbank, batch_fbank_computer,
                                     checked_waveform, fbank)


def _wave(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def test_fbank_shape_and_frame_count():
    w = _wave(1.0)
    f = fbank(w)
    assert f.shape == (98, 80)  # snip_edges: 1 + (16000 - 400) // 160
    assert FbankConfig().num_frames(16000) == 98
    assert np.isfinite(f).all()


def test_fbank_scales_to_int16_range():
    w = _wave(0.5)
    scaled = fbank(w)
    raw = fbank(w * 32768.0, FbankConfig(scale_to_int16=False))
    np.testing.assert_allclose(scaled, raw, atol=1e-4)
    # log-mel energies of int16-range audio are far above those of [-1, 1] audio: log(32768^2) ~ 20.8
    tiny = fbank(w, FbankConfig(scale_to_int16=False, noise_floor=False))  # amplitude 0.5 of one int16 step
    assert float(np.mean(scaled - tiny)) == pytest.approx(20.8, abs=0.1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_streaming_fbank_equals_full(seed):
    rng = np.random.default_rng(seed)
    w = _wave(1.37, seed)
    full = fbank(w)
    s = StreamingFbank()
    out, i = [], 0
    while i < w.size:
        n = int(rng.integers(1, 2500))
        out.append(s.accept_waveform(w[i:i + n]))
        i += n
    got = np.concatenate(out)
    assert got.shape == full.shape
    assert s.num_frames_emitted == full.shape[0]
    assert np.array_equal(got, full)
    assert s.residual_samples < 400


def test_streaming_fbank_short_input_waits():
    s = StreamingFbank()
    assert s.accept_waveform(np.zeros(399, np.float32)).shape == (0, 80)
    assert s.accept_waveform(np.zeros(1, np.float32)).shape == (1, 80)
    s.reset()
    assert s.residual_samples == 0 and s.num_frames_emitted == 0


def test_batch_fbank_pads():
    feats, lens = batch_fbank([_wave(0.5), _wave(1.0)])
    assert feats.shape == (2, 98, 80)
    assert lens.tolist() == [48, 98]
    assert np.all(feats[0, 48:] == 0)
    np.testing.assert_array_equal(feats[1], fbank(_wave(1.0)))


def test_cmvn_json_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(500, 80))
    st = CmvnStats.zeros(80)
    st.accumulate(x[:200])
    st.accumulate(x[200:])
    save_json_cmvn(st, tmp_path / "global_cmvn")
    back = load_cmvn(tmp_path / "global_cmvn")
    assert back.frame_num == 500
    mean, istd = back.mean_istd()
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(istd, 1 / x.std(0), rtol=1e-4)


def test_cmvn_kaldi_text(tmp_path):
    (tmp_path / "cmvn.ark").write_text(" [\n 2.0 4.0 2\n 4.0 10.0 0 ]\n")
    st = load_cmvn(tmp_path / "cmvn.ark")
    mean, istd = st.mean_istd()
    np.testing.assert_allclose(mean, [1.0, 2.0])
    np.testing.assert_allclose(istd, [1 / np.sqrt(1.0), 1 / np.sqrt(1.0)])


def test_checked_waveform_keeps_wav_lens_samples_and_rejects_bad_audio():
    wav = np.arange(10, dtype=np.float32) / 10
    np.testing.assert_array_equal(checked_waveform(wav, 4), wav[:4])  # zero padding past WAV_LENS is dropped
    assert checked_waveform(wav, 0).size == 0
    with pytest.raises(ValueError, match=r"WAV_LENS is 11, outside \[0, 10\]"):
        checked_waveform(wav, 11)
    with pytest.raises(ValueError, match=r"WAV_LENS is -1"):
        checked_waveform(wav, -1)
    wav[2] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        checked_waveform(wav, 5)
    assert checked_waveform(wav, 2).size == 2  # a bad sample past WAV_LENS is not looked at


def test_batch_fbank_computer_default_is_kaldi_native_fbank():
    waves = [_wave(0.7, 1), _wave(0.01, 2), _wave(1.3, 3)]
    got = batch_fbank_computer("kaldi-native-fbank", FbankConfig())(waves)
    for w, f in zip(waves, got):
        np.testing.assert_array_equal(f, fbank(w))
    with pytest.raises(ValueError, match="unknown fbank backend 'torch'"):
        batch_fbank_computer("torch", FbankConfig())


def _kaldifeat_devices():
    devices = ["cpu"]
    try:
        import torch
        if torch.cuda.is_available():
            devices.append("cuda:0")
    except ImportError:
        pass
    return devices


@pytest.mark.parametrize("device", _kaldifeat_devices())
def test_kaldifeat_matches_kaldi_native_fbank(device):
    pytest.importorskip("kaldifeat", exc_type=ImportError,
                        reason="kaldifeat is optional (GPU feature extraction); it builds from source")
    config = FbankConfig()
    waves = [_wave(2.0, 4), _wave(0.02, 5), _wave(0.9, 6)]  # the second is shorter than one window
    got = batch_fbank_computer("kaldifeat", config, device)(waves)
    for w, f in zip(waves, got):
        want = fbank(w, config)
        assert f.shape == want.shape and f.dtype == np.float32
        np.testing.assert_allclose(f, want, atol=2e-3, rtol=1e-4)


def _interleaved_chunks(waves, seed):
    """(key, samples, start, end) chunks of several streams, interleaved, of random lengths."""
    rng = np.random.default_rng(seed)
    cursors = {key: 0 for key in range(len(waves))}
    chunks = []
    while cursors:
        key = int(rng.choice(sorted(cursors)))
        i = cursors[key]
        n = int(rng.integers(1, 3000))
        end = i + n >= waves[key].size
        chunks.append((key, waves[key][i:i + n], i == 0, end))
        if end:
            del cursors[key]
        else:
            cursors[key] = i + n
    return chunks


def _stream_frames(features, chunks, per_call):
    from collections import defaultdict

    frames = defaultdict(list)
    for at in range(0, len(chunks), per_call):  # groups keep the order, even two chunks of one stream
        group = chunks[at:at + per_call]
        for (key, *_), f in zip(group, features.accept_many(group)):
            frames[key].append(f)
    return {key: np.concatenate(fs) for key, fs in frames.items()}


def test_streaming_features_batch_many_streams_and_equal_each_whole_utterance():
    from asr_server.asr.serving.pipeline import StreamingFeatures

    waves = [_wave(1.3, 7), _wave(0.6, 8), _wave(2.1, 9)]
    calls = []

    def counting(batch):
        calls.append(len(batch))
        return [fbank(w) for w in batch]

    features = StreamingFeatures(FbankConfig(), compute_fbank=counting)
    got = _stream_frames(features, _interleaved_chunks(waves, 0), per_call=3)
    for key, w in enumerate(waves):
        np.testing.assert_array_equal(got[key], fbank(w))
    assert max(calls) > 1          # several streams' samples went through one call
    assert len(features.streams) == 0  # every stream ended and was dropped


@pytest.mark.parametrize("device", _kaldifeat_devices())
def test_streaming_features_with_kaldifeat_match_kaldi_native_fbank(device):
    pytest.importorskip("kaldifeat", exc_type=ImportError,
                        reason="kaldifeat is optional (GPU feature extraction); it builds from source")
    from asr_server.asr.serving.pipeline import StreamingFeatures

    config = FbankConfig()
    waves = [_wave(1.1, 10), _wave(0.5, 11)]
    features = StreamingFeatures(config, compute_fbank=batch_fbank_computer("kaldifeat", config, device))
    got = _stream_frames(features, _interleaved_chunks(waves, 1), per_call=2)
    for key, w in enumerate(waves):
        want = fbank(w, config)
        assert got[key].shape == want.shape
        np.testing.assert_allclose(got[key], want, atol=2e-3, rtol=1e-4)


def _numpy_fbank_cases():
    rng = np.random.default_rng(12)
    window, shift = 400, 160
    return [
        [rng.uniform(-1, 1, 16000).astype(np.float32)],                      # random noise, full scale
        [_wave(0.01, 13)],                                                     # shorter than one window
        [rng.standard_normal(window).astype(np.float32) * 0.1],               # exactly one window
        [_wave(1.0, 14)[:window + 5 * shift]],                                # an exact number of shifts
        [np.zeros(0, np.float32), _wave(0.7, 15), np.zeros(0, np.float32),    # empty ones inside a batch
         _wave(0.02, 16), np.zeros(800, np.float32), _wave(1.33, 17)],        # digital silence: log floor
        [np.zeros(0, np.float32)],                                             # nothing at all
    ]


@pytest.mark.parametrize("case", range(len(_numpy_fbank_cases())))
def test_numpy_fbank_matches_kaldi_native_fbank(case):
    waves = _numpy_fbank_cases()[case]
    config = FbankConfig()
    got = batch_fbank_computer("numpy", config)(waves)
    assert len(got) == len(waves)
    for w, f in zip(waves, got):
        want = fbank(w, config)
        assert f.shape == want.shape and f.dtype == np.float32
        # float64 here, float32 inside kaldi-native-fbank: equal to its rounding in the log domain
        np.testing.assert_allclose(f, want, atol=2e-3, rtol=1e-4)


def test_numpy_fbank_batched_equals_one_by_one_and_streams_like_whole_utterances():
    from asr_server.asr.features.fbank import NumpyFbank
    from asr_server.asr.serving.pipeline import StreamingFeatures

    config = FbankConfig()
    computer = NumpyFbank(config)
    waves = [_wave(1.3, 18), _wave(0.6, 19), _wave(2.1, 20)]
    batched = computer(waves)
    for w, f in zip(waves, batched):
        np.testing.assert_array_equal(f, computer([w])[0])
    features = StreamingFeatures(config, compute_fbank=computer)
    got = _stream_frames(features, _interleaved_chunks(waves, 2), per_call=3)
    for key, w in enumerate(waves):
        np.testing.assert_allclose(got[key], fbank(w, config), atol=2e-3, rtol=1e-4)
    with pytest.raises(ValueError, match="snip_edges"):
        NumpyFbank(FbankConfig(snip_edges=False))


def test_band_limited_float_audio_gets_the_features_of_its_16_bit_file():
    """8 kHz audio resampled in float has an emptier upper band than any 16-bit file: without the noise floor its
    log energies there fall to log(float epsilon) and the recogniser hears garbage."""
    import soxr

    rng = np.random.default_rng(3)
    speechy = (rng.standard_normal(16000) * 0.1).astype(np.float32)
    narrow = soxr.resample(soxr.resample(speechy, 16000, 8000), 8000, 16000)[:16000].astype(np.float32)
    as_file = np.round(narrow * 32768) / 32768  # the same audio written as 16-bit
    plain = FbankConfig(noise_floor=False)
    upper = slice(65, 80)  # mel bins above 4 kHz
    assert fbank(narrow, plain)[:, upper].mean() < fbank(as_file, plain)[:, upper].mean() - 5  # the gap
    floored, file_floored = fbank(narrow), fbank(as_file)
    assert abs(floored[:, upper].mean() - file_floored[:, upper].mean()) < 1.0
    np.testing.assert_allclose(floored[:, :50], fbank(narrow, plain)[:, :50], atol=1e-5)  # speech band untouched
    floor = rounding_noise_floor(FbankConfig())
    assert floor.shape == (80,) and np.all(floor > -6) and np.all(floor < 8)
    # every backend floors alike
    from asr_server.asr.features.fbank import NumpyFbank

    np.testing.assert_allclose(NumpyFbank(FbankConfig())([narrow])[0], floored, atol=1e-3)
