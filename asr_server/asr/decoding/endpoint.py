"""Endpoint detection in streaming: when has a speaker finished a segment?

Rules in the spirit of sherpa-onnx's (``OnlineRecognizerConfig.rule1/2/3``), measured on the CTC output:
a frame is silence when its best token is the blank, and a segment "has spoken" once a frame's best token is
not. Any rule that holds ends the segment at that frame:

- rule 1: nothing spoken yet and ``rule1_silence`` seconds of trailing silence (the segment is dropped: no
  final is emitted for silence);
- rule 2: something spoken and ``rule2_silence`` seconds of quiet trailing silence: blank frames whose audio is
  at least ``rule2_quiet_db`` below the loudest speech of the segment, counted from when the last word ended
  (the model emits a word's last token ``emission_lag`` seconds after it: the END of the model's
  ``timestamp_shift_ms``, so that much of the silence has passed before the first trailing blank);
- rule 3: the segment is ``rule3_length`` seconds long;
- rule 4: something spoken and ``rule4_silence`` seconds of trailing blank frames, loud or not (sherpa-onnx's
  rule 2; it ends a segment where the audio is too noisy for rule 2's quiet test).

Why rule 2 asks for quiet audio: a CTC model's output is blank between its token spikes, also inside words:
on 200 held-out demo utterances, 10% hold a run of 0.6 s of blank frames (5% of 0.8 s) with speech going on,
so a blank-only rule short enough to end a segment soon after a 1 s pause also cuts one sentence in ten in two.
Those runs are loud (a vowel); the pause after a sentence is not.

Per model they come from config parameters (``endpoint``, ``endpoint_rule1_silence``, ...), per stream from the
START request's parameters of the same names, which override the model's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

import numpy as np

from .numbers import bounded_float
from asr_server.truthy import truthy

PARAMETER_PREFIX = "endpoint_"
MAX_RULE_VALUE = 3600.0  # seconds (or dB for rule2_quiet_db): an hour-long rule is already no rule


@dataclasses.dataclass(frozen=True)
class EndpointRules:
    """Validated once, in ``__post_init__``."""

    enabled: bool = False  # off: a stream is one segment ending at END (the behaviour without endpointing)
    rule1_silence: float = 2.4  # seconds of blank before anything was said (sherpa-onnx's default)
    # seconds of quiet blank after speech: the pause the client's long-audio cutter and the word times call a
    # pause; with 640 ms decoding windows the final of a segment then comes within ~1.3 s of audio into a
    # pause, so a 1 s pause between sentences is reported within 300 ms of its end (bench/asr_extras.py: 0.6 s
    # cuts fewer sentences in two, 1.5% against 5.5% of 200 held-out ones, but is late for 8% of the pauses)
    rule2_silence: float = 0.5
    # dB below the segment's loudest speech frame that a blank frame must be to count for rule 2 (0: any
    # blank, as sherpa-onnx's rule 2); 6 dB: a quarter of the power
    rule2_quiet_db: float = 6.0
    rule3_length: float = 20.0  # seconds of segment at most (sherpa-onnx's default)
    rule4_silence: float = 1.2  # seconds of blank after speech, loud or not (sherpa-onnx's rule 2 default)

    def __post_init__(self) -> None:
        for name in ("rule1_silence", "rule2_silence", "rule3_length", "rule4_silence"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value <= MAX_RULE_VALUE:
                raise ValueError(f"endpoint {name} must be a positive number of seconds up to {MAX_RULE_VALUE:g}, "
                                 f"got {value!r}")
        if not isinstance(self.rule2_quiet_db, (int, float)) or not 0 <= self.rule2_quiet_db <= MAX_RULE_VALUE:
            raise ValueError(f"endpoint rule2_quiet_db must be in [0, {MAX_RULE_VALUE:g}] dB, "
                             f"got {self.rule2_quiet_db!r}")

    def updated(self, parameters: Mapping[str, Any]) -> "EndpointRules":
        """These rules with the ``endpoint`` / ``endpoint_<field>`` entries of ``parameters`` applied."""
        changes: dict[str, Any] = {}
        if "endpoint" in parameters:
            changes["enabled"] = truthy(parameters["endpoint"])
        for field in ("rule1_silence", "rule2_silence", "rule2_quiet_db", "rule3_length", "rule4_silence"):
            key = PARAMETER_PREFIX + field
            if key in parameters:
                changes[field] = bounded_float(parameters[key], f"parameter {key}", 0.0, MAX_RULE_VALUE)
        return dataclasses.replace(self, **changes) if changes else self


RULE1, RULE2, RULE3, RULE4 = 1, 2, 3, 4
DB_PER_LOG_MEL = 10.0 / np.log(10.0)  # fbank features are natural logs of power: 1 unit = 4.34 dB


def frame_energies(window: np.ndarray, n_frames: int, subsampling: int) -> np.ndarray:
    """(W, num_mel_bins) log-mel window -> (n_frames,) loudness of each encoder frame: the mean log-mel of the
    ``subsampling`` input frames it starts at (natural-log power units)."""
    need = n_frames * subsampling
    rows = window[:need].mean(axis=1)
    if 0 < len(rows) < need:  # a short last window: its last frame stands for the missing ones
        rows = np.pad(rows, (0, need - len(rows)), mode="edge")
    return rows.reshape(n_frames, subsampling).mean(axis=1)


class EndpointDetector:
    """Per-segment counters, fed frame by frame with each frame's best token (and loudness, for rule 2)."""

    def __init__(self, rules: EndpointRules, frame_seconds: float, blank_id: int = 0,
                 emission_lag: float = 0.0) -> None:
        """emission_lag: seconds after a word's end that the model emits its last token (>= 0)."""
        self.rules = rules
        self.blank_id = blank_id
        lag = max(0.0, emission_lag)
        # thresholds in encoder frames; the blanks after speech start emission_lag after the speech ended
        self._rule1 = max(1, round(rules.rule1_silence / frame_seconds))
        self._rule2 = max(1, round((rules.rule2_silence - lag) / frame_seconds))
        self._rule3 = max(1, round(rules.rule3_length / frame_seconds))
        self._rule4 = max(1, round((rules.rule4_silence - lag) / frame_seconds))
        self._quiet = rules.rule2_quiet_db / DB_PER_LOG_MEL  # in log-mel units
        self.reset()

    def reset(self) -> None:
        self.frames = 0  # frames of the segment so far
        self.trailing_silence = 0  # blank frames since the last non-blank one
        self.quiet_silence = 0  # of those, the last ones in a row that were quiet
        self.loudest = -np.inf  # loudness of the segment's loudest non-blank frame
        self.spoken = False

    def scan(self, best_ids: np.ndarray, energies: Optional[np.ndarray] = None) -> Optional[tuple[int, int]]:
        """best_ids: (T,) best token of each new frame; energies: (T,) their loudness (``frame_energies``;
        None: every blank counts as quiet). Returns (frames of these that belong to the segment, rule) for the
        first frame where a rule holds (the counters then start a new segment), or None."""
        if not self.rules.enabled:
            self.frames += len(best_ids)
            return None
        gate = energies is not None and self._quiet > 0
        for t, token in enumerate(best_ids.tolist()):
            self.frames += 1
            if token == self.blank_id:
                self.trailing_silence += 1
                if not gate or energies[t] <= self.loudest - self._quiet:
                    self.quiet_silence += 1
                else:
                    self.quiet_silence = 0
            else:
                self.trailing_silence = 0
                self.quiet_silence = 0
                self.spoken = True
                if gate:
                    self.loudest = max(self.loudest, float(energies[t]))
            rule = 0
            if not self.spoken and self.trailing_silence >= self._rule1:
                rule = RULE1
            elif self.spoken and self.quiet_silence >= self._rule2:
                rule = RULE2
            elif self.spoken and self.trailing_silence >= self._rule4:
                rule = RULE4
            elif self.frames >= self._rule3:
                rule = RULE3
            if rule:
                self.reset()
                return t + 1, rule
        return None
