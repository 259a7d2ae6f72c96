"""Real human speech from Debian's `beneath-a-steel-sky` (Beneath a Steel Sky, CD version 0.0372): its 3,491
voiced lines (1.9 h, 11,025 Hz) paired with their English text. An independent reader of the game's files, after
the layouts ScummVM's engines/sky reads (no ScummVM code here):

- sky.dnr, the directory: a uint32 count, then per file 8 bytes: uint16 file number, a 24-bit offset (bit 23:
  in 16-byte units), a 24-bit size (bits 0-21; bit 22: drop the file's 22-byte header when unpacking; bit 23:
  stored as is). sky.dsk holds the files. A file whose header flag has bit 7 set is RNC ("ProPack" method 1)
  compressed after its 22-byte header; `rnc_unpack` undoes that.
- Speech of text (section s, index i): file 50000 + SPEECH_BASE[s] + i, its samples 8-bit unsigned mono after
  the 22-byte header.
- Text of section s, English: file 60600 + s, stored as is: two uint16 offsets (skip table, bit stream), the
  bit size of each block of 32 strings, a byte per string (its bit length / 2, or / 16 with bit 7 set), then the
  strings, Huffman coded most significant bit first and ended by character 0.

The game's Huffman tree is not in its data files (it was in the DOS executable, which is not shipped); ScummVM
carries it, compiled into its program. `find_huffman_tree` finds it in Debian's /usr/games/scummvm: the byte
table of (left child, right child, character) nodes that makes a whole tree and decodes every English string
of the game into printable text that ends where the game's own skip table says it ends. Nothing of ScummVM is
copied into this repository; its program is read on the machine that makes the data, as the game's files are.

Licence (/usr/share/doc/beneath-a-steel-sky/copyright): "Beneath-a-Steel-Sky-License", Revolution Software
Ltd: free distribution on any medium with the readme and notices intact, a reasonable copying fee allowed, no
fee for the game itself. The same terms as Flight of the Amazon Queen's (asr_data/fotaq.py).

Speakers are not stored with the lines (the scripts name them), so every line is labelled with the game's
cast; all of it trains: fotaq_test holds the relay's unseen real speakers.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from asr_data.clips import syllables, trim_silence, unsigned_8bit

ROOT = Path(os.environ.get("ASR_DATA", "/work/asr_data")) / "bass"
GAME_DIR = ROOT / "root" / "usr" / "share" / "scummvm" / "beneath-a-steel-sky"  # scripts/get_bass.sh
SCUMMVM = ROOT / "root" / "usr" / "games" / "scummvm"
SAMPLE_RATE = 11025
FILE_HEADER = 22                 # bytes of a data file's header (11 uint16)
DIRECTORY_ENTRIES_V372 = 5097    # sky.dnr of the CD version 0.0372
SPEECH_FILE = 50000
SPEECH_BASE = (0, 600, 1100, 2430, 3380, 4530, 5080, 5230)  # per text section: its first speech file - 50000
TEXT_FILE = 60600                # + section: the English (UK) text
SECTIONS = 8
MAX_SYLLABLES_PER_SECOND = 8.5   # a subtitle said faster than this is not what the clip says (as drascula.py)


@dataclass(frozen=True)
class Entry:
    offset: int
    size: int
    drop_header: bool
    stored: bool


@dataclass(frozen=True)
class Clip:
    name: str       # '<section>_<index>', e.g. '2_117'
    text: str       # the line as the game writes it
    speaker: str    # 'cast': the lines do not name their speaker


# ---- the directory and its files --------------------------------------------------------------------------
def read_directory(dnr: Path) -> dict[int, Entry]:
    data = dnr.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    if len(data) != 4 + 8 * count:
        raise ValueError(f"{dnr}: {len(data)} bytes for {count} entries")
    if count != DIRECTORY_ENTRIES_V372:
        raise ValueError(f"{dnr}: {count} entries; only the CD version 0.0372 ({DIRECTORY_ENTRIES_V372}) is read")
    out: dict[int, Entry] = {}
    for k in range(count):
        number, off_lo, off_hi, size_lo, size_hi = struct.unpack_from("<HHBHB", data, 4 + 8 * k)
        offset, size = off_lo | off_hi << 16, size_lo | size_hi << 16
        if offset & 0x800000:
            offset = (offset & 0x7FFFFF) << 4
        out.setdefault(number, Entry(offset, size & 0x3FFFFF, bool(size & 0x400000), bool(size & 0x800000)))
    return out


class Disk:
    """sky.dsk's files by number, unpacked as the game unpacks them."""

    def __init__(self, game_dir: Path = GAME_DIR) -> None:
        self.entries = read_directory(game_dir / "sky.dnr")
        self.dsk = game_dir / "sky.dsk"

    def raw(self, number: int, size: int | None = None) -> bytes:
        """The file as stored, or its first `size` bytes."""
        entry = self.entries[number]
        with open(self.dsk, "rb") as fh:
            fh.seek(entry.offset)
            return fh.read(entry.size if size is None else min(size, entry.size))

    def body_size(self, number: int) -> int:
        """The bytes after a data file's header once unpacked, from the header alone (no unpacking)."""
        return _body_size(self.raw(number, FILE_HEADER))

    def read(self, number: int) -> bytes:
        entry, data = self.entries[number], self.raw(number)
        if entry.stored or len(data) < FILE_HEADER or not data[0] & 0x80 or data[FILE_HEADER:FILE_HEADER + 4] != b"RNC\x01":
            return data
        unpacked = rnc_unpack(data[FILE_HEADER:])
        expected = _body_size(data)
        if len(unpacked) != expected:
            raise ValueError(f"file {number}: unpacked {len(unpacked)} bytes, its header says {expected}")
        return unpacked if entry.drop_header else data[:FILE_HEADER] + unpacked


