"""scripts/train.py on a tiny corpus and model: it learns, writes a WeNet-style model dir, and a run that is
interrupted and resumed from its checkpoint ends with exactly the weights of an uninterrupted run;
scripts/average_checkpoints.py averages snapshots of a run."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

torch = pytest.importorskip("torch", reason="training needs torch")

from tests.conftest import ROOT  # noqa: E402
from tests.helpers.scripts import load_script  # noqa: E402

SENTENCES = ["one two three", "four five six", "seven eight nine", "zero one two", "three four five",
             "six seven eight", "nine zero one", "two three four"]
TINY = ["--d-model", "32", "--heads", "2", "--ffn", "64", "--blocks", "1", "--dec-blocks", "1", "--kernel", "3",
        "--bpe-size", "30", "--batch", "4", "--threads", "1", "--save-minutes", "0", "--warmup", "2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Eight utterances of tones whose pitches follow the words, so there is something to learn."""
    root = tmp_path_factory.mktemp("corpus")
    rate = 16000
    scp, text = [], []
    for i, sentence in enumerate(SENTENCES):
        pieces = []
        for word in sentence.split():
            t = np.arange(int(0.25 * rate)) / rate
            pieces.append(0.3 * np.sin(2 * np.pi * (200 + 40 * len(word) + 7 * ord(word[0])) * t))
            pieces.append(np.zeros(int(0.05 * rate)))
        path = root / f"u{i}.wav"
        sf.write(path, np.concatenate(pieces).astype(np.float32), rate)
        scp.append(f"u{i} {path}\n")
        text.append(f"u{i} {sentence}\n")
    (root / "wav.scp").write_text("".join(scp))
    (root / "text").write_text("".join(text))
    return root


@dataclasses.dataclass
class Run:
    returncode: int
    stderr: str


def run_main(script: str, argv: list[str]) -> Run:
    """scripts/<script>.py's main(argv) in this process, stderr captured: a subprocess would spend about 2.5 s
    of its run importing torch, which this process has already done (15 runs here). What main changes in the
    process (torch's thread count, SIGTERM/SIGINT handlers) is put back. The command line as users type it is
    checked once, by test_the_command_line_trains_and_finalizes."""
    threads = torch.get_num_threads()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = load_script(script).main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
        err.write(str(exit_.code))
    finally:
        torch.set_num_threads(threads)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return Run(code or 0, err.getvalue())


def train(corpus: Path, exp: Path, *extra: str) -> Run:
    return run_main("train", ["--data", str(corpus), "--exp", str(exp), *TINY, *extra])


def test_the_command_line_trains_and_finalizes(corpus: Path, tmp_path: Path) -> None:
    # with a batch-making worker: a spawned process re-imports train.py as __mp_main__, which only a script run
    # exercises
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "--data", str(corpus), "--exp",
                          str(tmp_path / "exp"), *TINY, "--max-steps", "2", "--loader-workers", "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "exp" / "final" / "final.pt").is_file() and "wrote" in run.stderr


def weights(exp: Path, name: str = "checkpoint.pt") -> dict:
    return torch.load(exp / name, map_location="cpu", weights_only=False)["model"]


def test_resumed_run_equals_uninterrupted_run(corpus: Path, tmp_path: Path) -> None:
    whole = train(corpus, tmp_path / "whole", "--max-steps", "6", "--curriculum-steps", "2")
    assert whole.returncode == 0, whole.stderr
    first = train(corpus, tmp_path / "parts", "--max-steps", "3", "--curriculum-steps", "2")
    assert first.returncode == 0, first.stderr
    rest = train(corpus, tmp_path / "parts", "--max-steps", "6", "--curriculum-steps", "2")
    assert rest.returncode == 0, rest.stderr
    assert "resumed at step 3" in rest.stderr
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "parts")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    log = (tmp_path / "parts" / "train_log.tsv").read_text().splitlines()
    assert [row.split("\t")[0] for row in log[1:]] == [str(s) for s in range(1, 7)]


def test_batches_made_by_worker_processes_train_the_same_weights(corpus: Path, tmp_path: Path) -> None:
    """--loader-workers (a GPU leg's batch making) changes where a batch is made, not what it holds: augmented
    batches (speed, band limit, leading silence, SpecAugment) from two processes train exactly the weights of
    the one-thread run, and the run resumes from its checkpoint as before."""
    augmented = ["--max-steps", "4", "--band-limit-share", "0.5", "--lead-silence-share", "0.5"]
    thread = train(corpus, tmp_path / "thread", *augmented)
    assert thread.returncode == 0, thread.stderr
    processes = train(corpus, tmp_path / "processes", *augmented[:1], "2", *augmented[2:], "--loader-workers", "2")
    assert processes.returncode == 0, processes.stderr
    resumed = train(corpus, tmp_path / "processes", *augmented, "--loader-workers", "2")
    assert resumed.returncode == 0 and "resumed at step 2" in resumed.stderr, resumed.stderr
    a, b = weights(tmp_path / "thread"), weights(tmp_path / "processes")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


