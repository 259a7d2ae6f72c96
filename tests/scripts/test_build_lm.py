"""scripts/build_lm.py: which text the LM learns from (the estimation itself is IRSTLM's, run when installed)."""

from __future__ import annotations

import gzip
import re
import shutil

import pytest

from asr_data.text_sources import Line
from asr_server.asr.decoding.token_lm import load_arpa
from asr_server.asr.units import SymbolTable
from tests.conftest import ROOT
from tests.helpers.scripts import load_script


def test_game_lines_join_and_every_evaluation_reference_is_withheld(tmp_path, monkeypatch):
    build_lm = load_script("build_lm")
    pool = [Line("fortunes/love", "All you need is love.", "all you need is love"),
            Line("fortunes/love", "Hello Joe.", "hello joe")]
    monkeypatch.setattr(build_lm, "collect", lambda: (pool, [Line("fortunes/wisdom", "Know thyself.", "know thyself")]))
    train = tmp_path / "text"
    train.write_text("fotaq_train_1 what a day\nbass_train_2 hello joe\ntrain_40000 a synthetic sentence\n"
                     "drascula_3   spaced   out  \n", encoding="utf-8")
    test = tmp_path / "fotaq_test"
    test.mkdir()
    (test / "text").write_text("fotaq_test_9 hello joe\n", encoding="utf-8")
    lines, held = build_lm.training_text([train], [test])
    # the synthetic utterances' text is already in the pool (collect); "hello joe" is a test reference
    assert lines == ["all you need is love", "what a day", "spaced out"]
    assert held == ["know thyself"]


def test_spoken_lines_are_digits_dates_and_templates_drawn_reproducibly(tmp_path, monkeypatch):
    build_lm = load_script("build_lm")
    lines = build_lm.spoken_lines(400)
    assert lines == build_lm.spoken_lines(400) and lines != build_lm.spoken_lines(400, seed=8)
    digit_words = {"oh", "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
    digit_strings = [ln for ln in lines if set(ln.split()) <= digit_words and len(ln.split()) >= 3]
    templates = [ln for ln in lines if ln.startswith(("the train to", "can you bring", "please meet me at"))]
    # digits are 7 of the 21 parts (textgen.TRAIN_KINDS), templates 10 (of 16 patterns, three counted here)
    assert 80 < len(digit_strings) < 200 and 20 < len(templates) < 120
    assert all(ln == ln.lower() and ln.strip() for ln in lines)
    # they join the pool, and an evaluation reference among them is withheld like any other line
    monkeypatch.setattr(build_lm, "collect", lambda: ([Line("fortunes/love", "Hi.", "hi")], []))
    test = tmp_path / "test_digits"
    test.mkdir()
    (test / "text").write_text(f"test_digits_1 {lines[0]}\n", encoding="utf-8")
    pooled, _ = build_lm.training_text([], [test], spoken=400)
    assert pooled == ["hi"] + [ln for ln in lines if ln != lines[0]]


@pytest.mark.skipif(shutil.which("irstlm") is None, reason="IRSTLM is not installed (apt-get install irstlm)")
def test_the_script_writes_an_arpa_over_the_model_units(tmp_path, monkeypatch):
    build_lm = load_script("build_lm")
    # Kneser-Ney needs the counts of counts of natural text: this project's own documentation, lowercased,
    # every sentence made to open with "the"
    docs = sorted(p for pattern in ("*.md", "docs/*.md", "bench/*.md", "models/*/*.md") for p in ROOT.glob(pattern))
    prose = " ".join(p.read_text(encoding="utf-8") for p in docs)
    words = re.sub(r"[^a-z' ]+", " ", prose.lower()).split()
    sentences = ["the " + " ".join(words[i:i + 12]) for i in range(0, len(words) - 12, 12)]
    assert len(sentences) > 500
    pool = [Line("x", text, text) for text in sentences]
    monkeypatch.setattr(build_lm, "collect", lambda: (pool, pool[:20]))
    out = tmp_path / "lm.arpa.gz"
    assert build_lm.main(["--model", str(ROOT / "models" / "open_en_wip"), "--order", "3", "--spoken-lines", "0",
                          "--out", str(out)]) == 0
    with gzip.open(out, "rt", encoding="utf-8") as f:
        assert "\\3-grams:" in f.read()
    symbols = SymbolTable.load(ROOT / "models" / "open_en_wip" / "units.txt")
    lm = load_arpa(out, symbols.id_to_symbol)
    assert lm.order == 3 and not lm.empty
    # every sentence opens with "the": after <s> it is far likelier than any other unit
    the = symbols.symbol_to_id["▁the"]
    assert lm.score_tokens([the])[0] > -0.1
    assert lm.score_tokens([symbols.symbol_to_id["▁o"]])[0] < -3.0
