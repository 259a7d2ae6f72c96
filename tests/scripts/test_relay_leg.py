"""scripts/relay_leg.py's pieces that run without training: the 8 kHz copy of an evaluation split, the bf16
decision, and the first leg's state (it continues the bundled model: same network, units, CMVN)."""

from __future__ import annotations

import json

import numpy as np
import soundfile as sf

from tests.conftest import ROOT
from tests.helpers.scripts import load_script


def test_the_band_limited_copy_keeps_the_speech_band_and_drops_the_rest(tmp_path):
    relay = load_script("relay_leg")
    src = tmp_path / "split"
    src.mkdir()
    t = np.arange(16000) / 16000
    audio = 0.3 * np.sin(2 * np.pi * 700 * t) + 0.3 * np.sin(2 * np.pi * 5000 * t)
    sf.write(src / "u1.wav", audio.astype(np.float32), 16000, subtype="PCM_16")
    (src / "wav.scp").write_text(f"u1 {src / 'u1.wav'}\n")
    (src / "text").write_text("u1 hello there\n")
    out = relay.band_limited_copy(src, tmp_path / "split_8k")
    assert (out / "text").read_text() == "u1 hello there\n"
    path = (out / "wav.scp").read_text().split()[1]
    narrow, rate = sf.read(path)
    assert rate == 16000 and narrow.size == audio.size
    spectrum = np.abs(np.fft.rfft(narrow))
    assert spectrum[5000] < 1e-2 * spectrum[700]


def test_the_first_leg_continues_the_bundled_model():
    relay = load_script("relay_leg")
    state = relay.FIRST_STATE
    model = ROOT / state["init_from"]
    config = (model / "train.yaml").read_text()
    net = state["network"]
    assert f"output_size: {net['d_model']}" in config and f"num_blocks: {net['blocks']}" in config
    assert f"linear_units: {net['ffn']}" in config and f"cnn_module_kernel: {net['kernel']}" in config
    assert f"steps: {state['step']}" in config
    assert isinstance(relay.has_bf16(), bool)
    committed = ROOT / "models" / "open_en_wip" / "relay.json"
    if committed.exists():  # a later leg's state names the same network and schedule
        saved = json.loads(committed.read_text())
        assert saved["network"] == net and saved["leg"] >= 1 and saved["step"] > state["step"]