def test_ctrl_c_to_the_process_group_stops_a_run_with_workers_at_a_checkpoint(corpus: Path, tmp_path: Path) -> None:
    """Ctrl-C reaches the batch-making workers too; they leave it to the trainer, which finishes its step and saves
    (a worker killed by it would break the pool under the trainer and lose the run since its last save)."""
    exp = tmp_path / "exp"
    run = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "train.py"), "--data", str(corpus), "--exp",
                            str(exp), *TINY, "--save-minutes", "100", "--loader-workers", "2"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (
                (exp / "train_log.tsv").exists() and len((exp / "train_log.tsv").read_text().splitlines()) > 2):
            time.sleep(0.2)
        os.killpg(run.pid, signal.SIGINT)
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 0, stderr
    assert "interrupted at step" in stderr and "Traceback" not in stderr, stderr
    steps = torch.load(exp / "checkpoint.pt", map_location="cpu", weights_only=False)["state"]["step"]
    assert steps >= 2


def test_training_lowers_the_loss_and_writes_a_wenet_model_dir(corpus: Path, tmp_path: Path) -> None:
    from asr_server.asr.nn.checkpoint import load_model_dir

    run = train(corpus, tmp_path / "exp", "--max-steps", "60", "--curriculum-steps", "60", "--lr", "5e-3", "--dropout", "0")
    assert run.returncode == 0, run.stderr
    rows = [row.split("\t") for row in (tmp_path / "exp" / "train_log.tsv").read_text().splitlines()[1:]]
    losses = [float(r[2]) for r in rows]
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5])
    loaded = load_model_dir(tmp_path / "exp" / "final")
    assert loaded.model.encoder_cfg.output_size == 32
    assert (tmp_path / "exp" / "final" / "units.txt").exists()


def test_average_checkpoints_writes_the_mean_of_the_weights(corpus: Path, tmp_path: Path) -> None:
    from asr_server.asr.nn.checkpoint import load_model_dir

    exp = tmp_path / "exp"
    snapshots = []
    for steps in (2, 3, 4):
        run = train(corpus, exp, "--max-steps", str(steps))
        assert run.returncode == 0, run.stderr
        snapshots.append(tmp_path / f"step{steps}.pt")
        snapshots[-1].write_bytes((exp / "checkpoint.pt").read_bytes())
    run = run_main("average_checkpoints", ["--model-dir", str(exp / "final"), *map(str, snapshots)])
    assert run.returncode == 0, run.stderr
    averaged = load_model_dir(exp / "final").model.state_dict()
    parts = [weights(path.parent, path.name) for path in snapshots]
    name = "encoder.encoders.0.feed_forward.w_1.weight"
    assert not torch.equal(parts[0][name], parts[2][name])  # the snapshots differ, so the mean says something
    torch.testing.assert_close(averaged[name], (parts[0][name] + parts[1][name] + parts[2][name]) / 3)


