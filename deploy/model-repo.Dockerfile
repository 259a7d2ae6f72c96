# The model repository as an image of its own: both servers copy /models from it at pod start (an init
# container), so asr-server and Triton serve the very same files, and a model update is an image tag.
#   python scripts/build_model_repo.py --model-dir MODEL_DIR --export --out build/model_repo
#   docker build -f deploy/model-repo.Dockerfile --build-arg REPO=build/model_repo -t asr-model-repo:1 .
FROM busybox:1.36
ARG REPO=model_repo
COPY ${REPO} /models
