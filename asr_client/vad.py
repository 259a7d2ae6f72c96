"""Where the speech is: Silero VAD's ONNX model, run with onnxruntime, for cutting long audio (asr_client.longform).

The model ships inside the `silero-vad` PyPI package (MIT); nothing is downloaded. Only its ONNX file is used:
the package's Python imports torch, which the client does not need. The "sequence" export runs a block of up
to 512 frames (16 s) in one call, carrying the LSTM state between blocks, so an hour of audio takes a few
hundred calls rather than one per 32 ms frame.

A frame is speech once its probability reaches ``threshold`` and stays speech while it is above ``release``
(Silero's own hysteresis: threshold 0.5, release 0.15 below it).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Optional

import numpy as np

SAMPLE_RATE = 16000
FRAME_SAMPLES = 512  # 32 ms: the model's frame at 16 kHz
CONTEXT_SAMPLES = 64  # the end of the previous frame, prepended to each frame
BLOCK_FRAMES = 512  # frames per ONNX call
STATE_SHAPE = (1, 1, 128)
MODEL_FILE = "silero_vad_16k_sequence.onnx"
THRESHOLD = 0.5
RELEASE = 0.35


class VadUnavailable(RuntimeError):
    pass


def model_path() -> Path:
    """The ONNX file inside the installed silero-vad package (found without importing the package)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise VadUnavailable("silero-vad is not installed (pip install silero-vad); cutting at quiet stretches "
                             "of the signal instead")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / MODEL_FILE
    if not path.is_file():
        raise VadUnavailable(f"the installed silero-vad has no {MODEL_FILE}: version 6 or later is needed")
    return path


class SileroVad:
    def __init__(self, path: Optional[Path] = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path or model_path()), options, providers=["CPUExecutionProvider"])

    def probabilities(self, samples: np.ndarray) -> np.ndarray:
        """One speech probability per 32 ms frame of 16 kHz ``samples`` (the last frame zero-padded)."""
        samples = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
        count = -(-samples.size // FRAME_SAMPLES)
        frames = np.zeros((count, FRAME_SAMPLES), np.float32)
        frames.reshape(-1)[: samples.size] = samples
        contexts = np.zeros((count, CONTEXT_SAMPLES), np.float32)
        contexts[1:] = frames[:-1, -CONTEXT_SAMPLES:]
        windows = np.concatenate([contexts, frames], axis=1)
        hidden, cell = np.zeros(STATE_SHAPE, np.float32), np.zeros(STATE_SHAPE, np.float32)
        out = []
        for first in range(0, count, BLOCK_FRAMES):
            probs, hidden, cell = self.session.run(["speech_probs", "hn", "cn"],
                                                   {"input": windows[first:first + BLOCK_FRAMES], "h": hidden,
                                                    "c": cell})
            out.append(probs.reshape(-1))
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def speech_frames(self, samples: np.ndarray, frame_s: float) -> np.ndarray:
        """A bool per ``frame_s`` frame of ``samples``: whether it lies in speech (with the hysteresis above)."""
        probs = self.probabilities(samples)
        speech = np.zeros(probs.size, bool)
        on = False
        for i, p in enumerate(probs):
            on = p >= THRESHOLD or (on and p >= RELEASE)
            speech[i] = on
        n_frames = int(samples.size // max(1, int(frame_s * SAMPLE_RATE)))
        centres = ((np.arange(n_frames) + 0.5) * frame_s * SAMPLE_RATE / FRAME_SAMPLES).astype(int)
        return speech[np.minimum(centres, max(0, speech.size - 1))] if speech.size else np.zeros(n_frames, bool)


@functools.lru_cache(maxsize=1)
def default_vad() -> Optional[SileroVad]:
    """The VAD when silero-vad is installed, else None (the caller falls back to the energy cutter)."""
    try:
        return SileroVad()
    except VadUnavailable:
        return None
