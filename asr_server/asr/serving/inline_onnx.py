"""The streaming encoder and the attention decoder run in the scoring model's own process, with onnxruntime.

The streaming scorer (``streaming_scorer.StreamingScorer``) calls its encoder and decoder through plain
functions. With the scorer config's parameters ``encoder_onnx`` / ``decoder_onnx`` (build_model_repo.py's
default) ``streaming_recogniser.StreamingRecogniser`` runs those graphs here: one onnxruntime call per round of
windows, no request, no second scheduler, no thread hop, and each sequence's caches in one dict beside it.
Without them it makes BLS requests to the ``streaming_encoder`` and ``decoder`` models (the encoder's caches
then live as implicit state in that model's sequence batcher): the way to a TensorRT or GPU encoder.
Measured with ``python -m bench.stream_cpu``.
"""

from __future__ import annotations

import threading
import time
import weakref
from pathlib import Path
from typing import Callable, Hashable, Optional, Sequence, Union

import numpy as np

from .stream_state import Streams
from .streaming_scorer import EncoderJob, EncoderResult
from ..graph_names import STREAMING_ENCODER_OUTPUTS, STREAMING_STATES

STATE_OUTPUTS = STREAMING_STATES  # the streaming encoder's carried state: input -> output with its next value
ENCODER_OUTPUTS = STREAMING_ENCODER_OUTPUTS
# The wenet config's parameters that name graphs run here (paths relative to the model's folder).
INLINE_PARAMETERS = ("encoder_onnx", "decoder_onnx")
# Goes with them: instances in processes of their own cannot make BLS calls (backends/python/process_model.py's
# PARAMETER; not imported: the recogniser imports no server layer).
PROCESS_PARAMETER = "instance_process"
_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
                "tensor(float16)": np.float16}


def drop_inline_graphs(config) -> bool:
    """Make a model config (``model_config_pb2.ModelConfig``) send its encoder and decoder calls to their
    models through BLS, as a repository rewritten for TensorRT or OpenVINO must; True when it changed. Its
    instances then run in the server's process: BLS cannot be called from an instance process."""
    found = [key for key in INLINE_PARAMETERS if key in config.parameters]
    if found and PROCESS_PARAMETER in config.parameters:
        found.append(PROCESS_PARAMETER)
    for key in found:
        del config.parameters[key]
    return bool(found)


def repository_without_inline_graphs(repo: Path) -> list[str]:
    """``drop_inline_graphs`` on every model config of a repository, in place: for the tools that replace
    its ONNX graphs (TensorRT, OpenVINO, TorchScript). Returns the models changed."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    changed = []
    for path in sorted(Path(repo).glob("*/config.pbtxt")):
        config = text_format.Parse(path.read_text(), mc.ModelConfig())
        if drop_inline_graphs(config):
            path.write_text(text_format.MessageToString(config))
            changed.append(path.parent.name)
    return changed


def onnx_session(path: Path, threads: int = 1, arena: bool = True):
    """An onnxruntime CPU session as the onnxruntime backend makes one: ``threads`` intra-op threads, one
    inter-op thread, no spinning (spinning threads would burn the cores other models need); ``arena``: False
    allocates each tensor from the C allocator rather than onnxruntime's CPU arena."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = arena
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


# Sessions (one intra-op thread) that instances of this process share: (graph's real path, its size and mtime)
# -> session.
# Weak values: a session goes when the last instance using it does (a reloaded model with a new file gets a
# new one). Guarded by a lock: instances initialise in parallel threads.
_SHARED: "weakref.WeakValueDictionary[tuple, object]" = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared_onnx_session(path: Path, threads: int = 1):
    """``onnx_session``, one per graph file for every instance of this process that runs it with one thread.
    onnxruntime's ``run`` may be called from several threads at once; one session keeps one copy of the
    weights, touched by every instance's calls, so fewer of them come back cold after an idle gap (two
    threads calling a shared session at batch 2 every 40 ms: 9% less CPU than a session each, two runs).
    With more intra-op threads each instance keeps its own session: concurrent calls would share one pool.

    No arena: onnxruntime's CPU arena keeps the largest batch's memory (a burst of streams) for good, and
    shrinking it now and then handed back only part of it in the served process; without it each tensor goes
    back to the C allocator when the run ends, for a little more CPU per round (bench/arena_shrink.py has the
    figures)."""
    if threads != 1:
        return onnx_session(path, threads, arena=False)
    real = Path(path).resolve()
    stat = real.stat()
    key = (str(real), stat.st_size, stat.st_mtime_ns)
    with _SHARED_LOCK:
        session = _SHARED.get(key)
        if session is None:
            session = onnx_session(real, 1, arena=False)
            _SHARED[key] = session
        return session