def test_a_data_dir_without_utterances_stops_before_training(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wav.scp").write_text("")
    (tmp_path / "data" / "text").write_text("u1 hello\n")  # no wav for it: nothing to train on
    run = train(tmp_path / "data", tmp_path / "exp", "--max-steps", "2")
    assert run.returncode == 1 and "no utterance has both" in run.stderr
    assert not (tmp_path / "exp" / "checkpoint.pt").exists()


def test_keep_snapshots_leaves_the_weights_of_the_last_saves(corpus: Path, tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    run = train(corpus, exp, "--max-steps", "4", "--keep-snapshots", "2", "--step-offset", "100")
    assert run.returncode == 0, run.stderr
    kept = sorted(path.name for path in (exp / "snapshots").iterdir())
    assert kept == ["step_0000103.pt", "step_0000104.pt"]  # one save per step here, the older two removed
    last = torch.load(exp / "snapshots" / "step_0000104.pt", map_location="cpu", weights_only=True)
    ours = weights(exp)
    assert last.keys() == ours.keys()
    for name in ours:
        torch.testing.assert_close(last[name], ours[name], rtol=0, atol=0, msg=name)


def test_finalize_describes_the_run_not_the_command_line(corpus: Path, tmp_path: Path) -> None:
    import yaml

    run = train(corpus, tmp_path / "exp", "--max-steps", "1", "--ctc-weight", "0.6")
    assert run.returncode == 0, run.stderr
    final = train(corpus, tmp_path / "exp", "--finalize", "--final-dir", str(tmp_path / "dir"))  # default 0.3
    assert final.returncode == 0, final.stderr
    config = yaml.safe_load((tmp_path / "dir" / "train.yaml").read_text())
    assert config["model_conf"]["ctc_weight"] == 0.6


def test_emission_slack_trains_with_the_restricted_ctc_loss(corpus: Path, tmp_path: Path) -> None:
    """Same seed, same first batch: forbidding early emissions can only remove alignments, so the first step's
    CTC loss is higher than plain CTC's, and the restricted run still trains."""
    def ctc_losses(exp: Path) -> list[float]:
        rows = (exp / "train_log.tsv").read_text().splitlines()[1:]
        return [float(row.split("\t")[3]) for row in rows]

    plain = train(corpus, tmp_path / "plain", "--max-steps", "1", "--dropout", "0")
    assert plain.returncode == 0, plain.stderr
    held = train(corpus, tmp_path / "held", "--max-steps", "30", "--lr", "5e-3", "--dropout", "0",
                 "--emission-slack", "0")
    assert held.returncode == 0, held.stderr
    restricted = ctc_losses(tmp_path / "held")
    assert restricted[0] > ctc_losses(tmp_path / "plain")[0] + 1e-3
    assert np.isfinite(restricted).all() and np.mean(restricted[-5:]) < np.mean(restricted[:5])


def test_a_relay_leg_starts_from_a_model_dir_and_continues_its_schedule(corpus: Path, tmp_path: Path) -> None:
    first = train(corpus, tmp_path / "leg1", "--max-steps", "3")
    assert first.returncode == 0, first.stderr
    model_dir = tmp_path / "leg1" / "final"
    leg = train(corpus, tmp_path / "leg2", "--max-steps", "2", "--init-from", str(model_dir), "--step-offset", "3",
                "--rewarm-steps", "4", "--lr", "1e-3", "--band-limit-share", "0.5", "--lead-silence-share", "0.5",
                "--augment-after", "0")
    assert leg.returncode == 0, leg.stderr
    assert "started from" in leg.stderr
    # the units and CMVN are the model dir's, not retrained
    for name in ("bpe.model", "global_cmvn"):
        assert (tmp_path / "leg2" / name).read_bytes() == (model_dir / name).read_bytes()
    rows = [r.split("\t") for r in (tmp_path / "leg2" / "train_log.tsv").read_text().splitlines()[1:]]
    assert [r[0] for r in rows] == ["4", "5"]  # global steps
    from asr_server.asr.training.schedule import lr_at
    assert [float(r[5]) for r in rows] == pytest.approx([lr_at(4, 1e-3, 2) * 1 / 4, lr_at(5, 1e-3, 2) * 2 / 4],
                                                        abs=1e-6)
    # a zero-step leg from the model dir holds its weights (fp16 in final.pt, cast back)
    same = train(corpus, tmp_path / "leg0", "--max-steps", "0", "--init-from", str(model_dir))
    assert same.returncode == 0, same.stderr
    start = torch.load(model_dir / "final.pt", map_location="cpu", weights_only=True)
    for name, value in weights(tmp_path / "leg0").items():
        if name in start:
            torch.testing.assert_close(value, start[name].float(), msg=name)


def test_frozen_convs_keep_their_weights_while_the_rest_learns(corpus: Path, tmp_path: Path) -> None:
    first = train(corpus, tmp_path / "start", "--max-steps", "1")
    assert first.returncode == 0, first.stderr
    run = train(corpus, tmp_path / "exp", "--max-steps", "4", "--frozen-convs", "1",
                "--init-from", str(tmp_path / "start" / "final"))
    assert run.returncode == 0, run.stderr
    before = torch.load(tmp_path / "start" / "final" / "final.pt", map_location="cpu", weights_only=True)
    after = weights(tmp_path / "exp")
    for name in ("encoder.embed.conv.0.weight", "encoder.embed.conv.0.bias"):
        torch.testing.assert_close(after[name], before[name], rtol=0, atol=0, msg=name)
    assert not torch.equal(after["encoder.embed.conv.2.weight"], before["encoder.embed.conv.2.weight"])
    resumed = train(corpus, tmp_path / "exp", "--max-steps", "6", "--frozen-convs", "1")
    assert resumed.returncode == 0 and "resumed at step 4" in resumed.stderr, resumed.stderr


def test_freezing_more_convs_than_the_subsampling_has_is_refused(corpus: Path, tmp_path: Path) -> None:
    run = train(corpus, tmp_path / "exp", "--max-steps", "1", "--frozen-convs", "3")
    assert run.returncode != 0 and "has 2 convolutions" in run.stderr
