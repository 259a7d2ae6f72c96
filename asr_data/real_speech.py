"""The real recordings used for evaluation (Debian pocketsphinx-testdata, scripts/get_real_speech.sh) and the
guard that keeps their sentences out of every training text.

The transcripts are listed here, not read from the fetched split, so the guard holds even before the split is
fetched.
"""

from __future__ import annotations

REAL_TRANSCRIPTS = (
    "and mister john dashwood had then leisure to consider how much there might be prudently in his power "
    "to do for them",
    "he was not an ill disposed young man",
    "unless to be rather cold hearted and rather selfish is to be ill disposed",
    "had he married a more a amiable woman he might have been made still more respectable than he was",
    "he might even have been made amiable himself",
    "ten of clubs",
    "four queen of clubs",
    "seven of clubs",
    "five five",
    "eight of spades four of clubs seven of hearts",
    "go forward ten meters",
)
# A training text sharing this many consecutive words with a recording is a copy of it (e.g. a quotation of
# the same novel), even if it does not hold the whole sentence.
SHARED_NGRAM = 5


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


_BANNED_NGRAMS = set().union(*(_ngrams(t.split(), SHARED_NGRAM) for t in REAL_TRANSCRIPTS))


def is_banned(label: str, transcripts: tuple[str, ...] = REAL_TRANSCRIPTS) -> bool:
    """True if a training label holds a real recording's whole sentence or a long stretch of one."""
    padded = f" {label} "
    if any(f" {t} " in padded for t in transcripts):
        return True
    grams = _BANNED_NGRAMS if transcripts is REAL_TRANSCRIPTS else set().union(
        *(_ngrams(t.split(), SHARED_NGRAM) for t in transcripts))
    return bool(_ngrams(label.split(), SHARED_NGRAM) & grams)
