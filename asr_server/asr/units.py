"""Output units: WeNet's ``units.txt`` symbol table and sentencepiece BPE text <-> ids.

WeNet writes ``units.txt`` as ``<symbol> <id>`` lines: ``<blank> 0``, ``<unk> 1``, the modelling units, and
``<sos/eos>`` as the last id (the attention decoder uses one id for both). BPE pieces mark a word start with
U+2581 ("▁"); decoding joins the pieces and turns that mark into spaces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

BLANK = "<blank>"
UNK = "<unk>"
SOS_EOS = "<sos/eos>"
WORD_START = "\u2581"  # sentencepiece's word-boundary mark


class SymbolTable:
    """Bidirectional unit <-> id map with WeNet's special symbols."""

    def __init__(self, symbols: Sequence[str]):
        self.id_to_symbol: list[str] = list(symbols)
        self.symbol_to_id: dict[str, int] = {s: i for i, s in enumerate(self.id_to_symbol)}
        if len(self.symbol_to_id) != len(self.id_to_symbol):
            raise ValueError("duplicate symbols in the unit table")

    @classmethod
    def from_units(cls, units: Iterable[str]) -> "SymbolTable":
        """Table of ``<blank>, <unk>, *units, <sos/eos>`` (specials in ``units`` are not repeated)."""
        body = [u for u in units if u not in (BLANK, UNK, SOS_EOS)]
        return cls([BLANK, UNK, *body, SOS_EOS])

    @classmethod
    def load(cls, path: str | Path) -> "SymbolTable":
        pairs = []
        for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                raise ValueError(f"{path}:{line_no}: expected '<symbol> <id>'")
            pairs.append((int(parts[1]), parts[0]))
        pairs.sort()
        if [i for i, _ in pairs] != list(range(len(pairs))):
            raise ValueError(f"{path}: ids must be 0..N-1 without gaps")
        return cls([s for _, s in pairs])

    def save(self, path: str | Path) -> None:
        Path(path).write_text("".join(f"{s} {i}\n" for i, s in enumerate(self.id_to_symbol)), encoding="utf-8")

    def __len__(self) -> int:
        return len(self.id_to_symbol)

    @property
    def blank_id(self) -> int:
        return self.symbol_to_id.get(BLANK, 0)

    @property
    def unk_id(self) -> int:
        return self.symbol_to_id.get(UNK, 1)

    @property
    def sos_eos_id(self) -> int:
        # WeNet: sos = eos = vocab_size - 1, whatever the symbol is called
        return len(self.id_to_symbol) - 1

    def ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.id_to_symbol[int(i)] for i in ids]

    def tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        return [self.symbol_to_id.get(t, self.unk_id) for t in tokens]


def tokens_to_text(tokens: Iterable[str]) -> str:
    """Join units into text: BPE pieces glue together, "▁" becomes a space; specials are dropped."""
    text = "".join(t for t in tokens if t not in (BLANK, SOS_EOS))
    return text.replace(WORD_START, " ").strip()


class Tokenizer:
    """Text <-> unit ids, with a sentencepiece BPE model (``bpe_model``) or character units without one."""

    def __init__(self, symbols: SymbolTable, bpe_model: str | Path | None = None):
        self.symbols = symbols
        self._sp = None
        if bpe_model is not None:
            import sentencepiece as spm  # only needed with a BPE model

            self._sp = spm.SentencePieceProcessor(model_file=str(bpe_model))

    def text_to_tokens(self, text: str) -> list[str]:
        if self._sp is not None:
            return list(self._sp.encode(text, out_type=str))
        # character units: spaces become the word-start mark so decode is the inverse
        return [WORD_START if c == " " else c for c in text.strip()]

    def encode(self, text: str) -> list[int]:
        return self.symbols.tokens_to_ids(self.text_to_tokens(text))

    def decode(self, ids: Iterable[int]) -> str:
        """ids -> text; blank and sos/eos are skipped (CTC collapsing is the search's job)."""
        ids = [int(i) for i in ids if int(i) not in (self.symbols.blank_id, self.symbols.sos_eos_id)]
        return tokens_to_text(self.symbols.ids_to_tokens(ids))


def train_bpe(texts: Iterable[str], model_prefix: str | Path, vocab_size: int) -> Path:
    """Train a sentencepiece BPE model on transcripts; returns the ``.model`` path.

    WeNet reserves <blank>/<unk>/<sos/eos> in ``units.txt``, so sentencepiece's own specials are disabled
    except ``<unk>`` (which sentencepiece requires) and are stripped from the unit list by ``bpe_units``.
    """
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(sentence_iterator=iter(list(texts)), model_prefix=str(model_prefix),
                                   vocab_size=vocab_size, model_type="bpe", character_coverage=1.0,
                                   bos_id=-1, eos_id=-1, unk_id=0, unk_piece=UNK, minloglevel=2)
    return Path(f"{model_prefix}.model")


def bpe_units(bpe_model: str | Path) -> list[str]:
    """The pieces of a sentencepiece model in id order, without its <unk>; feed to ``SymbolTable.from_units``."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(bpe_model))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_unknown(i)]
