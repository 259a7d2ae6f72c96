# NVIDIA Triton 2.51 (NGC release 24.10) able to run this project's python models.
#   docker build -f deploy/triton.Dockerfile -t triton-asr:24.10 .
# The python models (feature_extractor, scoring, streaming_wenet, streaming_feature_extractor, wenet) import
# asr_server; the python backend's stub runs the image's own python 3, so installing the project there is all
# they need (no sys.path edits, no EXECUTION_ENV_PATH archive). The streaming scorers run the streaming encoder
# and decoder graphs with the onnxruntime installed with the project; the ONNX models also load on Triton's
# onnxruntime backend (the offline pipeline, and --streaming-bls repositories, whose streaming encoder keeps
# its caches there as implicit state).
FROM nvcr.io/nvidia/tritonserver:24.10-py3
WORKDIR /opt/asr-server
COPY pyproject.toml README.md ./
COPY asr_server asr_server
COPY asr_client asr_client
COPY asr_data asr_data
RUN pip install --no-cache-dir .
EXPOSE 8000 8001 8002
