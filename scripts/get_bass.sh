#!/usr/bin/env bash
# Beneath a Steel Sky (CD version 0.0372) for the relay's real speech: Debian's beneath-a-steel-sky (its
# sky.dnr/sky.dsk, 3,491 voiced lines) and scummvm (its program holds the game's text Huffman tree, which
# asr_data/bass.py reads from it). Both are fetched with `apt-get download` and unpacked, not installed
# (the game package would pull in scummvm's many libraries, and nothing here runs either).
#
#   bash scripts/get_bass.sh          # -> $ASR_DATA/bass/root/usr/{share/scummvm/beneath-a-steel-sky,games/scummvm}
#
# Idempotent: an unpacked package is left as it is.
set -euo pipefail
ASR_DATA=${ASR_DATA:-/work/asr_data}
ROOT=$ASR_DATA/bass/root
mkdir -p "$ROOT" "$ASR_DATA/bass/debs"
fetch() {  # package, a file it unpacks
  if [ -s "$ROOT/$2" ]; then
    return
  fi
  # apt's sandbox user cannot write to a root-owned folder: download as root, quietly.
  (cd "$ASR_DATA/bass/debs" && apt-get download -qq -o APT::Sandbox::User=root "$1")
  dpkg-deb -x "$ASR_DATA/bass/debs/$1"_*.deb "$ROOT"
  rm -f "$ASR_DATA/bass/debs/$1"_*.deb
}
fetch beneath-a-steel-sky usr/share/scummvm/beneath-a-steel-sky/sky.dsk
fetch scummvm usr/games/scummvm
echo "Beneath a Steel Sky and ScummVM's program in $ROOT" >&2
