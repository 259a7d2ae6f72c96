"""Open English text from registry packages, split into training and held-out pools by whole source.

Sources (licences in models/demo_en/MODEL_CARD.md, "Data v2"):
- Debian `fortunes` / `fortunes-min`: quotations, one file per topic. HELDOUT_FORTUNES go to test_open only.
- Debian `wordnet-base`: WordNet 3.0 glosses (definitions and quoted usage examples); the adverb file is
  held out whole.
- PyPI `wordfreq`: a frequency-ranked vocabulary for random word sequences (textgen.py).
- Debian `wamerican` (if installed): capitalised entries as first names / places.

The transcripts of the real recordings (real_speech.py) never enter a training pool (`is_banned`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from asr_data.normalise import normalise
from asr_data.real_speech import is_banned

FORTUNE_DIR = Path("/usr/share/games/fortunes")
WORDNET_DIR = Path("/usr/share/wordnet")
WORDS_FILE = Path("/usr/share/dict/words")
# Held out whole for test_open: these topics' quotations are never trained on.
HELDOUT_FORTUNES = frozenset({"literature", "science", "wisdom", "humorists"})
HELDOUT_WORDNET = frozenset({"adv"})
# Not prose: pictures, other languages, program text.
SKIP_FORTUNES = frozenset({"ascii-art", "translate-me", "perl"})
MIN_WORDS, MAX_WORDS = 3, 30

SENTENCE_END = re.compile(r"([.!?][\"')]*)\s+(?=[\"'(]?[A-Z])")  # the end mark and closing quotes stay


@dataclass(frozen=True)
class Line:
    source: str   # e.g. fortunes/love, wordnet/noun
    speak: str
    label: str

    def tsv(self) -> str:
        return f"{self.source}\t{self.speak}\t{self.label}\n"

    @classmethod
    def from_tsv(cls, row: str) -> "Line":
        source, speak, label = row.rstrip("\n").split("\t")
        return cls(source, speak, label)


def fortune_records(text: str) -> list[str]:
    """A fortune file's records (separated by lines of '%'), attribution lines ('-- Author') removed."""
    records = []
    for record in re.split(r"^%\s*$", text, flags=re.M):
        lines = [ln for ln in record.splitlines() if not re.match(r"^\s*--", ln)]
        # "Q: ... A: ..." riddles: the speaker labels are not said
        joined = " ".join(re.sub(r"^[QA]:\s*", "", ln.strip()) for ln in lines if ln.strip())
        if joined:
            records.append(joined)
    return records


def split_sentences(text: str) -> list[str]:
    parts = SENTENCE_END.split(text)  # [sentence, end, sentence, end, ..., sentence]
    joined = ["".join(parts[i:i + 2]) for i in range(0, len(parts), 2)]
    return [s.strip() for s in joined if s.strip()]


def wordnet_glosses(text: str) -> list[str]:
    """Definitions and quoted examples from a WordNet data.* file ('... | gloss; "example"; "example"')."""
    out = []
    for line in text.splitlines():
        if line.startswith(" ") or " | " not in line:  # licence header lines start with spaces
            continue
        for part in line.split(" | ", 1)[1].split(";"):
            part = part.strip().strip('"').strip()
            if part:
                out.append(part[0].upper() + part[1:])
    return out


def _usable(raw: str, source: str) -> Line | None:
    pair = normalise(raw)
    if pair is None:
        return None
    n = len(pair[1].split())
    if not MIN_WORDS <= n <= MAX_WORDS:
        return None
    return Line(source, *pair)


def collect(fortune_dir: Path = FORTUNE_DIR, wordnet_dir: Path = WORDNET_DIR) -> tuple[list[Line], list[Line]]:
    """(training lines, held-out lines), deduplicated by label; a label in the held-out pool, or containing
    a real-speech sentence, never appears in the training pool."""
    train: dict[str, Line] = {}
    held: dict[str, Line] = {}
    for path in sorted(fortune_dir.glob("*")) if fortune_dir.is_dir() else []:
        if path.suffix or path.name in SKIP_FORTUNES or not path.is_file():
            continue  # .dat indexes, .u8 copies
        pool = held if path.name in HELDOUT_FORTUNES else train
        for record in fortune_records(path.read_text(encoding="utf-8", errors="replace")):
            for sentence in split_sentences(record):
                line = _usable(sentence, f"fortunes/{path.name}")
                if line:
                    pool.setdefault(line.label, line)
    for pos in ("noun", "verb", "adj", "adv"):
        path = wordnet_dir / f"data.{pos}"
        if not path.is_file():
            continue
        pool = held if pos in HELDOUT_WORDNET else train
        for gloss in wordnet_glosses(path.read_text(encoding="utf-8", errors="replace")):
            line = _usable(gloss, f"wordnet/{pos}")
            if line:
                pool.setdefault(line.label, line)
    training = [ln for lab, ln in train.items() if lab not in held and not is_banned(lab)]
    return training, list(held.values())


def first_names(words_file: Path = WORDS_FILE) -> list[str]:
    """Capitalised single words of the system word list (names and places), lowercased."""
    if not words_file.is_file():
        return []
    names = {w.strip().lower() for w in words_file.read_text(errors="replace").splitlines()
             if re.fullmatch(r"[A-Z][a-z]{2,}", w.strip())}
    return sorted(names)


def vocabulary(n: int = 50000, words_file: Path = WORDS_FILE) -> list[str]:
    """wordfreq's n most frequent English words that the units can spell, in frequency order. With a system
    word list, only its words (lowercased) are kept: that drops abbreviations a synthesiser would spell out
    letter by letter ("cfc", "psc") and web fragments."""
    from wordfreq import top_n_list

    known = ({w.lower() for w in words_file.read_text(errors="replace").split() if not w.isupper()}
             if words_file.is_file() else None)
    return [w for w in top_n_list("en", n) if re.fullmatch(r"[a-z]+(?:'[a-z]+)?", w)
            and (known is None or w in known) and (len(w) > 1 or w in ("a", "i"))]