def _body_size(header: bytes) -> int:
    """A data file's unpacked size less its header: the header's flag word holds the top byte of the
    size with its header, word 6 the low 16 bits."""
    flag, total = struct.unpack_from("<H", header, 0)[0], struct.unpack_from("<H", header, 12)[0]
    return ((flag & 0xFF00) << 8 | total) - FILE_HEADER


# ---- RNC ProPack method 1 ---------------------------------------------------------------------------------
def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc16(data: bytes) -> int:
    """CRC-16/ARC (reflected polynomial 0xA001, initial 0), as RNC headers hold it; a byte at a time."""
    crc, table = 0, _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


class _Bits:
    """RNC's bit reader: bits least significant first from little-endian 16-bit words, with the literal bytes
    of the stream interleaved between them (`take_bytes` reads those and re-primes the bit window)."""

    def __init__(self, data: bytes) -> None:
        self.data = data + b"\0\0\0\0"  # reads past the end see zeros
        self.pos = 0                     # the word whose unread bits are in `high`
        self.low = self._word(0)         # the next 16 bits
        self.high = 0                    # `count` further bits
        self.count = 0
        self.read(2)                     # two flag bits the decoder does not use

    def _word(self, pos: int) -> int:
        return self.data[pos] | self.data[pos + 1] << 8

    def read(self, n: int) -> int:
        value = self.low & ((1 << n) - 1)
        if self.count < n:
            self.low = ((self.low >> self.count) | (self.high << (16 - self.count))) & 0xFFFF
            self.pos += 2
            self.high = self._word(self.pos)
            n -= self.count
            self.count = 16
        self.low = ((self.low >> n) | (self.high << (16 - n))) & 0xFFFF
        self.high >>= n
        self.count -= n
        return value

    def take_bytes(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        a, b = self._word(self.pos), self._word(self.pos + 2)
        self.low = (self.low & ((1 << self.count) - 1)) | (a << self.count) & 0xFFFF
        self.high = ((a >> (16 - self.count)) | (b << self.count)) & 0xFFFF
        return out


def _huffman_table(bits: _Bits, previous: list) -> list[tuple[int, int, int, int]]:
    """(mask, reversed code, length, symbol) per symbol, canonical from the code lengths in the stream; a
    table of no symbols keeps the previous one."""
    count = bits.read(5)
    if count == 0:
        return previous
    lengths = [bits.read(4) for _ in range(count)]
    table, code = [], 0
    for length in range(1, 17):
        for symbol, own in enumerate(lengths):
            if own == length:
                reversed_code = int(f"{code >> (16 - length):0{length}b}"[::-1], 2)
                table.append(((1 << length) - 1, reversed_code, length, symbol))
                code += 1 << (16 - length)
    return table


def _value(bits: _Bits, table) -> int:
    for mask, code, length, symbol in table:
        if bits.low & mask == code:
            bits.read(length)
            return symbol if symbol < 2 else bits.read(symbol - 1) | (1 << (symbol - 1))
    raise ValueError("RNC: no Huffman code matches the stream")


def rnc_unpack(stream: bytes) -> bytes:
    """The data an RNC method 1 stream ('RNC\\x01', lengths and CRCs big-endian, then blocks) packs."""
    if stream[:4] != b"RNC\x01":
        raise ValueError("not an RNC method 1 stream")
    unpacked_len, packed_len, unpacked_crc, packed_crc, _leeway, blocks = struct.unpack_from(">IIHHBB", stream, 4)
    packed = stream[18:18 + packed_len]
    if len(packed) != packed_len or crc16(packed) != packed_crc:
        raise ValueError("RNC: the packed data is short or fails its CRC")
    bits, out = _Bits(packed), bytearray()
    raw = offsets = lengths = []
    for _ in range(blocks):
        raw = _huffman_table(bits, raw)
        offsets = _huffman_table(bits, offsets)
        lengths = _huffman_table(bits, lengths)
        for left in range(bits.read(16), 0, -1):
            literal = _value(bits, raw)
            if literal:
                out += bits.take_bytes(literal)
            if left > 1:
                distance = _value(bits, offsets) + 1
                length = _value(bits, lengths) + 2
                start = len(out) - distance
                if start < 0:
                    raise ValueError("RNC: a match reaches before the start of the data")
                if distance >= length:
                    out += out[start:start + length]
                else:  # overlapping: the match repeats what it is writing
                    for k in range(length):
                        out.append(out[start + k])
    if len(out) != unpacked_len or crc16(bytes(out)) != unpacked_crc:
        raise ValueError("RNC: the unpacked data is not the length or CRC its header gives")
    return bytes(out)


# ---- text ---------------------------------------------------------------------------------------------------
def string_bit_offsets(section: bytes) -> list[int]:
    """The bit offset of each string of a text section: the sizes of the blocks before its block of 32, then
    the skips of the strings before it in its block, all in 2-bit units."""
    skips_at, stream_at = struct.unpack_from("<HH", section, 0)
    count = stream_at - skips_at
    out, block_at = [], 0
    for first in range(0, count, 32):
        at = block_at
        for index in range(first, min(count, first + 32)):
            out.append(stream_at * 8 + 2 * at)
            skip = section[skips_at + index]
            at += (skip & 0x7F) << 3 if skip & 0x80 else skip
        block_at += struct.unpack_from("<H", section, 4 + 2 * (first // 32))[0]
    return out


def decode_string(section: bytes, bit: int, end_bit: int, tree) -> str | None:
    """The string at `bit`, or None where the tree walks off the data, past `end_bit` or into a
    non-printable character (how a wrong tree shows itself)."""
    chars, node = [], 0
    while True:
        left, right, char = tree[node]
        if left == 0 and right == 0:
            if char == 0:
                return "".join(chars)
            if not 32 <= char < 127:
                return None
            chars.append(chr(char))
            node = 0
            continue
        if bit >= end_bit or bit >> 3 >= len(section):
            return None
        node = right if section[bit >> 3] >> (7 - (bit & 7)) & 1 else left
        if node >= len(tree):
            return None
        bit += 1


def section_strings(section: bytes, tree) -> list[str | None]:
    offsets = string_bit_offsets(section)
    ends = offsets[1:] + [len(section) * 8]
    # a string may not run past where the next one starts (rounding aside: skips are in 2- or 16-bit steps)
    return [decode_string(section, start, end, tree) for start, end in zip(offsets, ends)]


# ---- the Huffman tree, found in ScummVM's program -------------------------------------------------------------
def _whole_tree(data: bytes, at: int, max_nodes: int = 256) -> list[tuple[int, int, int]] | None:
    """The (left, right, char) nodes at `at` if node 0 roots a binary tree using every node 0..n-1 once."""
    seen, stack, leaves, n = {0}, [0], 0, 0
    while stack:
        node = stack.pop()
        if at + 3 * node + 3 > len(data):
            return None
        left, right = data[at + 3 * node], data[at + 3 * node + 1]
        if left == 0 and right == 0:
            leaves += 1
            continue
        if left == 0 or right == 0 or left == right or left in seen or right in seen:
            return None
        seen.update((left, right))
        stack += (left, right)
        n = max(n, left, right)
        if len(seen) > max_nodes:
            return None
    if len(seen) != n + 1 or leaves * 2 - 1 != len(seen):
        return None
    return [tuple(data[at + 3 * k:at + 3 * k + 3]) for k in range(n + 1)]


def tree_candidates(binary: bytes, min_nodes: int = 101, window: int = 100):
    """Offsets in `binary` where a whole tree of at least `min_nodes` nodes starts. A big Huffman tree's table
    is about half leaves, (0, 0, character) triples; numpy keeps the offsets whose next `window` triples hold
    30-70% of them and whose root is not one, a few hundred thousand of the 79 MB, for the exact walk."""
    b = np.frombuffer(binary, dtype=np.uint8)
    char = b[2:]
    leaf = (b[:-2] == 0) & (b[1:-1] == 0) & (((char >= 32) & (char < 127)) | (char == 0))
    starts = []
    for residue in range(3):  # leaves of one table sit 3 bytes apart
        strided = leaf[residue::3]
        total = np.concatenate(([0], np.cumsum(strided, dtype=np.int32)))
        n = max(0, strided.size - window)
        in_window = total[window:window + n] - total[:n]
        keep = (in_window >= 0.3 * window) & (in_window <= 0.7 * window) & ~strided[:n]
        starts.append(residue + 3 * np.flatnonzero(keep))
    for offset in np.sort(np.concatenate(starts)):
        tree = _whole_tree(binary, int(offset))
        if tree is not None and len(tree) >= min_nodes:
            yield int(offset), tree


def find_huffman_tree(disk: Disk, scummvm: Path = SCUMMVM) -> list[tuple[int, int, int]]:
    """The tree that decodes the game's English text: of the trees that decode every voiced line into
    printable text (each within the bits the game's skip table gives it), the one that decodes the most of
    all the strings. ScummVM holds a tree per game version, and another version's tree can decode the voiced
    lines with a letter or two wrong ('FI]' for 'FIX'); it then fails on more of the other strings. Trees
    that tie (differing only where no string goes) must agree on every voiced line."""
    return _decode_text(disk, scummvm)[0]


def _decode_text(disk: Disk, scummvm: Path) -> tuple[list[tuple[int, int, int]], dict[tuple[int, int], str]]:
    """find_huffman_tree's tree and the voiced lines it decodes."""
    sections = [disk.read(TEXT_FILE + s) for s in range(SECTIONS)]
    best: list = []
    best_score = -1
    for _at, tree in tree_candidates(scummvm.read_bytes()):
        strings = [section_strings(data, tree) for data in sections]
        lines = voiced_lines(disk, strings)
        if any(text is None for text in lines.values()):
            continue
        score = sum(text is not None for section in strings for text in section)
        if score > best_score:
            best, best_score = [(tree, lines)], score
        elif score == best_score:
            best.append((tree, lines))
    if not best:
        raise ValueError(f"{scummvm}: no Huffman tree in it decodes Beneath a Steel Sky 0.0372's text")
    if any(lines != best[0][1] for _tree, lines in best[1:]):
        raise ValueError(f"{scummvm}: Huffman trees that decode as well decode Beneath a Steel Sky's lines differently")
    return best[0]


def voiced_lines(disk: Disk, strings: list[list[str | None]]) -> dict[tuple[int, int], str | None]:
    """(section, index) -> text (None: undecodable) of every decoded string that has a speech file."""
    return {(section, index): text for section, texts in enumerate(strings) for index, text in enumerate(texts)
            if index and speech_file(section, index) in disk.entries}


# ---- the voiced lines ---------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _disk() -> Disk:
    return Disk()


def speech_file(section: int, index: int) -> int:
    return SPEECH_FILE + SPEECH_BASE[section] + index


def clean_text(text: str) -> str:
    """The subtitle as words: the game opens quotes with a backtick."""
    return " ".join(text.replace("`", "'").split())


def clips(disk: Disk | None = None, scummvm: Path = SCUMMVM) -> list[Clip]:
    """Every voiced line with a non-empty English subtitle its duration can hold, in the game's order."""
    disk = disk or _disk()
    out = []
    for (section, index), text in _decode_text(disk, scummvm)[1].items():
        text = clean_text(text)
        seconds = disk.body_size(speech_file(section, index)) / SAMPLE_RATE
        if not text or seconds <= 0 or syllables(text) / seconds > MAX_SYLLABLES_PER_SECOND:
            continue
        out.append(Clip(f"{section}_{index}", text, "cast"))
    return out


def clip_audio(name: str, disk: Disk | None = None) -> tuple[np.ndarray, int]:
    """(float32 samples in [-1, 1), rate) of clip `name` ('2_117'), leading and trailing silence trimmed."""
    disk = disk or _disk()
    section, index = (int(part) for part in name.split("_"))
    samples = disk.read(speech_file(section, index))[FILE_HEADER:]
    audio = unsigned_8bit(samples)
    return trim_silence(audio, SAMPLE_RATE), SAMPLE_RATE
