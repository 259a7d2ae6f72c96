"""Endpointing in the streaming scorer: rules on trailing blanks and segment length, segments that end with a
final (rescored) result while the stream goes on, and the DETAILS of each chunk."""

from __future__ import annotations

import numpy as np
import pytest

from asr_server.asr.decoding.endpoint import RULE1, RULE2, RULE3, EndpointDetector, EndpointRules
from asr_server.asr.serving.pipeline import DecodingSettings
from asr_server.asr.serving.streaming_scorer import EncoderResult, StreamChunk, StreamingScorer
from asr_server.asr.windows import WindowConfig
from asr_server.asr.units import SymbolTable, Tokenizer

WINDOW = WindowConfig(chunk_size=4, subsampling=4, right_context=6)  # window 19 fbank frames, stride 16
DIM = 2
VOCAB = ["<blank>", "<unk>", "▁a", "▁b", "<sos/eos>"]
FRAME_S = 0.04


def test_rules_fire_on_their_thresholds():
    rules = EndpointRules(enabled=True, rule1_silence=0.4, rule2_silence=0.2, rule3_length=1.0)
    detector = EndpointDetector(rules, FRAME_S)
    assert detector.scan(np.zeros(9, np.int64)) is None  # 9 blank frames: under rule 1's 10
    assert detector.scan(np.zeros(3, np.int64)) == (1, RULE1)  # the 10th frame
    assert detector.scan(np.array([0, 2, 0, 0, 0, 0, 0, 0])) == (7, RULE2)  # 5 blanks after a token
    assert detector.scan(np.array([2, 3] * 30)) == (25, RULE3)  # 25 frames of speech = 1 s
    # with loudness: rule 2 counts only blanks 6 dB (1.38 log-mel) under the loudest speech frame
    speech, loud, quiet = np.array([2]), np.array([10.0]), np.full(8, 8.0)
    assert detector.scan(speech, loud) is None
    assert detector.scan(np.zeros(8, np.int64), np.full(8, 9.0)) is None  # 1 below: still speech
    assert detector.scan(np.zeros(8, np.int64), quiet) == (5, RULE2)  # 5 quiet blanks = 0.2 s


def test_rule2_counts_the_silence_from_the_end_of_the_word_not_from_its_late_last_token():
    rules = EndpointRules(enabled=True, rule2_silence=0.8)
    on_time = EndpointDetector(rules, FRAME_S)
    late = EndpointDetector(rules, FRAME_S, emission_lag=0.2)  # last token emitted 200 ms after the word
    speech_then_blanks = np.array([2] + [0] * 30)
    assert on_time.scan(speech_then_blanks) == (21, RULE2)  # 20 blanks = 0.8 s
    assert late.scan(speech_then_blanks) == (16, RULE2)  # 15 blanks = 0.6 s, + 0.2 s before the token


def test_disabled_rules_never_fire_and_parameters_override_the_model():
    assert EndpointDetector(EndpointRules(), FRAME_S).scan(np.zeros(1000, np.int64)) is None
    rules = EndpointRules().updated({"endpoint": "1", "endpoint_rule2_silence": "0.5"})
    assert rules.enabled and rules.rule2_silence == 0.5 and rules.rule1_silence == 2.4
    assert not rules.updated({"endpoint": False}).enabled
    with pytest.raises(ValueError, match="rule2_silence"):
        EndpointRules().updated({"endpoint_rule2_silence": "soon"})
    with pytest.raises(ValueError, match="positive"):
        EndpointRules(rule3_length=0)
    with pytest.raises(ValueError, match="quiet_db"):
        EndpointRules(rule2_quiet_db=-3)
    assert EndpointRules().updated({"endpoint_rule4_silence": "2"}).rule4_silence == 2.0


