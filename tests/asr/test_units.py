import pytest

from asr_server.asr.units import SymbolTable, Tokenizer, bpe_units, tokens_to_text, train_bpe

TEXTS = ["the train leaves at seven", "my phone number is four two nine", "please meet me at the station",
         "it costs twenty dollars", "the weather is sunny today"] * 20


def test_units_txt_layout(tmp_path):
    t = SymbolTable.from_units(["\u2581the", "a", "b"])
    t.save(tmp_path / "units.txt")
    assert (tmp_path / "units.txt").read_text().splitlines() == [
        "<blank> 0", "<unk> 1", "\u2581the 2", "a 3", "b 4", "<sos/eos> 5"]
    back = SymbolTable.load(tmp_path / "units.txt")
    assert back.id_to_symbol == t.id_to_symbol
    assert (back.blank_id, back.unk_id, back.sos_eos_id) == (0, 1, 5)


def test_units_txt_rejects_gaps(tmp_path):
    (tmp_path / "units.txt").write_text("<blank> 0\na 2\n")
    with pytest.raises(ValueError, match="gaps"):
        SymbolTable.load(tmp_path / "units.txt")


def test_tokens_to_text():
    assert tokens_to_text(["\u2581he", "llo", "\u2581wor", "ld", "<sos/eos>"]) == "hello world"


def test_bpe_round_trip(tmp_path):
    model = train_bpe(TEXTS, tmp_path / "bpe", vocab_size=60)
    symbols = SymbolTable.from_units(bpe_units(model))
    assert symbols.id_to_symbol[:2] == ["<blank>", "<unk>"]
    assert symbols.id_to_symbol[-1] == "<sos/eos>"
    assert symbols.id_to_symbol.count("<unk>") == 1
    tok = Tokenizer(symbols, model)
    for text in ["the train leaves at seven", "please meet me at the station"]:
        ids = tok.encode(text)
        assert all(2 <= i < len(symbols) - 1 for i in ids)
        assert tok.decode(ids) == text
    # blank and sos/eos in an id sequence are skipped
    ids = tok.encode("it costs twenty dollars")
    assert tok.decode([0] + ids + [len(symbols) - 1]) == "it costs twenty dollars"


def test_char_tokenizer_without_bpe():
    symbols = SymbolTable.from_units(["\u2581", "a", "b", "c"])
    tok = Tokenizer(symbols)
    ids = tok.encode("ab ca")
    assert tok.decode(ids) == "ab ca"
    assert tok.encode("z") == [symbols.unk_id]
