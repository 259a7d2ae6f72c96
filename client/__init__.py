"""Client for the ASR pipelines over Triton's gRPC protocol: streaming, batch transcription, WER/RTF reports."""

from client.audio import SAMPLE_RATE, Audio, AudioError, load_audio
from client.batch import BatchResult, TranscribeOptions, UtteranceResult, transcribe_files
from client.inputs import Utterance, collect_utterances
from client.report import Summary, summarize
from client.streaming import Partial, StreamingClient, StreamingError, StreamOptions, StreamResult

__all__ = [
    "SAMPLE_RATE", "Audio", "AudioError", "load_audio",
    "BatchResult", "TranscribeOptions", "UtteranceResult", "transcribe_files",
    "Utterance", "collect_utterances",
    "Summary", "summarize",
    "Partial", "StreamingClient", "StreamingError", "StreamOptions", "StreamResult",
]
