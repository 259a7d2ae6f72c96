"""What DETAILS, hotwords and endpointing cost per chunk, word-timestamp accuracy, endpoint
delay after a 1 s pause, and a long file in pieces against its parts one by one.

    python -m bench.asr_extras [--repo model_repo] [--skip-server]

1. per-chunk cost (no server): the bundled streaming encoder (ONNX Runtime, batch 1) runs once over the
   held-out utterances; its outputs are replayed through StreamingScorer.step plain, with DETAILS (words and
   n-best every chunk), with 100 hotwords, and with endpointing; the figure is the scorer's time per chunk.
2. timestamps: 6 sentences synthesised whole with espeak-ng, word k ending where the synthesis of words
   1..k stops sounding, recognised offline and streaming with details=true; mean |start error| and |end
   error| over the words the recogniser got right. --calibrate first measures the model's emission lags
   (timestamp_shift_ms) on 30 other sentences.
3. endpoint: two synthesised sentences with a 1 s pause, streamed in 640 ms chunks with endpointing, at four
   phases of the chunk grid: where the segment ended after the first sentence's last word, how much audio the
   client had sent when its final came, and how many single sentences a rule cuts in two.
4. long file: a 10-minute recording of synthesised sentences over one background noise, `transcribe_long`
   (pieces in parallel) against its sentences cut out and sent one by one; WER and wall time. Then the demo
   utterances joined with low noise between them, against the utterances alone.
5. hotwords: phrases the demo model never heard in training, missed without their hotword and found with it
   (offline and streaming), and the held-out utterances' WER with and without the list.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from bench._server import serve_repository, server_process

RATE = 16000
CALIBRATE = False  # --calibrate
LONG_MINUTES = 10.0  # --long-minutes
FLUENT = True  # whole sentences, boundaries from synthesising prefixes (False: words synthesised one by one)
# --calibrate measures the model's emission lags on CALIBRATION_COUNT sentences drawn as the demo corpus draws
# them (seed CALIBRATION_SEED), never one of the evaluation sentences below
CALIBRATION_SEED, CALIBRATION_COUNT = 11, 30
SENTENCES = ["can you bring two chairs to the beach", "i need twelve brown boxes",
             "peter and rosa went to the market at five forty", "my phone number is zero four eight nine",
             "carla found a cup of tea on sunday", "the train to the garden leaves at seven ten"]


# ------------------------------------------------------------------------------------------- 1. cost


class OrtStreamingEncoder:
    """The streaming encoder graph, one job at a time, caches per key (what the server's sequence batcher
    holds as implicit state)."""

    def __init__(self, path: Path):
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.zero = {i.name: (i.shape[1:], np.int64 if "int64" in i.type else np.float32)
                     for i in self.session.get_inputs() if i.name in ("offset", "att_cache", "cnn_cache", "cache_mask")}
        self.state = {}

    def __call__(self, jobs):
        from asr_server.asr.serving.streaming_scorer import EncoderResult

        out = []
        for job in jobs:
            if job.start or job.key not in self.state:
                self.state[job.key] = {n: np.zeros([1, *shape], dtype) for n, (shape, dtype) in self.zero.items()}
            feeds = {"chunk_xs": job.window[None].astype(np.float32),
                     "chunk_lens": np.array([job.valid], np.int32), **self.state[job.key]}
            lp, ids, chunk_out, lens, *new = self.session.run(None, feeds)
            self.state[job.key] = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
            out.append(EncoderResult(lp[0], ids[0], chunk_out[0], int(lens.reshape(-1)[0])))
        return out


class Replay:
    """Records the encoder's results per (key, window) once, then answers from the record."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.record = {}
        self.count = {}

    def __call__(self, jobs):
        out = []
        for job in jobs:
            n = self.count.get(job.key, 0) if not job.start else 0
            self.count[job.key] = n + 1
            key = (job.key, n)
            if key not in self.record:
                self.record[key] = self.encoder([job])[0]
            out.append(self.record[key])
        return out


