"""The `scripts/train.py` arguments that a relay's state (`models/open_en_wip/relay.json`) fixes.

A CPU leg (`scripts/relay_leg.py`) and a GPU leg (`scripts/relay_gpu.py`) must continue the same network
with the same schedule; they differ only in data, batch, seed, device and where the weights come from. Both
take these arguments from here, so a schedule key added to relay.json reaches every kind of leg.
"""

from __future__ import annotations


def relay_train_args(state: dict) -> list[str]:
    """Network, loss weights, schedule and step offset of the relay's state, as train.py options."""
    net, sch = state["network"], state["schedule"]
    args = [
        "--bpe-size", net["bpe_size"], "--d-model", net["d_model"], "--heads", net["heads"], "--ffn", net["ffn"],
        "--blocks", net["blocks"], "--dec-blocks", net["dec_blocks"], "--kernel", net["kernel"],
        "--ctc-weight", net["ctc_weight"], "--reverse-weight", net["reverse_weight"], "--dropout", net["dropout"],
        "--lr", sch["lr"], "--warmup", sch["warmup"], "--curriculum-steps", sch["curriculum_steps"],
        "--full-context-share", sch["full_context_share"], "--chunk-range", *sch["chunk_range"],
        "--emission-slack", sch["emission_slack"], "--band-limit-share", sch["band_limit_share"],
        "--lead-silence-share", sch["lead_silence_share"], "--rewarm-steps", sch["rewarm_steps"],
        "--step-offset", state["step"],
    ]
    # keys that older states lack: absent means train.py's default (nothing frozen)
    if sch.get("frozen_convs", 0):
        args += ["--frozen-convs", sch["frozen_convs"]]
    return [str(a) for a in args]