class ScriptedEncoder:
    """Encoder frames from a script: window w (of every stream) gives encoder frames script[4w:4w+4]
    (token ids, 0 = blank), each the best of its frame with probability 0.9."""

    def __init__(self, script):
        self.script = script
        self.sent = {}

    def __call__(self, jobs):
        out = []
        for job in jobs:
            w = self.sent.get(job.key, 0)
            self.sent[job.key] = w + 1
            frames = self.script[4 * w:4 * w + 4] + [0] * 4
            lp = np.full((4, 2), np.log(0.05))
            ids = np.zeros((4, 2), np.int64)
            for t in range(4):
                ids[t] = (frames[t], 1 if frames[t] == 0 else 0)
                lp[t, 0] = np.log(0.9)
            valid = min(4, (job.valid - 1) // 4) if job.valid else 0
            out.append(EncoderResult(lp, ids, np.ones((4, 8), np.float32), valid))
        return out


def stream(scorer, frames_per_chunk, n_fbank, parameters, script, details=True, loud_blanks=False):
    """Chunks of fbank frames whose loudness follows the script: 10 (log-mel) on the 4 input frames of an
    encoder frame with a token, 0 elsewhere (or 10 everywhere: ``loud_blanks``, speech that goes on)."""
    encoder = ScriptedEncoder(script)
    fbank = np.full((n_fbank, DIM), 10.0 if loud_blanks else 0.0, np.float32)
    for frame, token in enumerate(script):
        if token:
            fbank[4 * frame:4 * frame + 4] = 10.0
    texts, infos, pos, index = [], [], 0, 0
    while pos < n_fbank:
        size = min(frames_per_chunk, n_fbank - pos)
        chunk = StreamChunk(9, fbank[pos:pos + size], start=index == 0, end=pos + size >= n_fbank,
                            parameters=parameters if index == 0 else {}, want_details=details)
        answer = scorer.step([chunk], encoder, rescorer=None)[0]
        texts.append(answer.text)
        infos.append(answer.details)
        pos, index = pos + size, index + 1
    return texts, infos


def make_scorer(**endpoint):
    settings = DecodingSettings(beam_size=2, sos=4, eos=4, rescoring=False,
                                endpoint=EndpointRules(**endpoint) if endpoint else EndpointRules())
    return StreamingScorer(Tokenizer(SymbolTable(VOCAB)), settings, WINDOW, DIM, encoder_dim=8)


# "a" at frame 1, silence, "b" at frame 20, silence: 40 encoder frames (1.6 s) from 10 windows
SCRIPT = [0, 2] + [0] * 18 + [3] + [0] * 19
FBANK = 16 * 10 + 3  # ten full windows


@pytest.mark.parametrize("chunk", [16, 40, FBANK])
def test_a_pause_ends_a_segment_and_the_stream_goes_on(chunk):
    scorer = make_scorer()
    texts, infos = stream(scorer, chunk, FBANK, {"endpoint": True, "endpoint_rule2_silence": 0.4,
                                                 "details": True}, SCRIPT)
    assert texts[-1] == "a b"
    finals = [f for info in infos for f in info.get("finals", [])]
    assert [(f["segment"], f["text"], f["final"]) for f in finals] == [(0, "a", True), (1, "b", True)]
    # segment 0 ends 10 blank frames (0.4 s) after "a"; "b" keeps its time from the stream's start
    assert finals[0]["end"] == pytest.approx(0.48) and finals[1]["start"] == pytest.approx(0.48)
    assert finals[1]["words"] == [{"word": "b", "start": 0.8, "end": 0.84, "confidence": 0.9}]
    assert infos[-1]["final"] is True  # END after the last endpoint: no empty segment of its own
    assert len(scorer.streams) == 0


def test_blanks_over_loud_audio_are_speech_going_on_for_rule2_and_rule4_ends_them_later():
    # the same script over audio that stays loud: 19 blank frames are not a quiet pause (rule 2 holds off);
    # rule 4 (blanks, loud or not) ends the segment after its own, longer, silence
    params = {"endpoint": True, "endpoint_rule2_silence": 0.4, "details": True}
    _, infos = stream(make_scorer(), 16, FBANK, params, SCRIPT, loud_blanks=True)
    finals = [f for info in infos for f in info.get("finals", [])]
    assert [(f["segment"], f["text"]) for f in finals] == [(0, "a b")]
    _, infos = stream(make_scorer(), 16, FBANK, {**params, "endpoint_rule4_silence": 0.6}, SCRIPT,
                      loud_blanks=True)
    finals = [f for info in infos for f in info.get("finals", [])]
    assert [(f["segment"], f["text"]) for f in finals] == [(0, "a"), (1, "b")]
    assert finals[0]["end"] == pytest.approx(0.68)  # 15 blank frames (0.6 s) after "a"
    # rule2_quiet_db 0: every blank counts as quiet, as in sherpa-onnx's rule 2
    _, infos = stream(make_scorer(), 16, FBANK, {**params, "endpoint_rule2_quiet_db": 0}, SCRIPT,
                      loud_blanks=True)
    assert [f["text"] for info in infos for f in info.get("finals", [])] == ["a", "b"]


def test_without_endpointing_nothing_changes():
    with_rules, _ = stream(make_scorer(), 16, FBANK, {}, SCRIPT)
    plain, infos = stream(make_scorer(), 16, FBANK, {}, SCRIPT, details=False)
    assert with_rules == plain and plain[-1] == "a b" and all(i is None for i in infos)
    _, infos = stream(make_scorer(), 16, FBANK, {}, SCRIPT)
    assert not any("finals" in i for i in infos[:-1]) and "words" not in infos[0]  # no `details` parameter
    assert infos[-1]["finals"][0]["text"] == "a b"


def test_the_model_default_applies_and_rule1_drops_silence():
    # endpointing on by the model's settings; a long silence before speech is dropped, not emitted
    script = [0] * 30 + [2] + [0] * 9
    _, infos = stream(make_scorer(enabled=True, rule1_silence=0.8), 16, FBANK, {}, script)
    finals = [f for info in infos for f in info.get("finals", [])]
    assert [(f["segment"], f["text"]) for f in finals] == [(0, "a")]
    assert finals[0]["start"] == pytest.approx(0.8)  # the segment starts after the 20 dropped frames


def test_a_bad_endpoint_parameter_fails_its_stream_alone():
    scorer = make_scorer()
    texts = scorer.step([StreamChunk(1, np.zeros((20, DIM), np.float32), True, False,
                                     {"endpoint_rule3_length": "-1"})], ScriptedEncoder(SCRIPT))
    assert "rule3_length" in texts[0].message and 1 not in scorer.decoding
