#!/usr/bin/env bash
# Real recorded human speech for evaluation only (never training): the 11 recordings of Debian's
# pocketsphinx-testdata (BSD licence, CMU): five LibriVox sentences of "Sense and Sensibility", five spoken
# playing-card names, and "go forward ten meters". Fetched with `apt-get download` (nothing is installed)
# and written as a Kaldi-style split:
#
#   bash scripts/get_real_speech.sh [OUT]      # default $ASR_DATA/real (ASR_DATA=/work/asr_data)
#   -> OUT/wav.scp  OUT/text  OUT/utt2spk  OUT/wavs/*.wav (16 kHz mono int16)
#
# Idempotent: an existing OUT/text is left as it is.
set -euo pipefail
ASR_DATA=${ASR_DATA:-/work/asr_data}
OUT=${1:-$ASR_DATA/real}
if [ -s "$OUT/text" ] && [ -s "$OUT/wav.scp" ]; then
  echo "real speech already in $OUT" >&2
  exit 0
fi
command -v sox >/dev/null || { echo "sox is needed (apt-get install sox)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt's sandbox user cannot write to a root-owned mktemp dir: download as root, quietly.
(cd "$work" && apt-get download -qq -o APT::Sandbox::User=root pocketsphinx-testdata)
dpkg-deb -x "$work"/pocketsphinx-testdata_*.deb "$work/x"
D=$work/x/usr/share/pocketsphinx/test/data
mkdir -p "$OUT/wavs"
: > "$work/text"
: > "$work/wav.scp"
add() {  # utt, source file, transcript
  local utt=$1 src=$2 words=$3 dst=$OUT/wavs/$1.wav
  case "$src" in
    *.raw) sox -t raw -r 16000 -e signed -b 16 -c 1 "$src" -r 16000 -c 1 -b 16 "$dst" ;;
    *) sox "$src" -r 16000 -c 1 -b 16 "$dst" ;;
  esac
  echo "$utt $(readlink -f "$dst")" >> "$work/wav.scp"
  echo "$utt $words" >> "$work/text"
}
# Transcript lines look like "<s> words </s> (fileid)".
while read -r line; do
  id=$(sed -E 's/.*\(([^)]+)\)\s*$/\1/' <<<"$line")
  words=$(sed -E 's/<\/?s>//g; s/\([^)]*\)\s*$//; s/\s+/ /g; s/^ //; s/ $//' <<<"$line")
  add "librivox_${id##*-}" "$D/librivox/$id.wav" "$words"
done < "$D/librivox/transcription"
while read -r line; do
  id=$(sed -E 's/.*\(([^)]+)\)\s*$/\1/' <<<"$line")
  words=$(sed -E 's/<\/?s>//g; s/\([^)]*\)\s*$//; s/\s+/ /g; s/^ //; s/ $//' <<<"$line")
  add "cards_$id" "$D/cards/$id.wav" "$words"
done < "$D/cards/cards.transcription"
# goforward.raw has no transcript file; its words are pocketsphinx's own test expectation.
add goforward "$D/goforward.raw" "go forward ten meters"
sort "$work/text" > "$OUT/text"
sort "$work/wav.scp" > "$OUT/wav.scp"
cut -d' ' -f1 "$OUT/text" | sed -E 's/^([a-z]+)(_.*)?$/& \1/' > "$OUT/utt2spk"
cp "$work/x/usr/share/doc/pocketsphinx-testdata/copyright" "$OUT/COPYRIGHT"
echo "real speech: $(wc -l < "$OUT/text") utterances in $OUT" >&2
