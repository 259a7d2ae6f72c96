"""Endpoint detection in streaming: when has a speaker finished a segment?

Rules in the spirit of sherpa-onnx's (``OnlineRecognizerConfig.rule1/2/3``), measured on the CTC output:
a frame is silence when its best token is the blank, and a segment "has spoken" once a frame's best token is
not. Any rule that holds ends the segment at that frame:

- rule 1: nothing spoken yet and ``rule1_silence`` seconds of trailing silence (the segment is dropped: no
  final is emitted for silence);
- rule 2: something spoken and ``rule2_silence`` seconds of trailing silence;
- rule 3: the segment is ``rule3_length`` seconds long.

Per model they come from config parameters (``endpoint``, ``endpoint_rule1_silence``, ...), per stream from the
START request's parameters of the same names, which override the model's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

import numpy as np

PARAMETER_PREFIX = "endpoint_"


@dataclasses.dataclass(frozen=True)
class EndpointRules:
    """Validated once, in ``__post_init__``."""

    enabled: bool = False  # off: a stream is one segment ending at END (the behaviour without endpointing)
    rule1_silence: float = 2.4  # seconds of blank before anything was said (sherpa-onnx's default)
    # seconds of blank after speech; sherpa-onnx uses 1.2, 0.8 here so a 1 s pause between sentences ends one
    rule2_silence: float = 0.8
    rule3_length: float = 20.0  # seconds of segment at most (sherpa-onnx's default)

    def __post_init__(self) -> None:
        for name in ("rule1_silence", "rule2_silence", "rule3_length"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"endpoint {name} must be a positive number of seconds, got {value!r}")

    def updated(self, parameters: Mapping[str, Any]) -> "EndpointRules":
        """These rules with the ``endpoint`` / ``endpoint_<field>`` entries of ``parameters`` applied."""
        changes: dict[str, Any] = {}
        if "endpoint" in parameters:
            changes["enabled"] = _bool(parameters["endpoint"])
        for field in ("rule1_silence", "rule2_silence", "rule3_length"):
            key = PARAMETER_PREFIX + field
            if key in parameters:
                try:
                    changes[field] = float(parameters[key])
                except (TypeError, ValueError):
                    raise ValueError(f"parameter {key} must be a number of seconds, got {parameters[key]!r}") from None
        return dataclasses.replace(self, **changes) if changes else self


def _bool(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true", "yes")


RULE1, RULE2, RULE3 = 1, 2, 3


class EndpointDetector:
    """Per-segment counters, fed frame by frame with each frame's best token."""

    def __init__(self, rules: EndpointRules, frame_seconds: float, blank_id: int = 0) -> None:
        self.rules = rules
        self.blank_id = blank_id
        # thresholds in encoder frames
        self._rule1 = max(1, round(rules.rule1_silence / frame_seconds))
        self._rule2 = max(1, round(rules.rule2_silence / frame_seconds))
        self._rule3 = max(1, round(rules.rule3_length / frame_seconds))
        self.reset()

    def reset(self) -> None:
        self.frames = 0  # frames of the segment so far
        self.trailing_silence = 0  # blank frames since the last non-blank one
        self.spoken = False

    def scan(self, best_ids: np.ndarray) -> Optional[tuple[int, int]]:
        """best_ids: (T,) best token of each new frame. Returns (frames of these that belong to the segment,
        rule) for the first frame where a rule holds (the counters then start a new segment), or None."""
        if not self.rules.enabled:
            self.frames += len(best_ids)
            return None
        for t, token in enumerate(best_ids.tolist()):
            self.frames += 1
            if token == self.blank_id:
                self.trailing_silence += 1
            else:
                self.trailing_silence = 0
                self.spoken = True
            rule = 0
            if not self.spoken and self.trailing_silence >= self._rule1:
                rule = RULE1
            elif self.spoken and self.trailing_silence >= self._rule2:
                rule = RULE2
            elif self.frames >= self._rule3:
                rule = RULE3
            if rule:
                self.reset()
                return t + 1, rule
        return None
