"""asr_data.bass: Beneath a Steel Sky's voiced lines. The readers are checked against files built here in the
game's layouts: an RNC method 1 stream made by a small encoder in this file, a directory and disk holding text
sections coded with a Huffman tree, and a stand-in for ScummVM's program holding that tree beside a decoy that
decodes the voiced lines with a letter wrong. A last test reads the real game where it is installed."""

from __future__ import annotations

import heapq
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from asr_data import bass


# ---- RNC ----------------------------------------------------------------------------------------------------
class RncWriter:
    """The mirror of bass._Bits: bits least significant first into 16-bit words; a literal run's bytes go after
    the word holding the last bit written, where the reader looks for them."""

    def __init__(self) -> None:
        self.bits: list[int] = []
        self.literals: dict[int, bytearray] = {}

    def put(self, value: int, n: int) -> None:
        self.bits += [(value >> k) & 1 for k in range(n)]

    def put_code(self, code: int, length: int) -> None:  # a Huffman code, its first bit first
        self.bits += [(code >> (length - 1 - k)) & 1 for k in range(length)]

    def literal(self, data: bytes) -> None:
        self.literals.setdefault((len(self.bits) - 1) // 16, bytearray()).extend(data)

    def stream(self) -> bytes:
        out = bytearray()
        for word in range(-(-len(self.bits) // 16) + 1):
            chunk = self.bits[16 * word:16 * word + 16]
            out += struct.pack("<H", sum(bit << k for k, bit in enumerate(chunk)))
            out += self.literals.get(word, b"")
        return bytes(out)


def canonical(lengths: list[int]) -> dict[int, tuple[int, int]]:
    """symbol -> (code, length), as the reader builds them."""
    codes, code = {}, 0
    for length in range(1, 17):
        for symbol, own in enumerate(lengths):
            if own == length:
                codes[symbol] = (code >> (16 - length), length)
                code += 1 << (16 - length)
    return codes


def rnc_pack(data: bytes, rng: random.Random) -> bytes:
    """One block of literal runs and back-references (random choices, always valid) as RNC method 1."""
    lengths = [4] * 12  # twelve symbols of four bits: values up to 2^11 - 1
    codes = canonical(lengths)
    w = RncWriter()
    w.put(0, 2)

    def value(v: int) -> None:
        symbol = v if v < 2 else v.bit_length()
        w.put_code(*codes[symbol])
        if symbol >= 2:
            w.put(v - (1 << (symbol - 1)), symbol - 1)

    pos, passes = 0, []
    while pos < len(data):  # plan: (literal bytes, match distance, match length) per pass
        lit = rng.randint(0 if pos else 1, 6)
        lit = min(lit, len(data) - pos)
        pos += lit
        if pos >= len(data):
            passes.append((lit, 0, 0))
            break
        best = (0, 0)
        for distance in range(1, min(pos, 40) + 1):
            n = 0
            while pos + n < len(data) and n < 30 and data[pos - distance + n] == data[pos + n]:
                n += 1
            best = max(best, (n, -distance))
        if best[0] < 2:  # nothing to copy: more literal bytes
            passes.append((lit, 0, 0))
            continue
        passes.append((lit, -best[1], best[0]))
        pos += best[0]
    if passes[-1][2]:  # the data ended on a match: the last pass (it has none) is empty
        passes.append((0, 0, 0))
    # a pass without a match may only be the last: merge the others into the next pass's literals
    merged, carry = [], 0
    for lit, distance, length in passes[:-1]:
        if length:
            merged.append((carry + lit, distance, length))
            carry = 0
        else:
            carry += lit
    merged.append((carry + passes[-1][0], 0, 0))
    for _ in range(3):  # raw, position and length tables, the same code
        w.put(len(lengths), 5)
        for length in lengths:
            w.put(length, 4)
    w.put(len(merged), 16)
    pos = 0
    for k, (lit, distance, length) in enumerate(merged):
        value(lit)
        if lit:
            w.literal(data[pos:pos + lit])
            pos += lit
        if k < len(merged) - 1:
            value(distance - 1)
            value(length - 2)
            pos += length
    packed = w.stream()
    header = struct.pack(">IIHHBB", len(data), len(packed), bass.crc16(data), bass.crc16(packed), 0, 1)
    return b"RNC\x01" + header + packed


def test_crc16_is_crc16_arc():
    assert bass.crc16(b"123456789") == 0xBB3D


@pytest.mark.parametrize("seed", range(6))
def test_rnc_unpack_restores_literals_and_overlapping_matches(seed):
    rng = random.Random(seed)
    # speech-like: runs of silence (0x80, overlapping matches), repeats and noise
    data = bytearray()
    while len(data) < 3000:
        kind = rng.random()
        if kind < 0.3:
            data += bytes([0x80]) * rng.randint(2, 60)
        elif kind < 0.6 and len(data) > 10:
            start = rng.randrange(len(data) - 5)
            data += data[start:start + rng.randint(2, 25)]
        else:
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
    packed = rnc_pack(bytes(data), rng)
    assert len(packed) < len(data) + 600
    assert bass.rnc_unpack(packed) == bytes(data)


def test_rnc_unpack_refuses_a_damaged_stream():
    packed = bytearray(rnc_pack(bytes(range(200)) * 3, random.Random(1)))
    packed[30] ^= 0x10
    with pytest.raises(ValueError, match="CRC"):
        bass.rnc_unpack(bytes(packed))


# ---- text, directory and disk ----------------------------------------------------------------------------------
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,!?'-0123456789`"


def huffman_table(weights: dict[int, int]) -> list[tuple[int, int, int]]:
    """A (left, right, char) node table, root first, children after their parent: as the game's."""
    heap = [(w, k, ("leaf", c)) for k, (c, w) in enumerate(sorted(weights.items()))]
    heapq.heapify(heap)
    k = len(heap)
    while len(heap) > 1:
        a, b = heapq.heappop(heap), heapq.heappop(heap)
        heapq.heappush(heap, (a[0] + b[0], k, ("node", a[2], b[2])))
        k += 1
    nodes: list[list[int]] = []

    def place(tree) -> int:
        index = len(nodes)
        nodes.append([0, 0, 0])
        if tree[0] == "leaf":
            nodes[index][2] = tree[1]
        else:
            nodes[index][0] = place(tree[1])
            nodes[index][1] = place(tree[2])
        return index

    place(heap[0][2])
    return [tuple(n) for n in nodes]


def codes_of(table) -> dict[int, str]:
    out = {}

    def walk(node: int, prefix: str) -> None:
        left, right, char = table[node]
        if left == 0 and right == 0:
            out[char] = prefix
        else:
            walk(left, prefix + "0")
            walk(right, prefix + "1")

    walk(0, "")
    return out


def text_section(strings: list[str], table) -> bytes:
    """A section file: offsets, block sizes, skip table (2-bit units; bit 7: 16-bit units), bit stream."""
    codes = codes_of(table)
    bits, skips, blocks, block_units = "", [], [], 0
    for index, text in enumerate(strings):
        if index % 32 == 0 and index:
            blocks.append(block_units)
            block_units = 0
        coded = "".join(codes[ord(c)] for c in text) + codes[0]
        units = -(-len(coded) // 2)
        skip = units if units < 128 else 0x80 | -(-units // 8)
        units = (skip & 0x7F) * 8 if skip & 0x80 else skip
        bits += coded.ljust(2 * units, "0")
        skips.append(skip)
        block_units += units
    blocks.append(block_units)
    skips_at = 4 + 2 * len(blocks)
    stream_at = skips_at + len(strings)
    bits += "0" * (-len(bits) % 8)
    stream = bytes(int(bits[k:k + 8], 2) for k in range(0, len(bits), 8))
    return struct.pack("<HH", skips_at, stream_at) + struct.pack(f"<{len(blocks)}H", *blocks) + bytes(skips) + stream


def game(tmp_path: Path, sections: list[list[str]], voiced: set[tuple[int, int]], table, rng) -> bass.Disk:
    """sky.dnr + sky.dsk: the text sections stored as is, and a speech file (22-byte header, unsigned 8-bit
    samples, about 0.1 s per character) for each voiced (section, index)."""
    files: dict[int, tuple[bytes, int]] = {}
    for section, strings in enumerate(sections):
        files[bass.TEXT_FILE + section] = (text_section(strings, table), 0x800000)  # bit 23: stored
    for section, index in sorted(voiced):
        n = 1103 * len(sections[section][index])
        samples = (128 + 60 * np.sin(np.arange(n) / 7.0)).astype(np.uint8).tobytes()
        header = struct.pack("<11H", 0, 0, 0, 0, 0, 0, (n + bass.FILE_HEADER) & 0xFFFF, 0, 0, 0, 0)
        files[bass.speech_file(section, index)] = (header + samples, 0)
    dsk, dnr = bytearray(), bytearray(struct.pack("<I", bass.DIRECTORY_ENTRIES_V372))
    numbers = sorted(files) + [1] * (bass.DIRECTORY_ENTRIES_V372 - len(files))  # the rest: repeats, never read
    for number in numbers:
        data, flags = files[number] if number in files else (b"", 0)
        dsk += bytes(-len(dsk) % 16)
        offset = 0x800000 | len(dsk) >> 4  # in 16-byte units
        size = len(data) | flags
        dnr += struct.pack("<HHBHB", number, offset & 0xFFFF, offset >> 16, size & 0xFFFF, size >> 16)
        dsk += data
    (tmp_path / "sky.dnr").write_bytes(bytes(dnr))
    (tmp_path / "sky.dsk").write_bytes(bytes(dsk))
    return bass.Disk(tmp_path)


def sentences(rng: random.Random, n: int, ends: str = ".!") -> list[str]:
    words = ["the", "door", "IS", "open", "Joey", "come", "here", "`now'", "it's", "LINC", "Foster", "what", "42"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 7))) + rng.choice(ends) for _ in range(n)]


def test_text_decodes_across_blocks_and_long_strings():
    rng = random.Random(3)
    table = huffman_table({ord(c): rng.randint(1, 50) for c in ALPHABET} | {0: 30})
    strings = [""] + sentences(rng, 80, ".!?") + ["a long line " * 30]
    section = text_section(strings, table)
    assert bass.section_strings(section, table) == strings
    assert bass.section_strings(section, [(l, r, 7 if c == ord("?") else c) for l, r, c in table])[1:] == \
        [None if "?" in text else text for text in strings[1:]]  # a non-printable character: not a line


def test_clips_pair_the_voiced_lines_with_the_tree_that_reads_the_text(tmp_path):
    rng = random.Random(5)
    table = huffman_table({ord(c): rng.randint(1, 50) for c in ALPHABET} | {0: 30})
    assert len(table) >= 101  # what find_huffman_tree looks for
    # voiced lines never ask; some silent ones do
    sections = [[""] + sentences(rng, 30) + sentences(rng, 10, "?") for _ in range(bass.SECTIONS)]
    voiced = {(s, i) for s in range(bass.SECTIONS) for i in range(1, 31) if rng.random() < 0.5}
    disk = game(tmp_path, sections, voiced, table, rng)
    # A decoy, first in the program: 'e' and 'o' swapped, and '?' unreadable. It reads every voiced line
    # (wrongly) but fewer of all the strings, so the true tree must win.
    decoy = [(l, r, {ord("e"): ord("o"), ord("o"): ord("e"), ord("?"): 7}.get(c, c)) for l, r, c in table]
    noise = lambda n: bytes(rng.randrange(256) for _ in range(n))  # noqa: E731
    program = noise(5000) + bytes(sum(decoy, ())) + noise(3000) + bytes(sum(table, ())) + bytes(2000)
    (tmp_path / "scummvm").write_bytes(program)
    assert [len(tree) for _at, tree in bass.tree_candidates(program)] == [len(table), len(table)]
    clips = bass.clips(disk, tmp_path / "scummvm")
    assert {clip.name: clip.text for clip in clips} == {f"{s}_{i}": " ".join(sections[s][i].replace("`", "'").split())
                                                        for s, i in voiced}
    audio, rate = bass.clip_audio(clips[0].name, disk)
    assert rate == bass.SAMPLE_RATE and audio.dtype == np.float32 and 0.4 < np.abs(audio).max() < 0.5


def test_a_program_without_the_tree_is_refused(tmp_path):
    rng = random.Random(6)
    table = huffman_table({ord(c): rng.randint(1, 50) for c in ALPHABET} | {0: 30})
    disk = game(tmp_path, [[""] + sentences(rng, 5)] * bass.SECTIONS, {(0, 1)}, table, rng)
    (tmp_path / "scummvm").write_bytes(bytes(rng.randrange(256) for _ in range(20000)))
    with pytest.raises(ValueError, match="no Huffman tree"):
        bass.clips(disk, tmp_path / "scummvm")


def test_the_directory_must_be_the_cd_version(tmp_path):
    (tmp_path / "sky.dnr").write_bytes(struct.pack("<I", 2) + bytes(16))
    with pytest.raises(ValueError, match="0.0372"):
        bass.read_directory(tmp_path / "sky.dnr")


@pytest.mark.skipif(not (bass.GAME_DIR / "sky.dsk").exists(), reason="the game is not unpacked (bash scripts/get_bass.sh)")
def test_the_real_game_unpacks_its_speech_files():
    disk = bass.Disk()
    for number in (bass.speech_file(2, 1), bass.speech_file(4, 700)):  # RNC, checked by its CRCs
        if number in disk.entries:
            data = disk.read(number)
            assert len(data) > bass.FILE_HEADER + 1000