class InlineStreamingEncoder:
    """An ``EncoderRunner`` over WeNet's streaming encoder graph, holding every sequence's caches.

    A job with ``start`` begins from zero caches; a job with ``end`` frees them; a sequence not seen for
    ``idle_seconds`` is forgotten (as the encoder model's sequence batcher would). A round's windows run as
    one batch; if that call fails, each window runs alone so that only a bad one fails."""

    def __init__(self, session, idle_seconds: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 streams: Optional[Streams] = None) -> None:
        self.session = session
        # each sequence's caches are the `encoder_cache` part of its stream (shared with the scorer's state)
        self.streams = streams if streams is not None else Streams(idle_seconds, clock)
        self.clock = clock
        inputs = {i.name: i for i in session.get_inputs()}
        missing = [n for n in ("chunk_xs", "chunk_lens") if n not in inputs]
        if missing:
            raise ValueError(f"not a streaming encoder graph: no input {', '.join(missing)}")
        self.zeros: dict[str, np.ndarray] = {}  # initial state of each carried input, one sequence's
        for name in STATE_OUTPUTS:
            if name not in inputs:
                continue
            dims = inputs[name].shape[1:]
            if not all(isinstance(d, int) for d in dims):
                raise ValueError(f"the streaming encoder's state input {name} has dynamic dims {dims}: "
                                 "run it as its own model through BLS instead (no encoder_onnx parameter)")
            self.zeros[name] = np.zeros(dims, _NUMPY_TYPES[inputs[name].type])
        self.state_names = list(self.zeros)
        self.output_names = [*ENCODER_OUTPUTS, *(STATE_OUTPUTS[n] for n in self.state_names)]

    def __call__(self, jobs: Sequence[EncoderJob]) -> list[Union[EncoderResult, Exception]]:
        now = self.clock()
        self.streams.sweep(now)
        results: list[Union[EncoderResult, Exception, None]] = [None] * len(jobs)
        run = []
        for i, job in enumerate(jobs):
            if job.valid == 0:  # nothing to decode (an END-only window): just free the caches
                results[i] = EncoderResult(*self._empty())
                if job.end:
                    self.streams.release(job.key, "encoder_cache")
            else:
                run.append(i)
        if run:
            try:
                outs = self._run([jobs[i] for i in run], now)
            except Exception:  # noqa: BLE001 - find the window(s) at fault: each runs alone
                outs = []
                for i in run:
                    try:
                        outs.extend(self._run([jobs[i]], now))
                    except Exception as exc:  # noqa: BLE001 - this sequence fails alone
                        self.streams.release(jobs[i].key, "encoder_cache")
                        outs.append(exc)
            for i, out in zip(run, outs):
                results[i] = out
        return results

    def _run(self, jobs: Sequence[EncoderJob], now: float) -> list[EncoderResult]:
        states = []
        for job in jobs:
            stream = None if job.start else self.streams.get(job.key)
            cached = None if stream is None else stream.encoder_cache
            if cached is None and not job.start:
                raise ValueError(f"sequence {job.key} has no encoder state (it was idle longer than "
                                 f"{self.streams.idle_seconds:g} s, or never started)")
            states.append(self.zeros if cached is None else cached)
        feeds = {"chunk_xs": np.stack([job.window for job in jobs]).astype(np.float32, copy=False),
                 "chunk_lens": np.array([job.valid for job in jobs], dtype=np.int32)}
        for name in self.state_names:
            # a lone sequence's caches go in as they are (a row of the last output: contiguous, no copy)
            feeds[name] = states[0][name][None] if len(jobs) == 1 else np.stack([state[name] for state in states])
        outputs = dict(zip(self.output_names, self.session.run(self.output_names, feeds)))
        results = []
        for b, job in enumerate(jobs):
            if job.end:
                self.streams.release(job.key, "encoder_cache")
            else:  # rows of the batch's output arrays (views: no copy)
                self.streams.open(job.key, now).encoder_cache = {n: outputs[STATE_OUTPUTS[n]][b]
                                                                 for n in self.state_names}
            results.append(EncoderResult(outputs["log_probs"][b], outputs["log_probs_idx"][b],
                                         outputs["chunk_out"][b], int(outputs["chunk_out_lens"].reshape(-1)[b])))
        return results

    def _empty(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        return np.zeros((0, 1), np.float32), np.zeros((0, 1), np.int64), np.zeros((0, 1), np.float32), 0

    def drop(self, key: Hashable) -> None:
        self.streams.release(key, "encoder_cache")

    def drop_idle(self, now: Optional[float] = None) -> None:
        self.streams.sweep(now)

    @property
    def caches(self) -> dict:
        """{key: {state input: value}} of the sequences whose caches are kept (a view)."""
        return self.streams.with_part("encoder_cache")


class InlineDecoder:
    """The attention decoder as ``triton_helpers.run_decoder`` calls it, run here: -> best_index (B,)."""

    def __init__(self, session) -> None:
        self.session = session
        self.input_names = {i.name for i in session.get_inputs()}

    def __call__(self, inputs, encoder_out: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        feeds = {"encoder_out": encoder_out.astype(np.float32, copy=False),
                 "encoder_out_lens": lengths.reshape(-1).astype(np.int32)}
        feeds.update((name, value) for name, value in inputs.feeds().items() if name in self.input_names)
        return self.session.run(["best_index"], feeds)[0].reshape(-1)
