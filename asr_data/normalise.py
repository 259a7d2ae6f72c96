"""Raw English text -> (what the synthesiser is given, the transcript label).

The synthesiser keeps the sentence's case and punctuation (prosody), with numbers, symbols and a few
abbreviations already written as words, so it says exactly the label's words. The label is what the
recogniser's units spell: lowercase a-z, the apostrophe inside words, single spaces.

Sentences that cannot be said unambiguously are dropped (None): code, URLs, all-capital acronyms (a
synthesiser may spell or read them), symbols left over after expansion, non-Latin letters.
"""

from __future__ import annotations

import re
import unicodedata

from asr_data import spoken

LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz' ")
WORD = re.compile(r"^[a-z]+(?:'[a-z]+)*$")

# Characters that mark code, markup, tables or ASCII art rather than prose.
UNSAYABLE = re.compile(r"[@#*_=<>{}\[\]|\\/~^`+]|https?:|www\.|\w\.(?:com|org|net|edu|gov|html?|txt|exe)\b")
ACRONYM = re.compile(r"\b(?!I\b|A\b|OK\b)[A-Z]{2,}s?\b")
ABBREVIATIONS = {"Mr.": "Mister", "Mrs.": "Missus", "Dr.": "Doctor", "Prof.": "Professor", "vs.": "versus",
                 "etc.": "et cetera", "e.g.": "for example", "i.e.": "that is", "Jr.": "Junior",
                 "Sr.": "Senior", "&": " and "}
# "No." is "number" only before a numeral ("No. 5"); elsewhere it ends a sentence: "No. Never 'eard of 'im."
NUMBER_SIGN = re.compile(r"\bNo\.(?=\s*\d)")
TRANSLATE = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": " - ",
                           "\u2014": " - ", "\u2026": "...", "\t": " ", "\n": " "})


def _fold(text: str) -> str:
    """Curly quotes and dashes to ASCII, accents removed (cafe), other non-ASCII kept (rejected later)."""
    text = unicodedata.normalize("NFKC", text).translate(TRANSLATE)
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _money(m: re.Match) -> str:
    whole, cents = int(m.group(1).replace(",", "")), m.group(2)
    words = f"{spoken.cardinal(whole)} {'dollar' if whole == 1 else 'dollars'}"
    if cents and int(cents):
        words += f" and {spoken.cardinal(int(cents))} cents"
    return words


def _integer(m: re.Match) -> str:
    digits = m.group(0).replace(",", "")
    n = int(digits)
    if "," not in m.group(0) and len(digits) == 4 and 1100 <= n <= 2099:
        return spoken.year(n)
    if digits.startswith("0") and len(digits) > 1 or len(digits) > 9:
        return spoken.digit_string(digits)
    return spoken.cardinal(n)


# Order matters: money before decimals before ordinals before plain integers.
NUMBER_RULES = (
    (re.compile(r"\$(\d[\d,]*)(?:\.(\d\d))?\b"), _money),
    (re.compile(r"\b(\d+)\s?%"), lambda m: f"{spoken.cardinal(int(m.group(1)))} percent"),
    (re.compile(r"\b\d+\.\d+\b"), lambda m: spoken.decimal(m.group(0))),
    (re.compile(r"\b(\d+)(?:st|nd|rd|th)\b"), lambda m: spoken.ordinal(int(m.group(1)))),
    (re.compile(r"\b(\d{1,2}):(\d\d)\b"),
     lambda m: f"{spoken.cardinal(int(m.group(1)))} "
               + (f"oh {spoken.ONES[int(m.group(2))]}" if 0 < int(m.group(2)) < 10
                  else "o'clock" if m.group(2) == "00" else spoken.cardinal(int(m.group(2))))),
    (re.compile(r"\b\d{1,3}(?:,\d{3})+\b|\b\d+\b"), _integer),
)


def speakable(raw: str, allow_caps: bool = False) -> str | None:
    """The text to give a synthesiser, or None if it cannot be said unambiguously. allow_caps: capitals
    are emphasis, not acronyms (transcripts of recorded speech: "At least MY plane")."""
    text = _fold(raw)
    if UNSAYABLE.search(text) or (not allow_caps and ACRONYM.search(text)):
        return None
    text = NUMBER_SIGN.sub("number", text)
    for abbr, words in ABBREVIATIONS.items():
        text = text.replace(abbr, words)
    for pattern, repl in NUMBER_RULES:
        text = pattern.sub(repl, text)
    if re.search(r"\d", text) or not text.isascii():
        return None
    return re.sub(r"\s+", " ", text).strip()


def label(speak: str) -> str | None:
    """The transcript of a speakable text: lowercase words, apostrophes only inside words."""
    text = speak.lower().replace("-", " ")
    text = re.sub(r"[^a-z' ]", " ", text)
    words = [w.strip("'") for w in text.split()]
    words = [w for w in words if w]
    if not words or not all(WORD.match(w) for w in words):
        return None
    return " ".join(words)


def normalise(raw: str, allow_caps: bool = False) -> tuple[str, str] | None:
    """(speak, label) for a raw sentence, or None."""
    speak = speakable(raw, allow_caps)
    if speak is None:
        return None
    lab = label(speak)
    return None if lab is None else (speak, lab)


def unspellable(text: str, chars: frozenset[str] = LABEL_CHARS) -> set[str]:
    """Characters of a label that a unit set built from `chars` cannot write."""
    return set(text) - chars


def written_label(text: str) -> str:
    """Another recogniser's written English ("10 of clubs.") as a label ("ten of clubs"), by the rules that
    made the training labels, so that its words are compared with ours like for like. When the rules refuse
    the text as a whole (a symbol, an acronym), each word is taken alone: what they still cannot say is kept as
    its lowercase letters and digits."""
    normalised = normalise(text, allow_caps=True)
    if normalised is not None:
        return normalised[1]
    words = []
    for word in text.split():
        alone = normalise(word, allow_caps=True)
        words.append(alone[1] if alone is not None else "".join(c for c in word.lower() if c.isalnum() or c == "'"))
    return " ".join(w for w in words if w)
