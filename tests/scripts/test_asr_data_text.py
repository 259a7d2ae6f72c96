"""asr_data text side: numbers said as words, normalisation to the units' alphabet, text
sources split by whole source into training and held-out pools, and the guard that keeps the real
recordings' sentences out of training text."""

from __future__ import annotations

import random

import pytest

from asr_data import spoken, textgen
from asr_data.normalise import LABEL_CHARS, normalise, unspellable, written_label
from asr_data.real_speech import REAL_TRANSCRIPTS, is_banned
from asr_data.text_sources import Line, collect, fortune_records, split_sentences, wordnet_glosses
from tests.conftest import ROOT


@pytest.mark.parametrize("n, words", [(0, "zero"), (13, "thirteen"), (40, "forty"), (105, "one hundred five"),
                                      (1984, "one thousand nine hundred eighty four"),
                                      (2_000_017, "two million seventeen")])
def test_cardinal(n, words):
    assert spoken.cardinal(n) == words


def test_ordinals_years_and_digit_strings():
    assert [spoken.ordinal(n) for n in (1, 2, 3, 5, 12, 20, 21, 100)] == [
        "first", "second", "third", "fifth", "twelfth", "twentieth", "twenty first", "one hundredth"]
    assert spoken.year(1984) == "nineteen eighty four"
    assert spoken.year(1805) == "eighteen oh five"
    assert spoken.year(1900) == "nineteen hundred"
    assert spoken.year(2005) == "two thousand five"
    assert spoken.year(2024) == "twenty twenty four"
    assert spoken.digit_string("4071", zero="oh") == "four oh seven one"


def test_normalise_writes_numbers_symbols_and_abbreviations_as_words():
    speak, label = normalise("Mr. Smith paid $3.50 for 2 apples on the 21st of May, 1984.")
    assert label == ("mister smith paid three dollars and fifty cents for two apples on the twenty first of "
                     "may nineteen eighty four")
    assert speak.startswith("Mister Smith paid three dollars") and speak.endswith(".")  # prosody kept
    assert normalise("It's 10:05 -- don't panic! 12% of 1,200 is 144")[1] == (
        "it's ten oh five don't panic twelve percent of one thousand two hundred is one hundred forty four")
    assert normalise("Caf\u00e9 \u201cdeluxe\u201d")[1] == "cafe deluxe"


@pytest.mark.parametrize("raw", ["The IBM PC is here", "see www.debian.org", "x = y + 1", "a/b test",
                                 "\u041f\u0440\u0438\u0432\u0435\u0442 world", "!!!"])
def test_normalise_drops_what_cannot_be_said_unambiguously(raw):
    assert normalise(raw) is None


def test_another_recognisers_written_words_become_a_label_by_the_same_rules():
    assert written_label(" 10 of clubs.") == "ten of clubs"
    assert written_label(" Mr. Smith paid $5, didn't he?") == "mister smith paid five dollars didn't he"
    assert written_label(" C++ & 10 HTML") == "c and ten html"  # refused as a whole: word by word
    assert written_label(" the 1990s ♪") == "the 1990s"  # what the rules cannot say keeps letters and digits
    assert written_label("") == ""


def test_no_is_a_number_sign_only_before_a_numeral():
    assert normalise("No. Never 'eard of 'im.", allow_caps=True)[1] == "no never eard of im"
    assert normalise("No.", allow_caps=True)[1] == "no"
    assert normalise("Room No. 5 is upstairs.")[1] == "room number five is upstairs"


def test_labels_use_only_the_units_alphabet():
    rng = random.Random(3)
    labels = [spoken.random_number(rng) for _ in range(200)] + [spoken.random_date(rng) for _ in range(200)]
    labels += [spoken.random_time(rng) for _ in range(200)] + [spoken.random_digits(rng) for _ in range(200)]
    assert all(not unspellable(t) for t in labels)
    # the bundled model's units spell every character of that alphabet (BPE pieces fall back to letters)
    units = {line.split()[0] for line in (ROOT / "models/demo_en/units.txt").read_text().splitlines()}
    assert LABEL_CHARS - {" "} <= units
    assert unspellable("na\u00efve") == {"\u00ef"}


