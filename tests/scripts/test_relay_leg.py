"""scripts/relay_leg.py's pieces that run without training: the 8 kHz copy of an evaluation split, the bf16
decision, and the first leg's state (it continues the bundled model: same network, units, CMVN)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import ROOT
from tests.helpers.scripts import load_script


def test_the_band_limited_copy_keeps_the_speech_band_and_drops_the_rest(tmp_path):
    relay = load_script("relay_leg")
    src = tmp_path / "split"
    src.mkdir()
    t = np.arange(16000) / 16000
    audio = 0.3 * np.sin(2 * np.pi * 700 * t) + 0.3 * np.sin(2 * np.pi * 5000 * t)
    sf.write(src / "u1.wav", audio.astype(np.float32), 16000, subtype="PCM_16")
    (src / "wav.scp").write_text(f"u1 {src / 'u1.wav'}\n")
    (src / "text").write_text("u1 hello there\n")
    out = relay.band_limited_copy(src, tmp_path / "split_8k")
    assert (out / "text").read_text() == "u1 hello there\n"
    path = (out / "wav.scp").read_text().split()[1]
    narrow, rate = sf.read(path)
    assert rate == 16000 and narrow.size == audio.size
    spectrum = np.abs(np.fft.rfft(narrow))
    assert spectrum[5000] < 1e-2 * spectrum[700]
    # a later leg reuses the audio, with the references the label rules give now
    (src / "text").write_text("u1 hello there no\n")
    Path(path).write_bytes(b"kept")
    assert relay.band_limited_copy(src, tmp_path / "split_8k") == out
    assert (out / "text").read_text() == "u1 hello there no\n" and Path(path).read_bytes() == b"kept"


def test_the_first_leg_continues_the_bundled_model():
    """The relay started from the bundled model's phase 2 (step 18,932); the bundled model has gone on since
    (phase 3, band-limited fine-tune) with the same network."""
    import yaml

    relay = load_script("relay_leg")
    state = relay.FIRST_STATE
    model = ROOT / state["init_from"]
    config = (model / "train.yaml").read_text()
    net = state["network"]
    assert f"output_size: {net['d_model']}" in config and f"num_blocks: {net['blocks']}" in config
    assert f"linear_units: {net['ffn']}" in config and f"cnn_module_kernel: {net['kernel']}" in config
    assert yaml.safe_load(config)["training"]["steps"] >= state["step"] == 18932
    assert isinstance(relay.has_bf16(), bool)
    committed = ROOT / "models" / "open_en_wip" / "relay.json"
    if committed.exists():  # a later leg's state names the same network (dropout, a training setting, may change)
        saved = json.loads(committed.read_text())
        shape = {key: value for key, value in net.items() if key != "dropout"}
        assert {key: saved["network"][key] for key in shape} == shape
        assert saved["leg"] >= 1 and saved["step"] > state["step"]


def _split(folder, rows):
    """A Kaldi split with rows (utt, wav path, text); wavs are empty files (only their existence counts here)."""
    folder.mkdir(parents=True)
    for name, column in (("wav.scp", 1), ("text", 2)):
        (folder / name).write_text("".join(f"{row[0]} {row[column]}\n" for row in rows))
    (folder / "utt2dur").write_text("".join(f"{row[0]} 1.5\n" for row in rows))
    (folder / "utt2spk").write_text("".join(f"{row[0]} s{row[0][-1]}\n" for row in rows))
    for row in rows:
        if "gone" not in str(row[1]):
            row[1].touch()


def test_a_leg_with_earlier_legs_takes_their_surviving_audio_once(tmp_path, monkeypatch):
    relay = load_script("relay_leg")
    monkeypatch.setattr(relay, "ROOT", tmp_path)
    legs = tmp_path / "legs"
    game = (tmp_path / "game_1.wav", "a game line")
    _split(legs / "leg1" / "train", [("syn_1", tmp_path / "a1.wav", "one"), ("syn_2", tmp_path / "gone.wav", "two"),
                                     ("fotaq_train_1", *game)])
    _split(legs / "leg3" / "train", [("syn_9", tmp_path / "a9.wav", "nine"), ("fotaq_train_1", *game)])
    _split(legs / "leg3_uqm" / "train", [("syn_8", tmp_path / "a8.wav", "eight"), ("fotaq_train_1", *game),
                                         ("uqm_train_a-000-0", tmp_path / "u.wav", "hello")])
    out = relay.with_earlier_legs(3, with_uqm=False)
    # leg 2 absent, leg 1's lost wav left out, the non-commercial leg's folder not looked at; the game line
    # repeated to half of the data
    assert out == legs / "leg3" / "train_all"
    assert (out / "text").read_text().splitlines() == ["fotaq_train_1 a game line", "fotaq_train_1_r2 a game line",
                                                       "syn_1 one", "syn_9 nine"]
    assert (out / "utt2spk").read_text().splitlines()[2] == "syn_1 s1"
    relay.check_licence(out, with_uqm=False)  # clean: passes
    # a non-commercial leg takes both kinds of folders; its games' lines (the UQM one only in its own folder)
    # are repeated to at least half
    out = relay.with_earlier_legs(3, with_uqm=True)
    assert out == legs / "leg3_uqm" / "train_all"
    assert (out / "text").read_text().splitlines() == [
        "fotaq_train_1 a game line", "fotaq_train_1_r2 a game line", "syn_1 one", "syn_8 eight", "syn_9 nine",
        "uqm_train_a-000-0 hello", "uqm_train_a-000-0_r2 hello"]
    with pytest.raises(SystemExit, match="non-commercial"):
        relay.check_licence(out, with_uqm=False)
    # only the newest earlier leg: leg 2 (absent), not leg 1; the game line still comes from this leg's own folder
    out = relay.with_earlier_legs(3, with_uqm=False, newest=1)
    assert (out / "text").read_text().splitlines() == ["fotaq_train_1 a game line", "syn_9 nine"]
    out = relay.with_earlier_legs(3, with_uqm=False, newest=2)
    assert "syn_1 one" in (out / "text").read_text().splitlines()


def test_a_leg_leaves_out_the_game_lines_whisper_found_mismatched(tmp_path, monkeypatch):
    from asr_data import clip_check

    relay = load_script("relay_leg")
    monkeypatch.setattr(relay, "ROOT", tmp_path)
    checks = tmp_path / "clip_checks.tsv"
    checks.write_text(clip_check.share_out(["a wrongly paired line"], "something else")[0].line("fotaq_train_2"))
    monkeypatch.setattr(clip_check, "CHECKS", checks)
    _split(tmp_path / "legs" / "leg1" / "train", [("syn_1", tmp_path / "a1.wav", "one"),
                                                  ("fotaq_train_1", tmp_path / "g1.wav", "a game line"),
                                                  ("fotaq_train_2", tmp_path / "g2.wav", "a wrongly paired line")])
    out = relay.with_earlier_legs(1, with_uqm=False)
    assert (out / "text").read_text().splitlines() == ["fotaq_train_1 a game line", "syn_1 one"]
    # a leg's own folder, made before the verdict and a change of label rules, is rewritten when it is reused:
    # without the dropped line, with the game's current label (the manifest's last row)
    (tmp_path / "fotaq").mkdir()
    (tmp_path / "fotaq" / "manifest.jsonl").write_text("".join(json.dumps({"utt": "fotaq_train_1", "label": label})
                                                               + "\n" for label in ("a game line", "a new label")))
    monkeypatch.setattr(relay, "run", lambda cmd, **kw: pytest.fail(f"nothing is made again: {cmd}"))
    assert relay.make_data(1, 5.0, 2026, False) == tmp_path / "legs" / "leg1" / "train"
    for name in ("text", "wav.scp", "utt2spk", "utt2dur"):
        assert [line.split()[0] for line in (tmp_path / "legs" / "leg1" / "train" / name).read_text().splitlines()
                ] == ["syn_1", "fotaq_train_1"], name
    assert (tmp_path / "legs" / "leg1" / "train" / "text").read_text().splitlines()[1] == "fotaq_train_1 a new label"
    out = relay.with_earlier_legs(1, with_uqm=False)  # earlier legs' folders take the current label too
    assert "fotaq_train_1 a new label" in (out / "text").read_text().splitlines()


def test_the_licence_clean_state_refuses_the_non_commercial_data(tmp_path, monkeypatch):
    """--with-uqm (CC BY-NC-SA voices) is refused for models/open_en_wip before anything runs; a state of its
    own takes it."""
    relay = load_script("relay_leg")
    monkeypatch.setattr(relay, "setup", lambda with_uqm: pytest.fail("nothing may run"))
    with pytest.raises(SystemExit, match="non-commercial"):
        relay.main(["--with-uqm", "--skip-setup"])
    state = tmp_path / "open_en_nc"
    state.mkdir()
    (state / "relay.json").write_text(json.dumps({**relay.FIRST_STATE, "data": {"uqm": True}}))
    monkeypatch.setattr(relay, "make_data", lambda *a: (_ for _ in ()).throw(RuntimeError(f"make_data{a}")))
    with pytest.raises(RuntimeError, match=r"make_data\(1, 30.0, 2026, True\)"):
        relay.main(["--state", str(state), "--skip-setup"])  # the state's own record keeps the data on


def test_the_model_cards_leg_table_is_rewritten_from_legs_tsv_and_nothing_else_changes(tmp_path):
    relay = load_script("relay_leg")
    columns = [*relay.LOG_COLUMNS, "real/offline_rescore", "real/stream_rescore", "test_digits/offline_rescore",
               "test_digits/stream_rescore"]
    rows = [["0", "2026-12-06", "18932", "0", "0", "0", "100.00", "99.00", "90.91", "90.00"],
            ["1", "2026-12-07", "19697", "88.3", "6.47", "20.7", "96.88", "95.83", "48.64", "51.97"],
            ["2", "2026-12-08", "20498", "85.3", "7.46", "42.6", "97.92", "97.92", "", ""]]  # digits not evaluated
    (tmp_path / "legs.tsv").write_text("\n".join("\t".join(r) for r in [columns, *rows]) + "\n")
    start, end = relay.CARD_TABLE
    (tmp_path / "MODEL_CARD.md").write_text(f"# card\nbefore\n{start}\n| stale | table |\n{end}\nafter\n")
    relay.write_card_table(tmp_path)
    card = (tmp_path / "MODEL_CARD.md").read_text()
    assert card.startswith("# card\nbefore\n") and card.endswith(f"{end}\nafter\n") and "stale" not in card
    table = card.split(start)[1].split(end)[0].strip().splitlines()
    assert table[0] == "| split | demo_en (leg 0) | leg 1 (2026-12-07) | leg 2 (2026-12-08) |"
    assert table[2] == ("| real (pocketsphinx-testdata; pocketsphinx 21.9) | 100.00 / 99.00 | 96.88 / 95.83 "
                        "| 97.92 / 97.92 |")
    assert table[3] == "| test_digits | 90.91 / 90.00 | 48.64 / 51.97 | - / - |"
    assert len(table) == 4  # splits absent from legs.tsv get no row


def test_figures_with_the_lm_join_the_log_as_new_columns_and_the_table_as_new_rows(tmp_path):
    relay = load_script("relay_leg")
    columns = [*relay.LOG_COLUMNS, "real/offline_rescore", "real/stream_rescore"]
    rows = [["0", "2026-12-06", "18932", "0", "0", "0", "100.00", "99.00"]]
    (tmp_path / "legs.tsv").write_text("\n".join("\t".join(r) for r in [columns, *rows]) + "\n")
    model = tmp_path / "model"
    model.mkdir()
    for name in ("final.pt", "train.yaml", "units.txt", "bpe.model", "global_cmvn"):
        (model / name).write_text(name)
    state = {**relay.FIRST_STATE}
    wer = {"real/offline_rescore": 73.96, "real/stream_rescore": 72.92, "real/offline_rescore_lm": 63.54,
           "real/stream_rescore_lm": 63.54}
    relay.record_leg(tmp_path, state, 1, model, 100, 10.0, 1.0, 2.0, wer)
    lines = (tmp_path / "legs.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    assert header[-2:] == ["real/offline_rescore_lm", "real/stream_rescore_lm"]
    legs = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
    assert all(len(line.split("\t")) == len(header) for line in lines)
    assert (legs[0]["real/offline_rescore_lm"], legs[1]["real/offline_rescore_lm"]) == ("", "63.54")
    assert legs[1]["real/offline_rescore"] == "73.96"
    table = relay.leg_table(tmp_path / "legs.tsv").splitlines()
    assert table[2].endswith("| 100.00 / 99.00 | 73.96 / 72.92 |")
    assert table[3] == ("| real (pocketsphinx-testdata; pocketsphinx 21.9), with the LM 0.7/3.0 | - / - "
                        "| 63.54 / 63.54 |")


def test_a_leg_evaluates_with_the_states_lm_when_it_has_one(tmp_path, monkeypatch):
    relay = load_script("relay_leg")
    calls = []

    def fake_run(cmd):
        calls.append([str(c) for c in cmd])
        js = Path(calls[-1][calls[-1].index("--json") + 1])
        fused = "--lm" in calls[-1]
        figures = {mode: 50.0 for mode in relay.LOGGED_MODES}
        figures.update({f"{mode}+lm{relay.LM_FUSION}": 40.0 for mode in relay.LM_MODES} if fused else {})
        js.write_text(json.dumps({"split": figures}))

    monkeypatch.setattr(relay, "run", fake_run)
    monkeypatch.setattr(relay, "ROOT", tmp_path)
    monkeypatch.setattr(relay, "EVAL_SPLITS", [("test_open", "legs/eval/test_open", 100)])
    (tmp_path / "legs" / "eval" / "test_open").mkdir(parents=True)
    (tmp_path / "legs" / "eval" / "test_open" / "text").write_text("u1 a b\n")
    out = tmp_path / "legs" / "eval_leg1.json"
    assert relay.evaluate(tmp_path / "m", out, tmp_path / "absent.arpa.gz") == {
        f"test_open/{mode}": 50.0 for mode in relay.LOGGED_MODES}
    lm = tmp_path / "lm.arpa.gz"
    lm.write_text("")
    wer = relay.evaluate(tmp_path / "m", out, lm)
    assert calls[-1][calls[-1].index("--lm") + 1] == str(lm)
    assert wer["test_open/offline_rescore_lm"] == wer["test_open/stream_rescore_lm"] == 40.0


def test_a_card_without_the_markers_is_left_alone(tmp_path):
    relay = load_script("relay_leg")
    (tmp_path / "legs.tsv").write_text("\t".join(relay.LOG_COLUMNS) + "\n")
    (tmp_path / "MODEL_CARD.md").write_text("# card\nno table here\n")
    relay.write_card_table(tmp_path)
    assert (tmp_path / "MODEL_CARD.md").read_text() == "# card\nno table here\n"


def test_a_leg_with_average_last_keeps_snapshots_and_averages_the_last_ones(tmp_path, monkeypatch):
    relay = load_script("relay_leg")
    monkeypatch.setattr(relay, "ROOT", tmp_path)
    monkeypatch.setattr(relay, "has_bf16", lambda: False)
    commands = []

    def fake_run(cmd, **kw):
        commands.append([str(c) for c in cmd])
        if "--finalize" in cmd:  # the training run has left its snapshots by then
            snapshots = tmp_path / "exp" / "leg3" / "snapshots"
            snapshots.mkdir(parents=True)
            for step in (900, 1000, 1100, 80):
                (snapshots / f"step_{step:07d}.pt").touch()

    monkeypatch.setattr(relay, "run", fake_run)
    state = json.loads(json.dumps(relay.FIRST_STATE))
    state.update(leg=2)
    state["schedule"]["average_last"] = 3
    relay.train(state, 3, tmp_path / "data", 10.0, tmp_path / "state")
    training, finalize, averaging = commands
    assert training[training.index("--keep-snapshots") + 1] == "3" and "--finalize" not in training
    assert finalize == [*training, "--finalize", "--fp16-weights"]
    assert averaging[1].endswith("scripts/average_checkpoints.py")
    snapshots = tmp_path / "exp" / "leg3" / "snapshots"
    assert averaging[2:] == ["--model-dir", str(tmp_path / "exp" / "leg3" / "final"),
                             *(str(snapshots / f"step_{s:07d}.pt") for s in (900, 1000, 1100)), "--fp16-weights"]


def _leg_3_commands(tmp_path, monkeypatch, **schedule) -> list[list[str]]:
    """The commands relay.train runs for leg 3 (none of them run), its schedule updated with `schedule`."""
    relay = load_script("relay_leg")
    monkeypatch.setattr(relay, "ROOT", tmp_path)
    commands = []
    monkeypatch.setattr(relay, "run", lambda cmd, **kw: commands.append([str(c) for c in cmd]))
    state = json.loads(json.dumps(relay.FIRST_STATE))
    state.update(leg=2)
    state["schedule"].update(schedule)
    relay.train(state, 3, tmp_path / "data", 10.0, tmp_path / "state")
    return commands


def test_a_leg_without_average_last_trains_as_before(tmp_path, monkeypatch):
    commands = _leg_3_commands(tmp_path, monkeypatch)
    assert len(commands) == 2 and "--keep-snapshots" not in commands[0]


def test_a_schedule_with_frozen_convs_passes_them_to_training(tmp_path, monkeypatch):
    training = _leg_3_commands(tmp_path, monkeypatch)[0]
    assert "--frozen-convs" not in training  # an older relay.json has no such key
    training = _leg_3_commands(tmp_path, monkeypatch, frozen_convs=1)[0]
    assert training[training.index("--frozen-convs") + 1] == "1"


def test_a_leg_records_the_training_clock_of_its_checkpoint(tmp_path, monkeypatch):
    """A leg stopped and resumed from its checkpoint trained for the checkpoint's whole clock, not for the wall
    time of its last run."""
    import torch

    relay = load_script("relay_leg")
    monkeypatch.setattr(relay, "ROOT", tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    (data / "text").write_text("u1 a\nu2 b\n")
    (data / "utt2dur").write_text("u1 1800\nu2 1800\n")
    exp = tmp_path / "exp"
    exp.mkdir()
    torch.save({"state": {"step": 8, "elapsed": 128.1 * 60}}, exp / "checkpoint.pt")
    monkeypatch.setattr(relay, "make_data", lambda *a: data)
    monkeypatch.setattr(relay, "check_licence", lambda *a: None)
    monkeypatch.setattr(relay, "train", lambda *a: exp)
    monkeypatch.setattr(relay, "evaluate", lambda *a: {})
    recorded = []
    monkeypatch.setattr(relay, "record_leg", lambda *a: recorded.append(a))
    assert relay.main(["--state", str(tmp_path / "state"), "--skip-setup"]) == 0
    (_, _, leg, _, steps, minutes, data_h, hours_seen, _), = recorded
    assert (leg, steps, minutes, data_h) == (1, 8, 128.1, 1.0)
    assert hours_seen == 1.0 * 8 * 32 / 2
