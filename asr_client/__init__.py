"""Client for the ASR pipelines over Triton's gRPC protocol: streaming, batch transcription, WER/RTF reports."""

from asr_client.api import Transcript, stream, transcribe
from asr_client.audio import SAMPLE_RATE, Audio, AudioError, load_audio
from asr_client.batch import BatchResult, TranscribeOptions, UtteranceResult, transcribe_files
from asr_client.inputs import Utterance, collect_utterances
from asr_client.report import Summary, summarize
from asr_client.streaming import Partial, StreamingClient, StreamingError, StreamOptions, StreamResult

__all__ = [
    "Transcript", "stream", "transcribe",
    "SAMPLE_RATE", "Audio", "AudioError", "load_audio",
    "BatchResult", "TranscribeOptions", "UtteranceResult", "transcribe_files",
    "Utterance", "collect_utterances",
    "Summary", "summarize",
    "Partial", "StreamingClient", "StreamingError", "StreamOptions", "StreamResult",
]