def test_fortune_and_wordnet_parsing():
    records = fortune_records("Q: Why did it cross?\nA: To get away.\n%\nBe kind.\n\t\t-- Someone\n%\n")
    assert records == ["Why did it cross? To get away.", "Be kind."]
    assert split_sentences("One thing. Another thing! \"Third?\" Yes.") == [
        "One thing.", "Another thing!", "\"Third?\"", "Yes."]
    line = '00003939 00 a 01 dying 0 003 ! 00003356 a 0101 | in the process of dying; "a dying man"; "his wish"  '
    header = "  1 This software and database is being provided to you | by Princeton"
    assert wordnet_glosses(f"{header}\n{line}\n") == ["In the process of dying", "A dying man", "His wish"]


@pytest.fixture
def text_packages(tmp_path):
    """Fake fortune and WordNet files in the packages' formats: one held-out fortune file, one held-out
    WordNet part of speech, a sentence shared by a held-out and a training file, and a real recording's
    sentence inside a training fortune."""
    fortunes, wordnet = tmp_path / "fortunes", tmp_path / "wordnet"
    fortunes.mkdir()
    wordnet.mkdir()
    (fortunes / "love").write_text("All you need is love and good bread.\n%\nThe cat sat on the mat today.\n%\n"
                                   "People said he was not an ill disposed young man at all.\n%\n")
    (fortunes / "love.dat").write_bytes(b"\x00\x01binary index")
    (fortunes / "science").write_text("Water boils at one hundred degrees.\n%\nThe cat sat on the mat today.\n%\n")
    (fortunes / "ascii-art").write_text("Look at this picture of a house.\n%\n")
    (wordnet / "data.noun").write_text("00001 00 n 01 dog 0 | a domestic animal that barks loudly\n")
    (wordnet / "data.adv").write_text('00002 00 r 01 slowly 0 | not at all quickly; "he walked very slowly home"\n')
    return fortunes, wordnet


def test_whole_sources_are_held_out_and_never_trained_on(text_packages):
    train, held = collect(*text_packages)
    train_labels = {ln.label for ln in train}
    held_by_source = {ln.label: ln.source for ln in held}
    assert held_by_source == {"water boils at one hundred degrees": "fortunes/science",
                              "the cat sat on the mat today": "fortunes/science",
                              "not at all quickly": "wordnet/adv", "he walked very slowly home": "wordnet/adv"}
    # the sentence that is also in a held-out file is dropped from training, the rest of love stays
    assert train_labels == {"all you need is love and good bread", "a domestic animal that barks loudly"}
    assert not train_labels & set(held_by_source)


def test_real_recordings_sentences_are_banned_whole_or_in_part():
    assert len(REAL_TRANSCRIPTS) == 11 and sum(len(t.split()) for t in REAL_TRANSCRIPTS) == 96
    assert all(is_banned(t) for t in REAL_TRANSCRIPTS)
    assert is_banned("then she said go forward ten meters and stopped")
    assert is_banned("he knew he might even have been made amiable by then")  # 5+ shared words
    assert not is_banned("go forward ten miles")
    assert not is_banned("he was not an old man")  # four shared words: a common phrase, allowed
    assert not is_banned("five fives")  # whole words only


def test_training_draws_never_return_a_banned_or_held_out_template_sentence():
    real = REAL_TRANSCRIPTS[1]
    pools = textgen.Pools.from_lines(
        [Line("fortunes/x", real, real), Line("fortunes/x", "a fine day", "a fine day")],
        vocab=["five", "ten", "of", "clubs"], names=["anna"],
        template=lambda rng: rng.choice(["it is late", "it is early"]), banned_templates=frozenset({"it is late"}))
    rng = random.Random(0)
    kinds = {"sentence": 1, "words": 1, "template": 1}
    drawn = [textgen.draw(rng, kinds, pools, training=True) for _ in range(400)]
    labels = {d.label for d in drawn}
    assert real not in labels and "it is late" not in labels
    assert {"a fine day", "it is early"} <= labels
    assert not any(is_banned(d.label) for d in drawn)  # e.g. "five five" among the random words
    # without the guard the same pool does yield them: the filter is what keeps them out
    untested = {textgen.draw(random.Random(i), kinds, pools, training=False).label for i in range(400)}
    assert real in untested and "it is late" in untested
