"""bench/paced_floor.py: the bare floor of S paced streams' work, batched by the sequence batcher's rule."""

import numpy as np
import pytest

from bench import paced_floor as pf
from tests.helpers.asr_repos import ONNX_DIR, exported

SR = pf.SAMPLE_RATE


def items(*seconds):
    return [(f"u{i}", np.ones(int(s * SR), np.float32), "") for i, s in enumerate(seconds)]


def test_streams_are_staggered_over_one_chunk_and_play_utterances_back_to_back():
    chunks = pf.paced_chunks(items(1.0, 0.5), streams=4, seconds=1.2)
    first = {c.stream: c.arrival for c in reversed(chunks)}
    assert [first[s] for s in range(4)] == pytest.approx([0.0, 0.16, 0.32, 0.48])
    stream0 = [c for c in chunks if c.stream == 0]
    # 1.0 s: a 0.64 s chunk and a 0.36 s last one; then 0.5 s: one last chunk (1.5 s >= 1.2 s: done)
    assert [c.samples.size for c in stream0] == [10240, 5760, 8000]
    assert [c.utterance_s for c in stream0] == [0.0, 1.0, 0.5]
    assert [c.arrival for c in stream0] == pytest.approx([0.0, 0.64, 1.28])
    stream1 = [c for c in chunks if c.stream == 1]
    assert stream1[0].utterance_s == 0.5  # stream i starts at the i-th utterance
    assert [c.arrival for c in chunks] == sorted(c.arrival for c in chunks)


def test_a_round_leaves_when_its_oldest_chunk_has_waited_the_delay_or_when_full():
    chunks = [pf.Chunk(t, s, np.zeros(1, np.float32)) for s, t in enumerate((0.0, 0.005, 0.010, 0.030))]
    assert pf.next_round(chunks, 0, now=0.012, delay_s=0.02, max_batch=64) == (None, 0.02)
    assert pf.next_round(chunks, 0, now=0.021, delay_s=0.02, max_batch=64) == (3, 0.021)
    assert pf.next_round(chunks, 0, now=0.012, delay_s=0.02, max_batch=2) == (2, 0.012)  # full: no wait
    assert pf.next_round(chunks, 3, now=0.021, delay_s=0.0, max_batch=8) == (None, 0.030)  # not arrived yet
    assert pf.next_round(chunks, 3, now=0.030, delay_s=0.0, max_batch=8) == (4, 0.030)


@pytest.mark.skipif(not exported(), reason="the bundled model's graphs are not exported "
                                           "(bash scripts/build_demo_repo.sh)")
def test_the_floor_of_a_few_streams_counts_each_part_of_the_work():
    greedy = pf.paced_floor(ONNX_DIR, items(1.0, 0.7), streams=3, seconds=1.0, delay_s=0.02)
    assert greedy["encoder"] > 0 and greedy["fbank"] > 0 and greedy["decoder"] == 0
    assert greedy["neural"] == greedy["encoder"]
    assert 1 <= greedy["mean_batch"] <= 3
    rescoring = pf.paced_floor(ONNX_DIR, items(1.0, 0.7), streams=3, seconds=1.0, delay_s=0.02, rescoring=True)
    assert rescoring["decoder"] > 0 and rescoring["neural"] == rescoring["encoder"] + rescoring["decoder"]
