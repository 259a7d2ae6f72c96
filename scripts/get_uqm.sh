#!/usr/bin/env bash
# The Ur-Quan Masters' voice pack and dialogue text (Debian non-free `uqm-voice` + `uqm-content`), for training
# ONLY when asked for (`gen_corpus.py uqm`, `relay_leg.py --with-uqm`): they are CC BY-NC-SA 2.5, so a model
# trained on them is non-commercial (asr_data/uqm.py). Fetched with `apt-get download` and unpacked, not
# installed (the packages depend on the game itself):
#
#   bash scripts/get_uqm.sh          # -> $ASR_DATA/uqm_pkg/usr/share/games/uqm/content/{addons,packages}/*.uqm
#
# Needs non-free in apt's sources (scripts/get_tts_voices.sh enables it). Idempotent.
set -euo pipefail
ASR_DATA=${ASR_DATA:-/work/asr_data}
OUT=$ASR_DATA/uqm_pkg
CONTENT=$OUT/usr/share/games/uqm/content
if [ -s "$CONTENT/addons/uqm-0.8.0-voice.uqm" ] && [ -s "$CONTENT/packages/uqm-0.8.0-content.uqm" ]; then
  echo "UQM voice pack already in $OUT" >&2
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && apt-get download -qq -o APT::Sandbox::User=root uqm-voice uqm-content); then
  echo "apt-get download uqm-voice uqm-content failed: is non-free in apt's sources? (bash scripts/get_tts_voices.sh)" >&2
  exit 1
fi
mkdir -p "$OUT"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$OUT"; done
echo "UQM voice pack in $OUT ($(du -sh "$OUT" | cut -f1))" >&2