def scorer_cost(repo: Path, items) -> dict:
    from asr_server.asr.features.fbank import FbankConfig
    from asr_server.asr.serving.pipeline import StreamingFeatures
    from asr_server.asr.serving.streaming_scorer import StreamChunk, StreamingScorer
    from asr_server.asr.decoding.hotwords import Hotwords
    from asr_server.asr.serving import serving_config

    params = {k: v for k, v in _params(repo / "wenet" / "config.pbtxt").items()}
    tokenizer = serving_config.tokenizer({"model_repository": str(repo / "wenet")}, params)
    settings = serving_config.decoding_settings(params, tokenizer.symbols)
    window = serving_config.window_config(params)
    features = StreamingFeatures(FbankConfig())
    chunk = int(0.64 * RATE)
    streams = []
    for key, (_, samples, _) in enumerate(items):
        pieces = [samples[i:i + chunk] for i in range(0, len(samples), chunk)]
        frames = [features.accept_many([(key, p, i == 0, i == len(pieces) - 1)])[0] for i, p in enumerate(pieces)]
        streams.append(frames)
    replay = Replay(OrtStreamingEncoder(repo / "streaming_encoder" / "1" / "streaming_encoder.onnx"))
    nouns = ("chairs boxes market garden tea sunday beach station hospital office kitchen library airport museum "
             "bakery violin umbrella lamp bottle window").split()
    hot = "|".join(f"{a} {b}" for a in ("the", "two", "red", "my", "old") for b in nouns)  # 100 phrases
    variants = {
        "plain": ({}, False),
        "DETAILS (words + n-best every chunk)": ({"details": True}, True),
        "DETAILS without details=true": ({}, True),
        "100 hotwords": ({"hotwords": hot}, False),
        "endpointing": ({"endpoint": True}, False),
        "all three": ({"details": True, "hotwords": hot, "endpoint": True}, True),
    }
    results = {}
    for repeat in range(3):
        for name, (parameters, want) in variants.items():
            scorer = StreamingScorer(tokenizer, settings, window, 80, int(params["encoder_output_size"]),
                                     Hotwords(tokenizer.encode))
            spent, chunks = 0.0, 0
            for key, frames in enumerate(streams):
                for i, f in enumerate(frames):
                    c = StreamChunk(key, f, i == 0, i == len(frames) - 1, parameters if i == 0 else {}, want)
                    if repeat == 0 and name == "plain":
                        scorer.step([c], replay)  # records the encoder's outputs
                        continue
                    t0 = time.perf_counter()
                    scorer.step([c], replay)
                    spent += time.perf_counter() - t0
                    chunks += 1
            if chunks:
                results[name] = min(results.get(name, 1e9), 1e3 * spent / chunks)
    return results


def _params(config: Path) -> dict:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    parsed = text_format.Parse(config.read_text(), mc.ModelConfig())
    return {key: value.string_value for key, value in parsed.parameters.items()}


# ------------------------------------------------------------------------------------------- audio


def espeak(text: str, voice: str = "en-us", speed: int = 150) -> np.ndarray:
    from asr_client.audio import load_audio

    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", f.name, text], check=True)
        return load_audio(f.name).samples


def trim(samples: np.ndarray, floor_db: float = -45.0) -> np.ndarray:
    frame = 160
    n = len(samples) // frame
    db = 10 * np.log10(np.square(samples[: n * frame].reshape(n, frame)).mean(axis=1) + 1e-12)
    loud = np.nonzero(db > floor_db)[0]
    return samples[loud[0] * frame:(loud[-1] + 1) * frame] if loud.size else samples[:0]


