"""Served CTC greedy streaming == the model's own greedy decode of the whole utterance.

The reference is independent of the serving path: Kaldi fbank of the whole utterance (kaldi-native-fbank,
not the server's numpy fbank), the torch checkpoint's full-sequence encoder under WeNet's chunk mask (16-frame
chunks, 4 left chunks: what the streaming encoder computes chunk by chunk, without its caches, windows or tail
handling) and the vectorised best-path decode. The served side is the bundled `streaming_wenet` model
switched to greedy search without rescoring (what sherpa-onnx does), fed in chunk sizes that cut frames,
windows and the last partial window at different places. Any frame lost or padded wrongly at a chunk
boundary, in the last window, in the fbank residual or in the caches changes a transcript here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_client.streaming import StreamingClient, StreamOptions
from tests.conftest import BUNDLED_REPO, ROOT, copy_model
from tests.e2e.test_bundled_model import utterances

torch = pytest.importorskip("torch", reason="the reference decode runs the torch checkpoint")

MODEL_DIR = ROOT / "models" / "demo_en"
CHUNK_FRAMES, LEFT_CHUNKS = 16, 4  # the bundled streaming_encoder's export (640 ms chunks, 4 left chunks)
STREAMING_MODELS = ("streaming_wenet", "streaming_encoder")

pytestmark = pytest.mark.skipif(
    not (BUNDLED_REPO / "streaming_encoder" / "1" / "streaming_encoder.onnx").exists(),
    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh",
)


def _set_parameters(path: Path, **values: str) -> None:
    config = text_format.Parse(path.read_text(), mc.ModelConfig())
    for key, value in values.items():
        assert key in config.parameters, f"parameter {key} not in the streaming_wenet config"
        config.parameters[key].string_value = value
    path.write_text(text_format.MessageToString(config))


@pytest.fixture(scope="module")
def greedy_repo(tmp_path_factory):
    """The bundled streaming pipeline with search=greedy, rescoring=0 (as build_model_repo.py --search greedy
    --no-rescoring writes it)."""
    repo = tmp_path_factory.mktemp("greedy_repo")
    for name in STREAMING_MODELS:
        copy_model(repo, BUNDLED_REPO / name)
    _set_parameters(repo / "streaming_wenet" / "config.pbtxt", search="greedy", rescoring="0")
    return repo


@pytest.fixture(scope="module")
def reference_transcripts():
    """{utt: greedy transcript} of the whole utterance through the checkpoint under the streaming chunk mask."""
    from asr_server.asr.nn.checkpoint import load_model_dir
    from asr_server.asr.decoding.ctc_search import ctc_greedy
    from asr_server.asr.features.fbank import fbank
    from asr_server.asr.units import SymbolTable, Tokenizer

    wenet = BUNDLED_REPO / "wenet"
    tokenizer = Tokenizer(SymbolTable.load(wenet / "units.txt"), wenet / "bpe.model")
    model = load_model_dir(MODEL_DIR).model.eval()
    out = {}
    for utt, samples, _ in utterances():
        feats = torch.from_numpy(fbank(samples))[None]
        with torch.no_grad():
            enc, lens = model.encode(feats, torch.tensor([feats.shape[1]]), CHUNK_FRAMES, LEFT_CHUNKS)
            log_probs = model.ctc_log_probs(enc).numpy()
        out[utt] = tokenizer.decode(ctc_greedy(log_probs, lens.numpy())[0])
    return out


# 640 ms (the benchmark's chunks), chunks that cut fbank frames and decoding windows anywhere (97.3 ms,
# 1130.7 ms), and WeNet's zero-padded 11040/10240-sample chunks.
CHUNKINGS = [StreamOptions(chunk_ms=640), StreamOptions(chunk_ms=97.3), StreamOptions(chunk_ms=1130.7),
             StreamOptions(wenet_chunks=True)]


@pytest.mark.parametrize("options", CHUNKINGS, ids=["640ms", "97.3ms", "1130.7ms", "wenet"])
async def test_served_greedy_streaming_equals_whole_utterance_reference(running, greedy_repo,
                                                                        reference_transcripts, options):
    items = utterances()
    async with running(greedy_repo, allow_http=False) as server:
        async with StreamingClient(f"127.0.0.1:{server.grpc_port}", options) as streaming:
            served = {utt: (await streaming.transcribe(samples)).text for utt, samples, _ in items}
    assert all(reference_transcripts.values()), reference_transcripts  # the reference decodes something
    differing = {utt: (served[utt], reference_transcripts[utt]) for utt in served
                 if served[utt] != reference_transcripts[utt]}
    assert not differing, differing
