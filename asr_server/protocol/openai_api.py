"""OpenAI's speech-to-text endpoint, ``POST /v1/audio/transcriptions``, on the HTTP port, over the same models.

Tools written for OpenAI's API (its official client, and the many that send files there) get a transcript by
changing their base URL. The request is OpenAI's multipart form:

    file                      the audio (any format soundfile or ffmpeg through PyAV reads)
    model                     a served offline model's name; any other name (whisper-1, ...) means the default
    response_format           json (default) | text | srt | vtt | verbose_json
    timestamp_granularities[] word and/or segment (verbose_json; segment when none is given)
    language, prompt, temperature   accepted; this English model ignores them

Audio longer than ``LONG_AUDIO_S`` goes through the long-audio path (cut at pauses, pieces in parallel,
words stitched: asr_client.longform). Errors come back in OpenAI's shape:
``{"error": {"message": ..., "type": "invalid_request_error", "param": ..., "code": ...}}``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Optional

import numpy as np
from aiohttp import web

from asr_client import longform, subtitles
from asr_client.api import LONG_AUDIO_S
from asr_client.audio import AudioError, decode_audio_bytes
from asr_server.core import InferenceCore
from asr_server.errors import ServerError
from asr_server.protocol import asr_calls

DEFAULT_MODEL = "attention_rescoring"
MAX_AUDIO_S = 3 * 3600.0  # one upload: a compressed file of a few MiB can hold a day of audio
MAX_FIELD_BYTES = 64 << 10  # a form field other than the file
MAX_PARTS = 32  # parts of one form (the API has a dozen fields): a chunked or compressed body is not capped by
# its Content-Length, so the parts' count and sizes are what bound what one request holds
FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("word", "segment")


class OpenAIError(Exception):
    def __init__(self, message: str, param: Optional[str] = None, status: int = 400,
                 kind: str = "invalid_request_error", code: Optional[str] = None):
        super().__init__(message)
        self.message, self.param, self.status, self.kind, self.code = message, param, status, kind, code

    def response(self) -> web.Response:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        return web.json_response(body, status=self.status)


class TranscriptionsEndpoint:
    def __init__(self, core: InferenceCore, max_body_bytes: int):
        self.core, self.max_body_bytes = core, max_body_bytes

    async def handle(self, request: web.Request) -> web.Response:
        try:
            return await self._handle(request)
        except OpenAIError as error:
            return error.response()
        except ServerError as error:
            return server_error(error).response()
        except (AttributeError, LookupError, ValueError) as error:  # a malformed form (nested parts, charset)
            return OpenAIError(f"malformed multipart form: {error}").response()

    async def _handle(self, request: web.Request) -> web.Response:
        if not request.content_type.startswith("multipart/"):
            raise OpenAIError("the request must be multipart/form-data with a 'file' field", param="file")
        fields, granularities, upload, filename = {}, [], None, "upload"
        reader = await request.multipart()
        parts = 0
        async for part in reader:
            parts += 1
            if parts > MAX_PARTS:
                raise OpenAIError(f"the form has more than {MAX_PARTS} fields", status=413)
            if part.name == "file":
                if upload is not None:
                    raise OpenAIError("the form has two 'file' fields: send one audio file", param="file")
                upload, filename = await self._read_capped(part, self.max_body_bytes), part.filename or "upload"
                continue
            value = (await self._read_capped(part, MAX_FIELD_BYTES)).decode("utf-8", errors="replace").strip()
            if part.name in ("timestamp_granularities[]", "timestamp_granularities"):
                granularities.append(value)
            elif part.name:
                fields[part.name] = value
        if upload is None:
            raise OpenAIError("you must provide a 'file' field with the audio", param="file")
        response_format = fields.get("response_format") or "json"
        if response_format not in FORMATS:
            raise OpenAIError(f"response_format must be one of {', '.join(FORMATS)}, got {response_format!r}",
                              param="response_format")
        unknown = [g for g in granularities if g not in GRANULARITIES]
        if unknown:
            raise OpenAIError(f"timestamp_granularities[] takes word and segment, got {unknown}",
                              param="timestamp_granularities")
        model = self._model(fields.get("model", ""))
        try:  # decoding (ffmpeg, resampling) runs off the event loop: other streams go on meanwhile
            audio = await asyncio.to_thread(decode_audio_bytes, upload, filename, MAX_AUDIO_S)
        except AudioError as error:
            raise OpenAIError(str(error), param="file") from None
        text, words = await self._transcribe(model, audio.samples)
        duration = round(len(audio.samples) / asr_calls.SAMPLE_RATE, 3)
        return self._render(response_format, text, words, duration, granularities or ["segment"])

    @staticmethod
    async def _read_capped(part, limit: int) -> bytes:
        chunks, size = [], 0
        while True:
            chunk = await part.read_chunk(1 << 16)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise OpenAIError(f"form field '{part.name}' is larger than {limit} bytes", param=part.name,
                                  status=413)
            chunks.append(chunk)

    def _model(self, name: str) -> str:
        """A served offline model by that name, else the default (clients send whisper-1 and the like)."""
        try:
            loaded = self.core.manager.get(name, "") if name else None
        except ServerError:
            loaded = None
        if loaded is not None and not asr_calls.model_streams(self.core, name):
            return name
        return DEFAULT_MODEL

    async def _transcribe(self, model: str, samples: np.ndarray) -> tuple[str, list[longform.Word]]:
        details = asr_calls.model_has_details(self.core, model)
        refusals: list[ServerError] = []

        async def recognize(piece: np.ndarray, request_id: str, parameters: dict):
            try:
                return await asr_calls.recognize(self.core, model, piece, parameters, details, request_id)
            except ServerError as error:
                refusals.append(error)
                return error

        if len(samples) > LONG_AUDIO_S * asr_calls.SAMPLE_RATE:
            long = await longform.transcribe_pieces(recognize, samples)
            if long.errors:  # a transcript with holes is not an answer: in the words of the first refusal
                as_openai = server_error(refusals[0]) if refusals else OpenAIError("", status=500,
                                                                                   kind="server_error")
                raise OpenAIError(f"{len(long.errors)} piece(s) of the audio failed, the first at "
                                  f"{long.errors[0]}", status=as_openai.status, kind=as_openai.kind)
            return long.text, list(long.words)
        result = await asr_calls.recognize(self.core, model, samples, None, details)
        words = [longform.Word(w["word"], w["start"], w["end"], w.get("confidence"))
                 for w in (result.details or {}).get("words", [])]
        return result.text, words

    @staticmethod
    def _render(response_format: str, text: str, words: list[longform.Word], duration: float,
                granularities: list[str]) -> web.Response:
        cues = subtitles.cues(words) if words else ([subtitles.Cue(0.0, duration, text)] if text else [])
        if response_format == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        if response_format == "srt":
            return web.Response(text=subtitles.to_srt(cues), content_type="text/plain")
        if response_format == "vtt":
            return web.Response(text=subtitles.to_vtt(cues), content_type="text/vtt")
        if response_format == "json":
            return web.json_response({"text": text})
        body: dict = {"task": "transcribe", "language": "english", "duration": duration, "text": text}
        if "word" in granularities:
            body["words"] = [{"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)} for w in words]
        if "segment" in granularities:
            body["segments"] = [_segment(i, cue, words) for i, cue in enumerate(cues)]
        return web.Response(text=json.dumps(body, ensure_ascii=False), content_type="application/json")


def server_error(error: ServerError) -> OpenAIError:
    """The core's refusal in OpenAI's terms: the client's fault (400), a model not there (404), busy (503)."""
    code = error.code.name
    if code == "INVALID_ARGUMENT":
        return OpenAIError(str(error))
    if code == "NOT_FOUND":
        return OpenAIError(str(error), status=404, code="model_not_found")
    if code in ("UNAVAILABLE", "RESOURCE_EXHAUSTED"):
        return OpenAIError(str(error), status=503, kind="server_error")
    return OpenAIError(str(error), status=500, kind="server_error")


def _segment(index: int, cue: subtitles.Cue, words: list[longform.Word]) -> dict:
    inside = [w.confidence for w in words if cue.start <= w.start and w.end <= cue.end and w.confidence]
    return {"id": index, "seek": 0, "start": round(cue.start, 3), "end": round(cue.end, 3), "text": cue.text,
            "tokens": [], "temperature": 0.0,
            "avg_logprob": round(float(np.mean(np.log(inside))), 4) if inside else 0.0,
            "compression_ratio": 1.0, "no_speech_prob": 0.0}


def add_routes(app: web.Application, core: InferenceCore, max_body_bytes: int) -> None:
    endpoint = TranscriptionsEndpoint(core, max_body_bytes)
    app.router.add_post("/v1/audio/transcriptions", endpoint.handle)
    app.router.add_post("/v1/audio/translations", _translations)


async def _translations(request: web.Request) -> web.Response:
    return OpenAIError("translations are not offered: this server transcribes English only", status=404,
                       code="unsupported").response()

