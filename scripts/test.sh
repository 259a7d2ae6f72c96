#!/usr/bin/env bash
# Set up (first run only) and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/pytest ] || bash scripts/setup_env.sh
exec .venv/bin/python -m pytest "$@"