def word_by_word(sentence: str, gap_s: float = 0.06, lead_s: float = 0.4):
    """(audio, [(word, start s, end s)]) of a sentence synthesised one word at a time."""
    parts, truth, pos = [np.zeros(int(lead_s * RATE), np.float32)], [], int(lead_s * RATE)
    for word in sentence.split():
        audio = trim(espeak(word))
        truth.append((word, pos / RATE, (pos + len(audio)) / RATE))
        parts += [audio, np.zeros(int(gap_s * RATE), np.float32)]
        pos += len(audio) + int(gap_s * RATE)
    parts.append(np.zeros(int(lead_s * RATE), np.float32))
    return np.concatenate(parts), truth


def loud_span(samples: np.ndarray, floor_db: float = -45.0) -> tuple[float, float]:
    frame = 160
    n = len(samples) // frame
    db = 10 * np.log10(np.square(samples[: n * frame].reshape(n, frame)).mean(axis=1) + 1e-12)
    loud = np.nonzero(db > floor_db)[0]
    return loud[0] * frame / RATE, (loud[-1] + 1) * frame / RATE


def fluent(sentence: str):
    """(audio, [(word, start s, end s)]) of a sentence synthesised whole; word k ends where the synthesis of
    words 1..k alone stops sounding (its last loud frame), and starts where word k-1 ended."""
    audio = espeak(sentence)
    words = sentence.split()
    start, _ = loud_span(audio)
    truth = []
    for k, word in enumerate(words):
        _, end = loud_span(espeak(" ".join(words[: k + 1]))) if k < len(words) - 1 else loud_span(audio)
        truth.append((word, start, end))
        start = end
    return audio, truth


