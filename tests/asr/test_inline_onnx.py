"""The streaming encoder and decoder run inside the scorer (asr_server/asr/serving/inline_onnx.py): the same
numbers as the graph run sequence by sequence, caches kept, freed and isolated per sequence."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.asr.serving.inline_onnx import (InlineStreamingEncoder, drop_inline_graphs, onnx_session,
                                               shared_onnx_session)
from asr_server.asr.serving.streaming_scorer import EncoderJob
from tests.helpers.asr_repos import ONNX_DIR, exported

pytestmark = pytest.mark.skipif(not exported(), reason="the bundled model's graphs are not exported "
                                                     "(bash scripts/build_demo_repo.sh)")
STATES = ("offset", "att_cache", "cnn_cache", "cache_mask")


@pytest.fixture(scope="module")
def session():
    return onnx_session(ONNX_DIR / "streaming_encoder.onnx")


def windows(seed: int, count: int, shape) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape).astype(np.float32) for _ in range(count)]


def reference(session, frames: list[np.ndarray], valid: list[int]) -> list[np.ndarray]:
    """One sequence alone, its caches carried by hand: the log-probs of each window."""
    inputs = {i.name: i for i in session.get_inputs()}
    state = {n: np.zeros([1, *inputs[n].shape[1:]], np.int64 if n == "offset" else np.float32) for n in STATES}
    out = []
    for window, n in zip(frames, valid):
        log_probs, *_, offset, att, cnn, mask = session.run(
            ["log_probs", "log_probs_idx", "chunk_out", "chunk_out_lens",
             "r_offset", "r_att_cache", "r_cnn_cache", "r_cache_mask"],
            {"chunk_xs": window[None], "chunk_lens": np.array([n], np.int32), **state})
        state = {"offset": offset, "att_cache": att, "cnn_cache": cnn, "cache_mask": mask}
        out.append(log_probs[0])
    return out


def test_interleaved_sequences_match_each_sequence_run_alone(session):
    shape = session.get_inputs()[0].shape[1:]
    encoder = InlineStreamingEncoder(session)
    seqs = {key: windows(key, 4, shape) for key in (1, 2, 3)}
    valid = {1: [67, 67, 67, 40], 2: [67, 67, 67, 67], 3: [67, 67, 67, 10]}
    got = {key: [] for key in seqs}
    # sequence 2 starts one round late, so every round mixes sequences at different positions
    plan = [[(1, 0), (3, 0)], [(1, 1), (2, 0), (3, 1)], [(1, 2), (2, 1), (3, 2)], [(1, 3), (2, 2), (3, 3)],
            [(2, 3)]]
    for round_ in plan:
        jobs = [EncoderJob(key, seqs[key][i], valid[key][i], start=i == 0, end=i == 3) for key, i in round_]
        for (key, _), result in zip(round_, encoder(jobs)):
            got[key].append(result.topk_log_probs)
    for key in seqs:
        for mine, ref in zip(got[key], reference(session, seqs[key], valid[key])):
            np.testing.assert_allclose(mine, ref, rtol=1e-4, atol=1e-4)
    assert encoder.caches == {}  # every sequence ended


def test_start_resets_a_sequence_and_end_frees_it(session):
    shape = session.get_inputs()[0].shape[1:]
    encoder = InlineStreamingEncoder(session)
    first, second = windows(7, 2, shape)
    a = encoder([EncoderJob(5, first, 67, start=True, end=False)])[0].topk_log_probs
    encoder([EncoderJob(5, second, 67, start=False, end=False)])
    assert 5 in encoder.caches
    again = encoder([EncoderJob(5, first, 67, start=True, end=False)])[0].topk_log_probs
    np.testing.assert_allclose(again, a, rtol=1e-5, atol=1e-5)
    # an END with nothing left to decode frees the caches without running the graph
    result = encoder([EncoderJob(5, np.zeros(shape, np.float32), 0, start=False, end=True)])[0]
    assert result.valid == 0 and 5 not in encoder.caches


def test_a_sequence_without_state_fails_alone(session):
    shape = session.get_inputs()[0].shape[1:]
    encoder = InlineStreamingEncoder(session)
    w = windows(9, 1, shape)[0]
    results = encoder([EncoderJob(1, w, 67, start=True, end=False), EncoderJob(2, w, 67, start=False, end=False),
                       EncoderJob(3, w[:10], 67, start=True, end=False)])  # 2: never started; 3: a short window
    assert not isinstance(results[0], Exception) and results[0].valid > 0
    assert isinstance(results[1], ValueError) and "no encoder state" in str(results[1])
    assert isinstance(results[2], Exception)
    assert set(encoder.caches) == {1}


def test_idle_sequences_are_forgotten(session):
    shape = session.get_inputs()[0].shape[1:]
    now = [100.0]
    encoder = InlineStreamingEncoder(session, idle_seconds=5.0, clock=lambda: now[0])
    w = windows(11, 1, shape)[0]
    encoder([EncoderJob(1, w, 67, start=True, end=False)])
    now[0] += 3
    encoder([EncoderJob(2, w, 67, start=True, end=False)])
    now[0] += 3  # 1 idle 6 s, 2 idle 3 s
    encoder.drop_idle()
    assert set(encoder.caches) == {2}
    encoder.drop(2)
    assert encoder.caches == {}


def test_served_sessions_have_no_arena_and_give_the_arena_sessions_numbers(session, tmp_path):
    """onnxruntime's CPU arena would keep a burst's peak for good: the server's inline sessions run without
    one (bench/arena_shrink.py), with the same outputs."""
    import shutil

    graph = tmp_path / "streaming_encoder.onnx"
    shutil.copy(ONNX_DIR / "streaming_encoder.onnx", graph)
    served = shared_onnx_session(graph)
    assert served.get_session_options().enable_cpu_mem_arena is False
    assert onnx_session(graph).get_session_options().enable_cpu_mem_arena is True  # the library's default
    shape = session.get_inputs()[0].shape[1:]
    frames = windows(5, 4, shape)
    got = []
    encoder = InlineStreamingEncoder(served, idle_seconds=60.0)
    for i in range(4):
        got.append(encoder([EncoderJob(1, frames[i], 67, start=i == 0, end=i == 3)])[0].topk_log_probs)
    for mine, ref in zip(got, reference(session, frames, [67] * 4)):
        np.testing.assert_allclose(mine, ref, rtol=1e-4, atol=1e-4)


def test_dynamic_state_dims_are_refused_with_a_reason():
    class Input:
        def __init__(self, name, shape):
            self.name, self.shape, self.type = name, shape, "tensor(float)"

    class Session:
        def get_inputs(self):
            return [Input("chunk_xs", ["B", 67, 80]), Input("chunk_lens", ["B"]),
                    Input("att_cache", ["B", 6, 4, "T", 64])]

    with pytest.raises(ValueError, match="dynamic dims.*BLS"):
        InlineStreamingEncoder(Session())


def test_a_rewritten_repository_goes_back_to_bls():
    config = mc.ModelConfig(name="wenet")
    config.parameters["encoder_onnx"].string_value = "../streaming_encoder/1/streaming_encoder.onnx"
    config.parameters["decoder_onnx"].string_value = "../decoder/1/decoder.onnx"
    config.parameters["beam_size"].string_value = "10"
    config.parameters["instance_process"].string_value = "1"  # BLS needs the server's process
    assert drop_inline_graphs(config)
    assert set(config.parameters) == {"beam_size"}
    assert not drop_inline_graphs(config)


def test_the_dropped_parameter_is_the_one_the_python_backend_reads():
    from asr_server.asr.serving.inline_onnx import PROCESS_PARAMETER
    from asr_server.backends.python.process_model import PARAMETER

    assert PROCESS_PARAMETER == PARAMETER


def test_a_model_without_inline_graphs_keeps_its_instance_processes():
    config = mc.ModelConfig(name="feature_extractor")
    config.parameters["instance_process"].string_value = "1"
    assert not drop_inline_graphs(config)
    assert set(config.parameters) == {"instance_process"}


def test_instances_of_a_process_share_a_graphs_session_while_it_is_in_use(tmp_path):
    import gc
    import shutil
    import weakref

    graph = tmp_path / "streaming_encoder.onnx"
    shutil.copy(ONNX_DIR / "streaming_encoder.onnx", graph)
    first = shared_onnx_session(graph)
    assert shared_onnx_session(tmp_path / "." / "streaming_encoder.onnx") is first  # same file, one session
    assert shared_onnx_session(graph, threads=2) is not first  # more threads: a session of its own
    copy = tmp_path / "copy.onnx"
    shutil.copy(graph, copy)
    assert shared_onnx_session(copy) is not first  # another file
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None  # the last user dropped it: not kept alive by the table
