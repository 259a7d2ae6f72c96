"""The offline and streaming ASR ensembles over gRPC, with the real tritonclient."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient

from tests.helpers.waiting import wait_until

SAMPLE_RATE = 16000
# The two streaming layouts of a built repository: one python model (the default), and WeNet's ensemble
# (streaming_feature_extractor -> wenet). Same inputs, outputs and transcripts.
LAYOUTS = {"streaming_wenet": ("streaming_wenet",),
           "streaming_wenet_ensemble": ("wenet", "streaming_feature_extractor")}


def utterance(seed: int, seconds: float = 2.0) -> np.ndarray:
    """A deterministic signal with some structure (tones + noise), float in [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    freqs = rng.uniform(150, 900, size=3)
    wave = sum(0.2 * np.sin(2 * np.pi * f * t * (1 + 0.1 * np.sin(2 * np.pi * 0.5 * t))) for f in freqs)
    return (wave + 0.05 * rng.normal(size=t.size)).astype(np.float32)


def wav_inputs(samples: np.ndarray) -> list:
    wav = aioclient.InferInput("WAV", [1, samples.size], "FP32")
    wav.set_data_from_numpy(samples.reshape(1, -1))
    lens = aioclient.InferInput("WAV_LENS", [1, 1], "INT32")
    lens.set_data_from_numpy(np.array([[samples.size]], dtype=np.int32))
    return [wav, lens]


def chunks_of(samples: np.ndarray, sizes) -> list[np.ndarray]:
    out, pos, i = [], 0, 0
    while pos < samples.size:
        size = sizes[min(i, len(sizes) - 1)]
        out.append(samples[pos:pos + size])
        pos += size
        i += 1
    return out


async def stream(client, samples: np.ndarray, sizes, sequence_id: int, model: str = "streaming_wenet") -> list[str]:
    """Send one utterance chunk by chunk on its own stream; return every response's transcript."""
    pieces = chunks_of(samples, sizes)

    async def requests():
        for i, piece in enumerate(pieces):
            yield dict(model_name=model, inputs=wav_inputs(piece), sequence_id=sequence_id,
                       sequence_start=i == 0, sequence_end=i == len(pieces) - 1, request_id=str(i))

    texts = []
    async for result, error in client.stream_infer(requests()):
        assert error is None, error
        texts.append(result.as_numpy("TRANSCRIPTS")[0].decode())  # [1], as WeNet's streaming model answers
        if len(texts) == len(pieces):
            break
    return texts


@pytest.fixture
async def client(asr_repo, running):
    async with running(asr_repo, allow_http=False) as server:
        c = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        c.server = server
        yield c
        await c.close()


async def test_offline_ensemble_transcribes_a_batch_of_different_lengths(client):
    results = await asyncio.gather(*(client.infer("attention_rescoring", wav_inputs(utterance(s, 1 + s / 2)))
                                     for s in range(4)))
    texts = [r.as_numpy("TRANSCRIPTS")[0, 0].decode() for r in results]
    again = [(await client.infer("attention_rescoring", wav_inputs(utterance(s, 1 + s / 2))))
             .as_numpy("TRANSCRIPTS")[0, 0].decode() for s in range(4)]
    assert texts == again  # batching with other requests does not change a transcript
    assert any(texts)


async def test_streaming_result_does_not_depend_on_chunk_sizes_or_layout(client):
    samples = utterance(7, 3.0)
    finals = {}
    for model in LAYOUTS:
        for label, sizes in (("100 ms", [1600]), ("640 ms", [10240]), ("wenet", [11040, 10240]),
                             ("uneven", [777, 5000, 123, 9000])):
            texts = await stream(client, samples, sizes, sequence_id=hash(label) % 10_000 + 1, model=model)
            assert len(texts) == len(chunks_of(samples, sizes))
            finals[model, label] = texts[-1]
    assert len(set(finals.values())) == 1, finals


async def test_wenet_streaming_client_request_pattern(client):
    """What WeNet's runtime/gpu/client/speech_client.py sends: unary ModelInfer with a sequence id, the first
    chunk 11040 samples and the others 10240, each zero-padded to that size with WAV_LENS the real count;
    it reads each answer with `as_numpy("TRANSCRIPTS")[0].decode("utf-8")`."""
    samples = utterance(11, 2.5)
    pieces = chunks_of(samples, [11040, 10240])
    texts = []
    for i, piece in enumerate(pieces):
        padded = np.zeros(11040 if i == 0 else 10240, dtype=np.float32)
        padded[:piece.size] = piece
        wav = aioclient.InferInput("WAV", [1, padded.size], "FP32")
        wav.set_data_from_numpy(padded[None])
        lens = aioclient.InferInput("WAV_LENS", [1, 1], "INT32")
        lens.set_data_from_numpy(np.array([[piece.size]], dtype=np.int32))
        result = await client.infer("streaming_wenet", [wav, lens], sequence_id=10086, sequence_start=i == 0,
                                    sequence_end=i == len(pieces) - 1,
                                    outputs=[aioclient.InferRequestedOutput("TRANSCRIPTS")])
        assert result.as_numpy("TRANSCRIPTS").shape == (1,)
        texts.append(result.as_numpy("TRANSCRIPTS")[0].decode("utf-8"))
    # zero padding past WAV_LENS is ignored: the same final as streaming the bare samples
    assert texts[-1] == (await stream(client, samples, [11040, 10240], sequence_id=10087))[-1]


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_twenty_interleaved_streams_match_single_runs(client, layout):
    samples = [utterance(100 + i, 1.0 + (i % 4) * 0.4) for i in range(20)]
    alone = [(await stream(client, s, [6400], sequence_id=500 + i, model=layout))[-1]
             for i, s in enumerate(samples[:4])]
    together = await asyncio.gather(*(stream(client, s, [3200], sequence_id=1000 + i, model=layout)
                                      for i, s in enumerate(samples)))
    assert [t[-1] for t in together[:4]] == alone
    # streams shared scorer batches, so the encoder (run inside the scorer) ran their windows together
    scorer = LAYOUTS[layout][0]
    stats = (await client.get_inference_statistics(scorer, as_json=True))["model_stats"][0]
    assert int(stats["execution_count"]) < int(stats["inference_count"])
    for name in (*LAYOUTS[layout], "streaming_encoder"):
        assert client.server.manager.get(name).scheduler.sequences == {}


async def test_the_scorer_calling_its_models_through_bls_gives_the_same_transcripts(client, asr_repo_bls, running):
    """--streaming-bls: the streaming encoder as its own model (caches as its implicit state) and the decoder
    through BLS; the transcripts equal the default's, where the scorer runs both graphs itself."""
    samples = [utterance(300 + i, 1.0 + (i % 3) * 0.5) for i in range(8)]
    inline = await asyncio.gather(*(stream(client, s, [3200], sequence_id=3000 + i) for i, s in enumerate(samples)))
    async with running(asr_repo_bls, allow_http=False) as server:
        bls = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            assert all(m.recogniser.inline_encoder is None for m in python_models(server, "streaming_wenet"))
            called = await asyncio.gather(*(stream(bls, s, [3200], sequence_id=3000 + i)
                                            for i, s in enumerate(samples)))
            stats = (await bls.get_inference_statistics("streaming_encoder", as_json=True))["model_stats"][0]
            assert int(stats["execution_count"]) < int(stats["inference_count"])  # its sequence batcher batched
            decoder = (await bls.get_inference_statistics("decoder", as_json=True))["model_stats"][0]
            assert int(decoder["inference_count"]) > 0
        finally:
            await bls.close()
    assert [t[-1] for t in called] == [t[-1] for t in inline]


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_abandoned_stream_is_cleaned_up(client, layout):
    server = client.server
    samples = utterance(9, 2.0)
    pieces = chunks_of(samples, [6400])
    scorer_model, extractor_model = LAYOUTS[layout][0], LAYOUTS[layout][-1]
    models = LAYOUTS[layout]

    async def first_two():
        for i, piece in enumerate(pieces[:2]):
            yield dict(model_name=layout, inputs=wav_inputs(piece), sequence_id=4242,
                       sequence_start=i == 0, sequence_end=False)

    got = 0
    async for result, error in client.stream_infer(first_two()):
        assert error is None
        got += 1
        if got == 2:
            break
    assert 4242 in server.manager.get(scorer_model).scheduler.sequences
    # The client went away without END: after the idle timeout every model has dropped the sequence.
    for name in models:
        scheduler = server.manager.get(name).scheduler
        scheduler.options = dataclasses.replace(scheduler.options, idle_s=0.05)
        scheduler.poke()
    await wait_until(lambda: all(4242 not in server.manager.get(n).scheduler.sequences for n in models), 10.0)
    for name in (*models, "streaming_encoder"):
        assert 4242 not in server.manager.get(name).scheduler.sequences, name
    # The python models keep their own per-sequence state in the instance that ran the sequence: one object
    # per stream (fbank residual, decoding state, the inline encoder's caches) in one registry per model
    # instance, with one idle limit; an instance drops idle streams on its next execution.
    scorers = [m.recogniser for m in python_models(server, scorer_model)]
    assert all(r.inline_encoder is not None for r in scorers)  # the repository's default: caches kept here
    registries = {id(r): r for r in [*(r.streams for r in scorers),
                                     *(m.features.streams for m in python_models(server, extractor_model))]}
    holding = [r for r in registries.values() if 4242 in r]
    assert holding
    stream_parts = [r.get(4242) for r in holding]
    assert any(s.decoding is not None and s.encoder_cache is not None for s in stream_parts)
    assert any(s.fbank is not None for s in stream_parts)
    for registry in registries.values():
        registry.idle_seconds = 0.01  # the one idle setting
    await asyncio.sleep(0.05)
    # New sequences go to the instances in turn: one per instance runs every instance once.
    for k in range(len(scorers)):
        await stream(client, utterance(10, 0.5), [8000], sequence_id=4343 + k, model=layout)
    assert all(len(r) == 0 for r in registries.values())


def python_models(server, name: str) -> list:
    """The TritonPythonModel objects of every instance of a python model."""
    return [instance.backend._model for instance in server.manager.get(name).pool.instances]


async def test_bad_audio_fails_alone_in_tritons_words(client):
    from tritonclient.utils import InferenceServerException

    good = utterance(21, 1.5)
    alone = (await client.infer("attention_rescoring", wav_inputs(good))).as_numpy("TRANSCRIPTS")[0, 0]
    nan = good.copy()
    nan[100] = np.nan
    wrong_length = wav_inputs(good)
    wrong_length[1].set_data_from_numpy(np.array([[good.size + 1]], dtype=np.int32))
    results = await asyncio.gather(client.infer("attention_rescoring", wav_inputs(nan)),
                                   client.infer("attention_rescoring", wrong_length),
                                   client.infer("attention_rescoring", wav_inputs(good)), return_exceptions=True)
    for error, text in zip(results[:2], ("WAV holds NaN or infinite samples", f"WAV_LENS is {good.size + 1}")):
        assert isinstance(error, InferenceServerException), error
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert text in error.message()
    assert results[2].as_numpy("TRANSCRIPTS")[0, 0] == alone  # its batch neighbours' errors did not touch it
    # audio too short for one encoder frame (even none) is an empty transcript, not an error
    for samples in (np.zeros(0, np.float32), good[:100]):
        assert (await client.infer("attention_rescoring", wav_inputs(samples))).as_numpy("TRANSCRIPTS")[0, 0] == b""


async def test_a_bad_chunk_fails_alone_and_its_stream_goes_on(client):
    samples = utterance(22, 2.0)
    pieces = chunks_of(samples, [6400])
    clean = await stream(client, samples, [6400], sequence_id=3131)

    async def requests():
        for i, piece in enumerate(pieces):
            if i == 1:  # a broken chunk in the middle: WAV_LENS larger than WAV
                bad = wav_inputs(piece)
                bad[1].set_data_from_numpy(np.array([[piece.size + 5]], dtype=np.int32))
                yield dict(model_name="streaming_wenet", inputs=bad, sequence_id=3132, sequence_start=False,
                           sequence_end=False)
            yield dict(model_name="streaming_wenet", inputs=wav_inputs(piece), sequence_id=3132,
                       sequence_start=i == 0, sequence_end=i == len(pieces) - 1)

    texts, errors = [], []
    async for result, error in client.stream_infer(requests()):
        if error is not None:
            errors.append(error)
        else:
            texts.append(result.as_numpy("TRANSCRIPTS")[0].decode())
        if len(texts) + len(errors) == len(pieces) + 1:
            break
    assert len(errors) == 1 and "WAV_LENS is" in errors[0].message()
    assert texts == clean
    for name in ("streaming_wenet", "streaming_encoder"):
        assert client.server.manager.get(name).scheduler.sequences == {}


async def _stream_results(client, pieces, sequence_id: int, fail_at=None) -> list:
    """(transcript or None, error or None) per chunk of one stream."""

    async def requests():
        for i, piece in enumerate(pieces):
            yield dict(model_name="streaming_wenet", inputs=wav_inputs(piece), sequence_id=sequence_id,
                       sequence_start=i == 0, sequence_end=i == len(pieces) - 1, request_id=str(i))

    out = []
    async for result, error in client.stream_infer(requests()):
        out.append((None, error) if error is not None else (result.as_numpy("TRANSCRIPTS")[0].decode(), None))
        if len(out) == len(pieces):
            break
    return out


async def test_a_stream_whose_chunk_fails_answers_errors_until_end_never_a_silent_restart(client):
    """After an encoder failure the next chunk silently started a new sequence and END answered
    "successfully" with only the audio after the failure."""
    wenets = [m.recogniser for m in python_models(client.server, "streaming_wenet")]  # the stream runs on one
    calls = {"n": 0}

    def failing_on(real):
        def failing(jobs):
            results = real(jobs)
            for i, job in enumerate(jobs):
                if job.key == 5151:
                    calls["n"] += 1
                    if calls["n"] == 3:
                        results[i] = RuntimeError("Gather: indices element out of data bounds")
            return results
        return failing

    reals = [wenet.run_encoder for wenet in wenets]
    for wenet, real in zip(wenets, reals):
        wenet.run_encoder = failing_on(real)
    try:
        pieces = chunks_of(utterance(30, 3.0), [4000])
        got, other = await asyncio.gather(_stream_results(client, pieces, 5151),
                                          _stream_results(client, pieces, 5152))
    finally:
        for wenet, real in zip(wenets, reals):
            wenet.run_encoder = real
    errors = [i for i, (_, error) in enumerate(got) if error is not None]
    first = errors[0]
    assert errors == list(range(first, len(pieces)))  # every chunk from the failure on, END included
    assert "Gather" in got[first][1].message() and "failed on an earlier chunk" in got[-1][1].message()
    assert all(error is None for _, error in other)  # the other stream of the same batches is untouched
    assert all(len(w.streams) == 0 for w in wenets)  # END freed every part of the stream
    again = await stream(client, utterance(30, 3.0), [4000], sequence_id=5151)  # a new START works
    assert again[-1] == other[-1][0]


async def test_a_stream_longer_than_the_positional_table_decodes_through_the_server(client, asr_repo, running,
                                                                                    tmp_path):
    """The served streaming encoder with a 40-row table (as if 5000 rows were 1.6 s): a 6 s stream runs to
    END without errors, and its partials before the clamp point equal those of the full-table encoder."""
    import shutil

    from asr_server.asr.export.encoders import export_streaming_encoder
    from asr_server.asr.export.options import ExportOptions
    from tests.asr.conftest import tiny_model
    from tests.e2e.conftest import CHUNK, LEFT_CHUNKS

    repo = tmp_path / "repo"
    shutil.copytree(asr_repo, repo)
    (tmp_path / "model").symlink_to(asr_repo.parent / "model")  # the configs point at ../../model
    model = tiny_model(seed=3)  # the weights asr_repo was exported from
    model.encoder.embed.pos_enc.pe = model.encoder.embed.pos_enc.pe[:40].clone()
    graph = repo / "streaming_encoder" / "1" / "streaming_encoder.onnx"
    assert export_streaming_encoder(model, graph, ExportOptions(CHUNK, LEFT_CHUNKS, beam=4)).ok
    pieces = chunks_of(utterance(31, 6.0), [2560])  # 160 ms: one encoder chunk each
    async with running(repo, allow_http=False) as server:
        c = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        short = await _stream_results(c, pieces, 77)
        await c.close()
    assert all(error is None for _, error in short), [e for _, e in short if e][:1]
    full = await _stream_results(client, pieces, 77)
    # chunk k's window ends at encoder frame 4(k+1)+1; rows stay inside 40 while its start (offset - 8) <= 28
    unclamped = 8
    assert [t for t, _ in short[:unclamped]] == [t for t, _ in full[:unclamped]]


async def test_offline_audio_longer_than_the_configured_maximum_is_refused_alone(client):
    """200 s of offline audio failed with INTERNAL inside the encoder after costing GBs of RSS."""
    from tritonclient.utils import InferenceServerException

    assert python_models(client.server, "feature_extractor")[0].max_samples == 60 * SAMPLE_RATE  # built repo: 60 s
    too_long = np.zeros(61 * SAMPLE_RATE, np.float32)
    good = utterance(32, 1.0)
    results = await asyncio.gather(client.infer("attention_rescoring", wav_inputs(too_long)),
                                   client.infer("attention_rescoring", wav_inputs(good)), return_exceptions=True)
    assert isinstance(results[0], InferenceServerException), results[0]
    assert results[0].status() == "StatusCode.INVALID_ARGUMENT"
    assert "WAV_LENS is 976000 samples (61.0 s), longer than the 60 s this model accepts" in results[0].message()
    assert results[1].as_numpy("TRANSCRIPTS").shape == (1, 1)


async def test_a_batch_of_two_to_streaming_wenet_is_refused_not_cut_to_its_first_row(client):
    """The second row was silently dropped. Triton's sequence batcher refuses batch sizes > 1."""
    from tritonclient.utils import InferenceServerException

    samples = utterance(33, 0.5)
    wav = aioclient.InferInput("WAV", [2, samples.size], "FP32")
    wav.set_data_from_numpy(np.stack([samples, samples]))
    lens = aioclient.InferInput("WAV_LENS", [2, 1], "INT32")
    lens.set_data_from_numpy(np.full((2, 1), samples.size, np.int32))
    with pytest.raises(InferenceServerException) as refused:
        await client.infer("streaming_wenet", [wav, lens], sequence_id=6161, sequence_start=True, sequence_end=True)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must specify batch-size 1 due to requirements of sequence batcher" in refused.value.message()
