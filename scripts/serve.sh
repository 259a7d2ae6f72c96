#!/usr/bin/env bash
# Set up (first run only) and start the server on the bundled model repository.
# Extra arguments go to asr-server, e.g. --grpc-port 9001 or --grpc-address 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/asr-server ] || bash scripts/setup_env.sh
bash scripts/build_demo_repo.sh  # no-op when the exported graphs are up to date
exec .venv/bin/asr-server --model-repository model_repo "$@"
