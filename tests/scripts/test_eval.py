"""scripts/eval.py helpers: WER and the early-emission diagnostic."""

from __future__ import annotations

import importlib.util

import numpy as np

from tests.conftest import ROOT


def load_eval():
    spec = importlib.util.spec_from_file_location("asr_eval_script", ROOT / "scripts" / "eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wer_counts_substitutions_insertions_and_deletions():
    ev = load_eval()
    assert ev.wer(["a b c d"], ["a x c d e"]) == 50.0       # one substitution, one insertion over 4 words
    assert ev.wer(["a b c d"], ["a b"]) == 50.0


def test_spikes_are_non_blank_frames_that_do_not_repeat_the_previous_one():
    ev = load_eval()
    best = np.array([0, 5, 5, 0, 5, 3, 3, 0, 7])
    assert ev.spike_frames(best).tolist() == [1, 4, 5, 8]
    assert ev.spike_frames(np.array([4, 4, 0])).tolist() == [0]


def test_early_spike_share_pools_spikes_over_utterances():
    ev = load_eval()
    paths = [np.array([0, 5, 5, 0, 5, 3, 3, 0, 7]), np.array([2, 0, 0, 0, 0, 0, 0, 0, 9])]
    # spikes at 1, 4, 5, 8 and 0, 8: three of six are in the first 5 frames
    assert ev.early_spike_share(paths, 5) == 0.5
    assert ev.early_spike_share([np.zeros(4, dtype=int)], 2) == 0.0
