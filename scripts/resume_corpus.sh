#!/usr/bin/env bash
# Start or resume the data-v2 corpus generation in the background (one niced process), after making sure
# its voices, the real-speech eval split and the game speech are in place. Safe to run at any time: it
# installs nothing twice, and does nothing but report when a generator is already running.
#
#   bash scripts/resume_corpus.sh           # then: $ASR_DATA/tts-venv/bin/python scripts/gen_corpus.py status
set -euo pipefail
cd "$(dirname "$0")/.."
export ASR_DATA=${ASR_DATA:-/work/asr_data}
PY=$ASR_DATA/tts-venv/bin/python
pid=$(cat "$ASR_DATA/gen.pid" 2>/dev/null || true)
if [ -n "$pid" ] && grep -qs gen_corpus "/proc/$pid/cmdline"; then
  echo "generator already running, pid $pid (log $ASR_DATA/gen.log)"
  exit 0
fi
bash scripts/get_tts_voices.sh
bash scripts/get_real_speech.sh
nice -n 19 "$PY" scripts/gen_corpus.py fotaq >> "$ASR_DATA/gen.log" 2>&1
setsid nohup nice -n 19 "$PY" scripts/gen_corpus.py run >> "$ASR_DATA/gen.log" 2>&1 < /dev/null &
echo "generator started, pid $! (log $ASR_DATA/gen.log)"