def timing_errors(truth, words) -> tuple[list[float], list[float]]:
    import difflib

    ref = [w for w, _, _ in truth]
    hyp = [w["word"] for w in words]
    starts, ends = [], []
    for block in difflib.SequenceMatcher(a=ref, b=hyp, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            _, s, e = truth[block.a + k]
            w = words[block.b + k]
            starts.append(abs(w["start"] - s))
            ends.append(abs(w["end"] - e))
    return starts, ends


def make_corpus():
    """scripts/make_corpus.py's sentence and voice drawing (scripts/ is not a package)."""
    import runpy
    import types

    return types.SimpleNamespace(**runpy.run_path(str(ROOT / "scripts" / "make_corpus.py"), run_name="make_corpus"))


def calibration_sentences() -> list[str]:
    import random

    corpus, rng, out = make_corpus(), random.Random(CALIBRATION_SEED), []
    while len(out) < CALIBRATION_COUNT:
        sentence = corpus.sentence(rng)
        if sentence not in SENTENCES and sentence not in out:
            out.append(sentence)
    return out


def token_words(details: dict) -> list[dict]:
    """Words with the times of their first and last token: what the alignment gives before the boundaries
    between words are shared (alignment.word_times), which is what the lags are measured on."""
    words = []
    for t in details.get("tokens", []):
        unit = t["token"]
        if unit == "\u2581":  # character units: a bare word mark only separates words
            words.append(None)
        elif unit.startswith("\u2581") or not words or words[-1] is None:
            words.append({"word": unit.lstrip("\u2581"), "start": t["start"], "end": t["end"]})
        else:
            words[-1] = {**words[-1], "word": words[-1]["word"] + unit, "end": t["end"]}
    return [w for w in words if w]


async def calibrate(client) -> None:
    """The model's emission lags against espeak-ng's boundaries, on sentences kept apart from the evaluation
    ones: how much later than the configured shift a word's first token (words after the first), its last
    token, and the first word's first token come (medians: the figure is a mean absolute error)."""
    from asr_client.offline import recognize

    starts, ends, firsts = [], [], []
    for sentence in calibration_sentences():
        audio, truth = fluent(sentence)
        r = await recognize(client, audio, parameters={"details": True}, details=True)
        words = token_words(r.details)
        ref, hyp = [w for w, _, _ in truth], [w["word"] for w in words]
        for block in difflib.SequenceMatcher(a=ref, b=hyp, autojunk=False).get_matching_blocks():
            for k in range(block.size):
                _, s, e = truth[block.a + k]
                w = words[block.b + k]
                (firsts if block.b + k == 0 else starts).append(w["start"] - s)
                ends.append(w["end"] - e)
    start, end = np.median(starts), np.median(ends)
    onset = np.median(firsts) - start
    print(f"\ncalibration ({CALIBRATION_COUNT} sentences, {len(ends)} words): beyond the configured "
          f"timestamp_shift_ms, first tokens come a median {1e3 * start:.0f} ms late and last tokens "
          f"{1e3 * end:.0f} ms (add them to its START,END); a segment's first word comes {1e3 * onset:.0f} ms later "
          f"still (token times do not carry ONSET: that is its value). build_model_repo.py --timestamp-shift-ms")


async def timestamps(client, url: str) -> None:
    """2.: mean |start error| and |end error| of the words recognised right, offline and streaming."""
    from asr_client.offline import recognize
    from asr_client.streaming import StreamingClient, StreamOptions

    offline_s, offline_e, stream_s, stream_e = [], [], [], []
    for sentence in SENTENCES:
        audio, truth = fluent(sentence) if FLUENT else word_by_word(sentence)
        r = await recognize(client, audio, parameters={"details": True}, details=True)
        s, e = timing_errors(truth, r.details["words"])
        offline_s += s
        offline_e += e
        async with StreamingClient(url, StreamOptions(chunk_ms=640, parameters={"details": True},
                                                      details=True)) as streaming:
            result = await streaming.transcribe(audio)
        words = [w for p in result.partials for f in p.finals for w in f.get("words", [])]
        s, e = timing_errors(truth, words)
        stream_s += s
        stream_e += e
    print(f"\n2. word timestamps vs espeak-ng {'prefix-synthesis' if FLUENT else 'word-by-word'} boundaries "
          f"({len(SENTENCES)} sentences):")
    print(f"   offline:   {len(offline_s)} words, mean |start error| {1e3 * np.mean(offline_s):.0f} ms, "
          f"mean |end error| {1e3 * np.mean(offline_e):.0f} ms, mean of both "
          f"{1e3 * np.mean(offline_s + offline_e):.0f} ms")
    print(f"   streaming: {len(stream_s)} words, mean |start error| {1e3 * np.mean(stream_s):.0f} ms, "
          f"mean |end error| {1e3 * np.mean(stream_e):.0f} ms, mean of both "
          f"{1e3 * np.mean(stream_s + stream_e):.0f} ms")


async def endpoint_delay(url: str, items=()) -> None:
    """3.: two sentences with a 1 s pause between them, streamed with endpointing in 640 ms chunks, the pause
    at four phases of the chunk grid (0/160/320/480 ms of lead-in): where the first segment ended, and what
    the user sees: how much audio had been sent when its final came back (the final can only come with the
    chunk that completes the decoding window holding the endpoint), and that response's round trip (it
    carries the rescoring) against the other chunks'. Then the price: single sentences (``items``) that a
    threshold cuts in two."""
    from asr_client.streaming import StreamingClient, StreamOptions
    from asr_server.asr.decoding.endpoint import EndpointRules

    noise = (0.002 * np.random.default_rng(1).standard_normal(RATE)).astype(np.float32)
    pairs = []
    for first, second in zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1]):
        a, b = espeak(first), espeak(second)
        pairs.append((a[:int(loud_span(a)[1] * RATE)], trim(b)))
    print("\n3. endpoint after a 1 s pause (640 ms chunks, 24 pauses: 6 sentence pairs x 4 phases):")
    default = EndpointRules()
    blank_only = {"endpoint_rule2_quiet_db": 0, "endpoint_rule4_silence": 10}
    settings = {
        "any blanks 0.8 s (the rule before)": {"endpoint_rule2_silence": 0.8, **blank_only},
        "any blanks 0.5 s": {"endpoint_rule2_silence": 0.5, **blank_only},
        f"default: quiet blanks {default.rule2_silence} s ({default.rule2_quiet_db:g} dB), any blanks "
        f"{default.rule4_silence} s": {},
        "quiet blanks 0.6 s": {"endpoint_rule2_silence": 0.6},
    }
    for name, rules in settings.items():
        ends, arrivals, final_rtt, other_rtt, missed, early = [], [], [], [], 0, 0
        parameters = {"endpoint": True, **rules}
        for a, b in pairs:
            for lead_ms in (0, 160, 320, 480):
                lead = noise[:lead_ms * RATE // 1000]
                audio = np.concatenate([lead, a, noise, b, noise[:RATE // 2]])
                speech_end = (len(lead) + len(a)) / RATE
                async with StreamingClient(url, StreamOptions(chunk_ms=640, parameters=parameters,
                                                              details=True)) as streaming:
                    result = await streaming.transcribe(audio)
                # the endpoint of the pause: the first segment to end after the first sentence (an earlier one
                # cut the sentence itself)
                ended = [(p, f) for p in result.partials for f in p.finals]
                early += any(f["end"] < speech_end - 0.1 for _, f in ended)
                after = [(p, f) for p, f in ended if f["end"] >= speech_end - 0.1]
                if not after or after[0][1]["end"] > speech_end + 1.0 + 0.5:
                    missed += 1
                    continue
                p, f = after[0]
                ends.append(f["end"] - speech_end)
                arrivals.append(p.audio_end_s - speech_end)
                final_rtt.append(p.latency_s)
                other_rtt += [q.latency_s for q in result.partials[:-1] if q is not p]
        arrivals_ms = 1e3 * np.array(arrivals) if arrivals else np.zeros(1)
        print(f"   {name}: {len(ends)} of {len(ends) + missed} pauses ended a segment ({early} first sentences "
              f"also cut inside), mean {1e3 * np.mean(ends):.0f} ms after the last word; the final came "
              f"once the client had sent audio up to mean {arrivals_ms.mean():.0f} ms, max {arrivals_ms.max():.0f} "
              f"ms after it (mean {arrivals_ms.mean() - 1000:.0f}, max {arrivals_ms.max() - 1000:.0f} ms after the "
              f"1 s pause); {np.mean(arrivals_ms <= 1300) * 100:.0f}% within 300 ms; round trip of that response "
              f"{1e3 * np.median(final_rtt):.0f} ms (median), of the other chunks {1e3 * np.median(other_rtt):.0f} ms")
        if items:
            split = 0
            for _, samples, _ in items:
                async with StreamingClient(url, StreamOptions(chunk_ms=640, parameters=parameters,
                                                              details=True)) as streaming:
                    result = await streaming.transcribe(samples)
                split += sum(len(p.finals) for p in result.partials) > 1
            print(f"      single sentences cut in two or more segments: {split} of {len(items)}")

RARE = [("cup_of_coffee", "cup of coffee", {}), ("paula", "paula", {"hotwords_score": 3.0})]


async def hotwords(client, url: str, items) -> None:
    """5.: phrases the demo model never heard in training (tests/data/rare_phrases), missed without their
    hotword and found with it, offline (the search also tries hotword tokens outside a frame's top-k: the
    ensemble passes every token's log-prob) and streaming (the streaming encoder gives its top-k only); then the
    held-out utterances, which say none of them, with and without the list."""
    from asr_client.audio import load_audio
    from asr_client.offline import recognize
    from asr_client.report import error_rates
    from asr_client.streaming import StreamingClient, StreamOptions

    async def streamed(samples, parameters):
        async with StreamingClient(url, StreamOptions(parameters=parameters or None)) as streaming:
            return (await streaming.transcribe(samples)).text

    print("\n5. hotwords, phrases never heard in training (offline / streaming):")
    for name, phrase, extra in RARE:
        samples = load_audio(ROOT / "tests" / "data" / "rare_phrases" / f"{name}.flac").samples
        hot = {"hotwords": phrase, **extra}
        rows = [(await recognize(client, samples, parameters=p or None)).text for p in ({}, hot)]
        rows += [await streamed(samples, p) for p in ({}, hot)]
        print(f"   {phrase!r} {extra or ''}: without {rows[0]!r} / {rows[2]!r}; with {rows[1]!r} / {rows[3]!r}")
    refs = [ref for _, _, ref in items]
    for hot in ({"hotwords": "cup of coffee|floor ninety"}, {"hotwords": "cup of coffee|floor ninety|paula:3"}):
        plain = [(await recognize(client, samples)).text for _, samples, _ in items]
        biased = [(await recognize(client, samples, parameters=hot)).text for _, samples, _ in items]
        wer = [100 * error_rates(list(zip(refs, hyps))).wer for hyps in (plain, biased)]
        print(f"   {len(items)} held-out utterances, offline WER without / with {hot['hotwords']!r}: "
              f"{wer[0]:.2f}% / {wer[1]:.2f}%"
              + "".join(f"; {r!r} -> {b!r}" for r, p, b in zip(refs, plain, biased) if p != b))


# ------------------------------------------------------------------------------------------- served


async def served(url: str, items) -> None:
    import tritonclient.grpc.aio as aioclient

    client = aioclient.InferenceServerClient(url)
    if CALIBRATE:
        await calibrate(client)
    # 2. timestamps
    if shutil.which("espeak-ng"):
        await timestamps(client, url)
        await endpoint_delay(url, items)
    # 4. long file
    await long_file(client, items)
    # 5. hotwords
    await hotwords(client, url, items)
    await client.close()


# ------------------------------------------------------------------------------------------- 4. long file


def recording(minutes: float, seed: int = 7, noise_std: float = 0.002):
    """(audio, part bounds, texts): a recording of about ``minutes`` of synthesised sentences one after the
    other over one continuous background noise, as a real recording has; the parts are the sentences cut from
    the recording, each with its own lead-in and tail (what scripts/make_corpus.py makes of one sentence; the
    pauses between them are left out). Sentences, voices, speeds and pitches are drawn as
    scripts/make_corpus.py draws its test sets (its own synthesis, without its per-utterance noise), with
    0.5-1.0 s of pause added between sentences beside their own 0.05-0.4 s lead-in and tail."""
    import random

    from asr_client.audio import load_audio

    corpus = make_corpus()

    rng = random.Random(seed)
    variants = sorted(v.name for v in corpus.VARIANTS_DIR.iterdir()) if corpus.VARIANTS_DIR.is_dir() else []
    pieces, texts, bounds, pos = [], [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "wavs" / "long").mkdir(parents=True)
        while pos < minutes * 60 * RATE:
            voice = rng.choice(corpus.ACCENTS)
            if variants and rng.random() < 0.5:
                voice += "+" + rng.choice(variants)
            settings = {**corpus.random_settings(rng), "snr_db": float("inf")}
            job = corpus.Job("long", f"u{len(texts):04d}", corpus.sentence(rng), voice,
                                  seed=rng.randrange(2 ** 31), **settings)
            made = corpus.synthesise(job, Path(tmp))
            if made is None:
                continue
            speech = load_audio(made[2]).samples
            pause = np.zeros(int(rng.uniform(0.5, 1.0) * RATE), np.float32)
            bounds.append((pos, pos + len(speech)))
            pieces += [speech, pause]
            texts.append(job.text)
            pos += len(speech) + len(pause)
    audio = np.concatenate(pieces)
    audio += (noise_std * np.random.default_rng(seed).standard_normal(len(audio))).astype(np.float32)
    return np.clip(audio, -1, 1), bounds, texts


async def long_against_parts(client, audio, parts, texts) -> tuple[dict, dict, object]:
    """WER and wall time (best of two) of the parts sent one by one, and of transcribe_long on the whole."""
    from asr_client.longform import transcribe_long
    from asr_client.offline import recognize
    from asr_client.report import error_rates

    reference = " ".join(texts)
    sequential, together = [], []
    for _ in range(2):  # alternated, best of two: the machine is shared
        t0 = time.perf_counter()
        one_by_one = [await recognize(client, audio[a:b]) for a, b in parts]
        sequential.append(time.perf_counter() - t0)
        long = await transcribe_long(client, audio, concurrency=4)
        together.append(long.latency_s)
    hyp_parts = " ".join(r.text for r in one_by_one)
    return ({"wer": error_rates([(reference, hyp_parts)]).wer, "seconds": min(sequential)},
            {"wer": error_rates([(reference, long.text)]).wer, "seconds": min(together)}, long)


async def long_file(client, items) -> None:
    from asr_client.offline import recognize

    await recognize(client, items[0][1])  # warm-up
    audio, parts, texts = recording(LONG_MINUTES)
    alone, long, result = await long_against_parts(client, audio, parts, texts)
    print(f"\n4. long file: a {len(audio) / RATE / 60:.1f}-min recording of {len(texts)} synthesised sentences over "
          f"one background noise (make_corpus voices), against its sentences one by one:")
    print(f"   parts one by one {alone['seconds']:.1f} s, WER {100 * alone['wer']:.2f}%; transcribe_long "
          f"(concurrency 4, {len(result.pieces)} pieces) {long['seconds']:.1f} s, WER {100 * long['wer']:.2f}%")
    # the demo utterances joined with low noise between them: each utterance keeps its own background (or
    # digital silence) and the pauses are another, so a piece's start holds a change of background that the
    # utterance alone does not (the figure the first version of this benchmark printed)
    rng = np.random.default_rng(0)
    joined, spans, refs, pos = [], [], [], 0
    while pos < 600 * RATE:
        for _, samples, ref in items:
            pause = (0.002 * rng.standard_normal(int(0.7 * RATE))).astype(np.float32)
            joined += [samples, pause]
            spans.append((pos, pos + len(samples)))
            refs.append(ref)
            pos += len(samples) + len(pause)
    audio = np.concatenate(joined)
    alone, long, result = await long_against_parts(client, audio, spans, refs)
    print(f"   the {len(items)} demo utterances repeated into {len(audio) / RATE / 60:.1f} min with 0.7 s of low "
          f"noise between them, against the utterances alone: one by one {alone['seconds']:.1f} s, WER "
          f"{100 * alone['wer']:.2f}%; transcribe_long ({len(result.pieces)} pieces) {long['seconds']:.1f} s, "
          f"WER {100 * long['wer']:.2f}%")


def main() -> int:
    global CALIBRATE, LONG_MINUTES
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repo")
    parser.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    parser.add_argument("--skip-server", action="store_true", help="only the per-chunk cost (1.)")
    parser.add_argument("--calibrate", action="store_true",
                        help="also measure how late the model's word times are (for --timestamp-shift-ms)")
    parser.add_argument("--long-minutes", type=float, default=LONG_MINUTES,
                        help="length of the synthesised recording of 4.")
    args = parser.parse_args()
    CALIBRATE, LONG_MINUTES = args.calibrate, args.long_minutes
    from bench.asr import load_data  # bench/asr.py

    items = load_data(args.data)
    cost = scorer_cost(args.repo, items)
    print("1. StreamingScorer.step per 640 ms chunk (batch 1, encoder replayed, best of 3):")
    for name, ms in cost.items():
        print(f"   {name:40s} {ms:6.3f} ms  ({ms / cost['plain']:.2f}x plain)")
    if args.skip_server:
        return 0
    with server_process(serve_repository, str(args.repo)) as (_, port):
        asyncio.run(served(f"127.0.0.1:{port}", items))
    return 0


if __name__ == "__main__":
    sys.exit(main())
