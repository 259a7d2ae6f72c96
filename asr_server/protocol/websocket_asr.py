"""Streaming recognition over WebSocket on the HTTP port, in the two dialects people already have clients for.

Both clients connect to ``ws://host:port/`` (any path), so the dialect is told by the first message:

- WeNet's runtime protocol (its websocket_server_main; its C++ client and web demo): a text frame
  ``{"signal": "start", "nbest": N, "continuous_decoding": bool}``, then binary frames of 16 kHz int16
  little-endian PCM, then ``{"signal": "end"}``. Replies are text frames: ``{"status": "ok", "type":
  "server_ready"}``; ``partial_result`` and ``final_result`` whose ``nbest`` is a JSON *string* holding a list of
  ``{"sentence": ...}`` (finals add ``word_pieces`` with ``word``, ``start``, ``end`` in integer ms);
  ``speech_end`` last; ``{"status": "failed", "message": ...}`` on errors. With continuous_decoding the stream
  is cut into segments at pauses (endpointing), each with its final_result.
- sherpa-onnx's online protocol (its online-websocket-client and Python examples): binary frames of float32
  little-endian samples at 16 kHz, then the text frame ``Done``. After each chunk a JSON text frame ``{"text",
  "tokens", "timestamps", "ys_probs", "lm_probs", "context_scores", "segment", "words", "start_time",
  "is_final", "is_eof"}`` (timestamps relative to ``start_time``); segments end at pauses (is_final); after
  ``Done`` the last result (is_final and is_eof) and the text frame ``Done!``.

Each socket is one sequence on ``streaming_wenet`` (or ``?model=NAME``, a streaming model); a socket that
drops, errs or sends nothing for longer than the model keeps an idle sequence (at most ``IDLE_S``) is closed
and its sequence freed at once. Query parameters ``hotwords`` and ``hotwords_score`` reach the model as on
gRPC. Audio is passed on in chunks of at least ``MIN_CHUNK_S`` (a microphone's 50 ms blocks would otherwise
cost one request each) and at most ``MAX_CHUNK_S`` (a whole file in one frame is cut). WeNet's
``continuous_decoding: false`` ends the utterance at its first pause, as WeNet's server does (final_result,
speech_end); ``true`` goes on, one final_result per sentence. Shutdown closes every socket (1001).

A socket's chunks go to the model as soon as they are gathered, while the answers to earlier ones are still
being computed (as a gRPC stream's requests do), and the answers are told in order (at most MAX_IN_FLIGHT
unanswered; beyond that the socket's frames wait unread).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Optional

import numpy as np
from aiohttp import WSMsgType, web

from asr_server.core import InferenceCore
from asr_server.errors import ServerError
from asr_client.audio import pcm16_to_float
from asr_server.protocol.asr_calls import (SAMPLE_RATE, Recognized, StreamCall, model_has_details, model_streams,
                                           sequence_idle_seconds)

log = logging.getLogger(__name__)
DEFAULT_MODEL = "streaming_wenet"
MIN_CHUNK_S = 0.3  # audio gathered before a request to the model
MAX_CHUNK_S = 10.0  # audio of one request at most (the models take at most 60 s per request)
IDLE_S = 30.0  # a socket that sends nothing for this long is closed (sooner if the model drops idle sequences)
MAX_MESSAGE_BYTES = 4 << 20  # one frame: 2 minutes of int16 or 1 minute of float32 audio
MAX_IN_FLIGHT = 8  # a socket's chunks sent and not yet answered; beyond this its frames wait unread
CLOSE_WAIT_S = 5.0  # how long a finished stream's socket may take to close (the client answers the close frame)
SEND_TIMEOUT_S = 10.0  # a client that takes no answer for this long is cut off (its socket is not read meanwhile)
SESSIONS = web.AppKey("asr_websocket_sessions", dict)  # open sockets -> their requests


async def send_text(ws: web.WebSocketResponse, text: str) -> None:
    """Send a text frame; ConnectionError when the client has not taken it within SEND_TIMEOUT_S (a client that
    stops reading would otherwise hold its socket, its sequence and the server's shutdown forever)."""
    try:
        await asyncio.wait_for(ws.send_str(text), SEND_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise ConnectionError(f"the client took no answer for {SEND_TIMEOUT_S:g} s") from None


async def close_socket(ws: web.WebSocketResponse, request: web.Request, **close) -> None:
    """Close the socket, or cut its connection when the close cannot go through in CLOSE_WAIT_S (a client that
    reads nothing takes no close frame either)."""
    if ws.closed:
        return
    try:
        await asyncio.wait_for(ws.close(**close), CLOSE_WAIT_S)
    except (asyncio.TimeoutError, ConnectionError):
        if request.transport is not None:
            request.transport.abort()


class ProtocolError(Exception):
    """The client broke its dialect's rules: told, then the socket is closed."""


def is_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


class Dialect:
    """What differs between the two protocols: how audio frames decode and how results are told."""

    name = ""
    sample_bytes = 2

    def __init__(self, ws: web.WebSocketResponse):
        self.ws = ws

    def samples(self, data: bytes) -> np.ndarray:
        raise NotImplementedError

    async def partial(self, text: str, details: dict) -> None:
        raise NotImplementedError

    async def final(self, segment: dict, last: bool) -> None:
        raise NotImplementedError

    async def error(self, message: str) -> None:
        raise NotImplementedError


class WenetDialect(Dialect):
    name = "wenet"

    def __init__(self, ws: web.WebSocketResponse, nbest: int, continuous: bool):
        super().__init__(ws)
        self.nbest, self.continuous = nbest, continuous
        self.last_partial = ""

    def samples(self, data: bytes) -> np.ndarray:
        if len(data) % 2:
            raise ProtocolError("binary frames are 16-bit PCM: an odd number of bytes")
        return pcm16_to_float(data)

    def _nbest(self, segment: dict, words: bool) -> str:
        hypotheses = segment.get("nbest") or [{"text": segment.get("text", "")}]
        out = []
        for i, hyp in enumerate(hypotheses[: self.nbest]):
            item: dict = {"sentence": hyp.get("text", "")}
            if words and i == 0:
                item["word_pieces"] = [{"word": w["word"], "start": int(round(w["start"] * 1000)),
                                        "end": int(round(w["end"] * 1000))} for w in segment.get("words", [])]
            out.append(item)
        return json.dumps(out, ensure_ascii=False)

    async def partial(self, text: str, details: dict) -> None:
        if text and text != self.last_partial:
            self.last_partial = text
            await send_text(self.ws, json.dumps({"status": "ok", "type": "partial_result",
                                               "nbest": self._nbest(details, words=False)}, ensure_ascii=False))

    async def final(self, segment: dict, last: bool) -> None:
        self.last_partial = ""
        if segment.get("text") or last:
            await send_text(self.ws, json.dumps({"status": "ok", "type": "final_result",
                                               "nbest": self._nbest(segment, words=True)}, ensure_ascii=False))
        if last:
            await send_text(self.ws, json.dumps({"status": "ok", "type": "speech_end"}))

    async def error(self, message: str) -> None:
        await send_text(self.ws, json.dumps({"status": "failed", "message": message}))


class SherpaDialect(Dialect):
    name = "sherpa-onnx"
    sample_bytes = 4

    def samples(self, data: bytes) -> np.ndarray:
        if len(data) % 4:
            raise ProtocolError("binary frames are float32 samples: the byte count must be a multiple of 4")
        samples = np.frombuffer(data, "<f4").astype(np.float32)
        if not np.isfinite(samples).all():
            raise ProtocolError("samples must be finite float32 values in [-1, 1]")
        return samples

    async def _send(self, segment: dict, final: bool, eof: bool) -> None:
        start = float(segment.get("start", 0.0))
        tokens = segment.get("tokens", [])
        await send_text(self.ws, json.dumps({
            "text": segment.get("text", ""), "tokens": [t["token"] for t in tokens],
            "timestamps": [round(t["start"] - start, 2) for t in tokens], "ys_probs": [], "lm_probs": [],
            "context_scores": [], "segment": int(segment.get("segment", 0)), "words": [],
            "start_time": round(start, 2), "is_final": final, "is_eof": eof}, ensure_ascii=False))

    async def partial(self, text: str, details: dict) -> None:
        await self._send(details, final=False, eof=False)

    async def final(self, segment: dict, last: bool) -> None:
        await self._send(segment, final=True, eof=last)
        if last:
            await send_text(self.ws, "Done!")

    async def error(self, message: str) -> None:
        await send_text(self.ws, json.dumps({"error": message}))


class SocketSession:
    def __init__(self, core: InferenceCore, request: web.Request, ws: web.WebSocketResponse):
        self.core, self.request, self.ws = core, request, ws
        self.model = request.query.get("model", DEFAULT_MODEL)
        self.dialect: Optional[Dialect] = None
        self.call: Optional[StreamCall] = None
        self.pending: list[np.ndarray] = []
        self.pending_samples = 0
        # the chunks sent to the model, in order: (its answer's task, last); the teller tells them in that order
        self.answers: asyncio.Queue = asyncio.Queue()
        self.room = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.teller: Optional[asyncio.Task] = None
        self.closing = False  # the teller has ended the utterance (or failed): nothing more is sent

    def _parameters(self, endpoint: bool) -> dict:
        params: dict = {"endpoint": endpoint}
        for key in ("hotwords", "hotwords_score"):
            if key in self.request.query:
                params[key] = self.request.query[key]
        return params

    async def run(self) -> None:
        try:
            async for message in self._messages():
                if await self._on(message):
                    break
        except (ProtocolError, ServerError) as error:
            await self._refuse(str(error))
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client or the server's shutdown went away: nothing to tell
        except (ValueError, RecursionError) as error:  # e.g. JSON nested past the parser's depth
            await self._refuse(f"malformed message: {type(error).__name__}")
        except Exception:  # noqa: BLE001 - a bug here must not become a 500 on a hijacked connection
            log.exception("websocket stream failed")
            await self._refuse("internal error")
        finally:
            if self.teller is not None and not self.teller.done():
                if self.closing:  # it is closing the socket (after an error or the last answer): let it
                    await asyncio.wait([self.teller], timeout=CLOSE_WAIT_S)
                self.teller.cancel()
            for task, _ in _drain(self.answers):  # chunks not yet submitted must not follow the END below
                _forget(task)
            if self.call is not None:
                await self.call.abort()  # a socket that dropped or erred frees its sequence now
            await close_socket(self.ws, self.request)

    async def _messages(self):
        while True:
            idle = self._idle_seconds()
            try:
                message = await self.ws.receive(timeout=idle)
            except asyncio.TimeoutError:
                raise ProtocolError(f"no message for {idle:g} s: the stream is closed") from None
            if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return
            yield message

    def _idle_seconds(self) -> float:
        """How long the socket may stay silent: IDLE_S, or less when the model drops idle sequences sooner (a
        little before it does, so that the client is told instead of finding its sequence gone)."""
        if self.call is None:
            return IDLE_S
        model_idle = sequence_idle_seconds(self.core, self.model)
        return min(IDLE_S, max(0.5, model_idle - 0.5)) if model_idle > 0 else IDLE_S

    async def _refuse(self, message: str) -> None:
        log.info("websocket %s: %s", self.dialect.name if self.dialect else "?", message)
        if self.ws.closed:
            return
        try:
            if self.dialect is not None:
                await self.dialect.error(message)
            else:
                await send_text(self.ws, json.dumps({"status": "failed", "error": message, "message": message}))
        except ConnectionError:
            pass

    async def _on(self, message) -> bool:
        """Handle one frame; True when the stream is over."""
        if message.type == WSMsgType.TEXT:
            return await self._on_text(message.data)
        if message.type == WSMsgType.BINARY:
            if self.dialect is None:  # audio first: sherpa-onnx's client
                self._begin(SherpaDialect(self.ws), endpoint=True)
            if self.call is None:
                raise ProtocolError("Start signal is expected before binary data")
            return await self._add(self.dialect.samples(message.data))
        raise ProtocolError(f"unexpected frame type {message.type.name}")

    async def _on_text(self, text: str) -> bool:
        if text.strip() == "Done" and (self.dialect is None or isinstance(self.dialect, SherpaDialect)):
            if self.dialect is None:
                self._begin(SherpaDialect(self.ws), endpoint=True)
            await self._end()
            return True
        try:
            body = json.loads(text)
        except ValueError:
            raise ProtocolError("text frames are JSON signals ({\"signal\": \"start\"|\"end\"}) or Done; audio "
                                "goes in binary frames") from None
        if not isinstance(body, dict) or "signal" not in body:
            raise ProtocolError("Wrong message header")
        if self.dialect is None or isinstance(self.dialect, WenetDialect):
            if body["signal"] == "start":
                nbest, continuous = body.get("nbest", 1), body.get("continuous_decoding", False)
                if isinstance(nbest, bool) or not isinstance(nbest, int) or not 1 <= nbest <= 100:
                    raise ProtocolError("integer is expected for nbest option (1 to 100)")
                if not isinstance(continuous, bool):
                    raise ProtocolError("boolean true or false is expected for continuous_decoding option")
                if self.call is not None:
                    raise ProtocolError("start was already sent on this socket")
                self._begin(WenetDialect(self.ws, nbest, continuous), endpoint=True)
                await send_text(self.ws, json.dumps({"status": "ok", "type": "server_ready"}))
                return False
            if body["signal"] == "end":
                if self.call is None:
                    raise ProtocolError("Start signal is expected before end")
                await self._end()
                return True
        raise ProtocolError("Unexpected signal type")

    def _begin(self, dialect: Dialect, endpoint: bool) -> None:
        self.dialect = dialect
        if not model_streams(self.core, self.model):  # ServerError (told to the client) if no such model
            raise ProtocolError(f"model '{self.model}' does not stream (no sequence batcher): name a streaming "
                                "model with ?model=")
        details = model_has_details(self.core, self.model)
        self.call = StreamCall(self.core, self.model, self._parameters(endpoint), details=details)
        self.teller = asyncio.get_running_loop().create_task(self._tell_in_order())

    async def _add(self, samples: np.ndarray) -> bool:
        """Gather audio; True when the utterance ended (WeNet's single-utterance mode at its first pause)."""
        if samples.size == 0:  # an empty frame adds nothing (and must not add an entry per frame)
            return False
        self.pending.append(samples)
        self.pending_samples += samples.size
        if self.pending_samples >= MIN_CHUNK_S * SAMPLE_RATE:
            return await self._send(last=False)
        return False

    async def _send(self, last: bool) -> bool:
        """Send the gathered audio to the model (answers are told by the teller); True when the utterance is
        over: ``last`` (once every answer is told), or the teller ended it (a pause in WeNet's single mode, an
        error)."""
        audio = np.concatenate(self.pending) if self.pending else np.zeros(0, np.float32)
        self.pending, self.pending_samples = [], 0
        step = int(MAX_CHUNK_S * SAMPLE_RATE)
        pieces = [audio[i:i + step] for i in range(0, audio.size, step)] or [audio]
        for i, piece in enumerate(pieces):
            if not await self._room() or self.call.ended:
                return True
            final = last and i == len(pieces) - 1
            # call.send submits its request before its first await, so tasks made in order reach the model in
            # order
            self.answers.put_nowait((asyncio.get_running_loop().create_task(self.call.send(piece, last=final)),
                                     final))
        if last:
            await asyncio.wait([self.teller])
            return True
        return self.teller.done()

    async def _room(self) -> bool:
        """Wait until fewer than MAX_IN_FLIGHT chunks are unanswered (the teller releases one per chunk told);
        False if the teller ended first (nothing more will be told)."""
        acquire = asyncio.ensure_future(self.room.acquire())
        await asyncio.wait([acquire, self.teller], return_when=asyncio.FIRST_COMPLETED)
        if acquire.done() and not self.closing:
            return True
        acquire.cancel()
        return False

    async def _tell_in_order(self) -> None:
        """Tell each chunk's answer in the order sent, until the utterance is over or fails; then close the
        socket, which ends the reading loop."""
        try:
            while True:
                task, last = await self.answers.get()
                try:
                    result = await task
                finally:
                    self.room.release()
                if await self._tell(result, last):
                    return
        except ServerError as error:
            await self._refuse(str(error))
        except ConnectionError:
            pass  # the client went away: the reading loop sees the socket closed
        except Exception:  # noqa: BLE001 - a bug here must not leave the socket open and silent
            log.exception("websocket stream failed")
            await self._refuse("internal error")
        finally:
            self.closing = True
            for task, _ in _drain(self.answers):
                _forget(task)
        await close_socket(self.ws, self.request)

    async def _tell(self, result: Recognized, last: bool) -> bool:
        """Tell the client a chunk's answer; True when the utterance is over."""
        details = result.details or {"text": result.text, "segment": 0}
        finals = details.get("finals", [])
        single = isinstance(self.dialect, WenetDialect) and not self.dialect.continuous
        if single and finals and not last:  # WeNet without continuous decoding: the first pause ends it
            await self.dialect.final(finals[0], last=True)
            await self.call.abort()
            return True
        for i, segment in enumerate(finals):
            await self.dialect.final(segment, last=last and i == len(finals) - 1)
        if last and not finals:
            await self.dialect.final(dict(details, text=details.get("text", "")), last=True)
        if not last:
            await self.dialect.partial(details.get("text", ""), details)
        return last

    async def _end(self) -> None:
        await self._send(last=True)


def _forget(task: asyncio.Task) -> None:
    """An answer no one will tell: cancelled if still running, its error (a stream that failed on an earlier
    chunk fails the later ones too) retrieved so that it is not reported as never retrieved."""
    task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _drain(queue: asyncio.Queue) -> list:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


async def handle_socket(core: InferenceCore, request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, heartbeat=None)
    await ws.prepare(request)
    sockets = request.app[SESSIONS]
    sockets[ws] = request
    try:
        await SocketSession(core, request, ws).run()
    finally:
        sockets.pop(ws, None)
    return ws


async def close_sockets(app: web.Application) -> None:
    """Shutdown: every open stream is told (1001, going away) instead of holding the exit timeout, all at once
    (one client that reads nothing costs CLOSE_WAIT_S, not every socket after it)."""
    await asyncio.gather(*(close_socket(ws, request, code=1001, message=b"the server is shutting down")
                           for ws, request in list(app[SESSIONS].items())))


WEB = Path(__file__).with_name("web")  # the page's static files, shipped in the package
PAGE_FILES = {"app.js": "application/javascript", "pcm-worklet.js": "application/javascript"}


def add_routes(app: web.Application, core: InferenceCore) -> None:
    """GET / is the page, or with an Upgrade header a WebSocket stream in either dialect (both peers' clients
    connect to the root path); the page's scripts beside it."""

    async def root(request: web.Request) -> web.StreamResponse:
        if is_websocket(request):
            return await handle_socket(core, request)
        return web.FileResponse(WEB / "index.html", headers={"Content-Type": "text/html; charset=utf-8"})

    async def asset(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        return web.FileResponse(WEB / name, headers={"Content-Type": PAGE_FILES[name]})

    app[SESSIONS] = {}
    app.on_shutdown.append(close_sockets)
    app.router.add_get("/", root)
    for name in PAGE_FILES:
        app.router.add_get(f"/{{name:{name.replace('.', '[.]')}}}", asset)
