import pytest

torch = pytest.importorskip("torch", reason="needs torch")

from asr_server.asr.nn.model import IGNORE_ID, add_sos_eos, reverse_padded  # noqa: E402
from asr_server.asr.nn.masks import subsequent_chunk_mask  # noqa: E402

from .conftest import CHUNK, LEFT_CHUNKS, VOCAB, tiny_model  # noqa: E402

CACHE = CHUNK * LEFT_CHUNKS


def stream(model, feats: torch.Tensor, chunk: int = CHUNK, cache: int = CACHE):
    """Chunk-by-chunk encoder output and CTC log-probs for one utterance (1, T, 80)."""
    geometry = model.encoder.window_config(chunk)
    window, stride = geometry.window, geometry.stride
    state = model.init_stream_state(1, cache)
    outs, lps = [], []
    start = 0
    while start + model.encoder.right_context + 1 <= feats.size(1):
        seg = feats[:, start:start + window]
        n = seg.size(1)
        seg = torch.nn.functional.pad(seg, (0, 0, 0, window - n))
        lp, out, out_lens, *new = model.forward_chunk(seg, torch.tensor([n]), **state)
        state = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
        outs.append(out[:, :int(out_lens)])
        lps.append(lp[:, :int(out_lens)])
        start += stride
    return torch.cat(outs, 1), torch.cat(lps, 1), state


def test_chunk_mask_shape():
    m = subsequent_chunk_mask(6, 2, 1)
    assert m.int().tolist() == [[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0],
                                [1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]]


@pytest.mark.parametrize("frames", [67, 150, 203])
def test_streaming_equals_full_context_with_chunk_mask(frames):
    model = tiny_model(seed=frames)
    torch.manual_seed(frames)
    x = torch.randn(1, frames, 80)
    with torch.no_grad():
        full, full_lens = model.encode(x, torch.tensor([frames]), CHUNK, LEFT_CHUNKS)
        full_lp = model.ctc_log_probs(full)
        got, got_lp, state = stream(model, x)
    assert got.shape == full.shape
    assert torch.allclose(got, full, atol=1e-4), float((got - full).abs().max())
    assert torch.allclose(got_lp, full_lp, atol=1e-4)
    assert int(full_lens) == full.size(1)
    # the unbounded-context encoder is different: the test is not trivially true
    with torch.no_grad():
        unlimited, _ = model.encode(x, torch.tensor([frames]), -1)
    if frames > model.encoder.window_config(CHUNK).window:
        assert not torch.allclose(unlimited, full, atol=1e-3)


def test_batched_forward_chunk_with_different_offsets_equals_one_at_a_time():
    """Streams that started at different times share one batch through cache_mask and per-stream offsets."""
    model = tiny_model(seed=3)
    torch.manual_seed(3)
    window = model.encoder.window_config(CHUNK).window
    stride = CHUNK * 4
    starts = [0, 1, 3, 5]          # stream i has already done starts[i] chunks when the batch is formed
    steps = 3
    utts = [torch.randn(1, (s + steps) * stride + window, 80) for s in starts]

    def windows(x, k):
        return x[:, k * stride:k * stride + window]

    # one at a time: run each stream alone, remember its state before the shared steps and its outputs after
    solo_states, solo_outs = [], []
    with torch.no_grad():
        for x, s in zip(utts, starts):
            st = model.init_stream_state(1, CACHE)
            outs = []
            for k in range(s + steps):
                if k == s:
                    solo_states.append({n: v.clone() for n, v in st.items()})
                lp, out, _, *new = model.forward_chunk(windows(x, k), torch.tensor([window]), **st)
                st = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
                if k >= s:
                    outs.append((lp, out))
            solo_outs.append(outs)
        # batched: gather the per-stream states and run the shared steps together
        st = {n: torch.cat([s[n] for s in solo_states]) for n in solo_states[0]}
        assert st["offset"].reshape(-1).tolist() == [s * CHUNK for s in starts]
        assert st["cache_mask"].sum(-1).reshape(-1).tolist() == [min(s * CHUNK, CACHE) for s in starts]
        for j in range(steps):
            xs = torch.cat([windows(x, s + j) for x, s in zip(utts, starts)])
            lp, out, out_lens, *new = model.forward_chunk(xs, torch.full((len(starts),), window), **st)
            st = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
            assert out_lens.tolist() == [CHUNK] * len(starts)
            for i in range(len(starts)):
                ref_lp, ref_out = solo_outs[i][j]
                assert torch.allclose(out[i:i + 1], ref_out, atol=1e-5)
                assert torch.allclose(lp[i:i + 1], ref_lp, atol=1e-5)


def test_forward_chunk_shapes(model):
    b = 3
    st = model.init_stream_state(b, CACHE)
    assert st["att_cache"].shape == (b, 2, 4, CACHE, 16)
    assert st["cnn_cache"].shape == (b, 2, 32, 4)
    assert st["cache_mask"].shape == (b, 1, CACHE)
    xs = torch.randn(b, model.encoder.window_config(CHUNK).window, 80)
    with torch.no_grad():
        lp, out, out_lens, off, att, cnn, mask = model.forward_chunk(xs, torch.tensor([19, 19, 11]), **st)
    assert lp.shape == (b, CHUNK, VOCAB) and out.shape == (b, CHUNK, 32)
    assert out_lens.tolist() == [4, 4, 2]
    assert off.reshape(-1).tolist() == [CHUNK] * b
    assert att.shape == st["att_cache"].shape and cnn.shape == st["cnn_cache"].shape
    assert mask[:, 0, -CHUNK:].tolist() == [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]
    assert torch.allclose(lp.exp().sum(-1), torch.ones(b, CHUNK), atol=1e-5)


def test_sos_eos_and_reverse():
    ys = torch.tensor([[3, 4, 5], [6, 7, IGNORE_ID]])
    lens = torch.tensor([3, 2])
    ys_in, ys_out = add_sos_eos(ys, lens, sos=9, eos=9)
    assert ys_in.tolist() == [[9, 3, 4, 5], [9, 6, 7, 9]]
    assert ys_out.tolist() == [[3, 4, 5, 9], [6, 7, 9, IGNORE_ID]]
    assert reverse_padded(ys, lens).tolist() == [[5, 4, 3], [7, 6, IGNORE_ID]]


def test_training_loss_and_gradients():
    model = tiny_model(seed=1).train()
    torch.manual_seed(1)
    x = torch.randn(2, 120, 80)
    out = model(x, torch.tensor([120, 90]), torch.tensor([[3, 4, 5], [6, 7, IGNORE_ID]]), torch.tensor([3, 2]))
    assert set(out) == {"loss", "loss_ctc", "loss_att"}
    expected = 0.3 * out["loss_ctc"] + 0.7 * out["loss_att"]
    assert torch.allclose(out["loss"].detach(), expected)
    out["loss"].backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["decoder.right_decoder.output_layer.weight"].abs().sum() > 0
    assert grads["encoder.encoders.0.self_attn.pos_bias_u"].abs().sum() > 0
    assert grads["ctc.ctc_lo.weight"].abs().sum() > 0


def test_score_hyps_matches_decoder_log_probs(model):
    """score_hyps sums log p(token) over the hypothesis and eos, for both directions."""
    torch.manual_seed(5)
    enc = torch.randn(1, 10, 32)
    hyp = [3, 7, 4]
    sos = eos = VOCAB - 1
    hyps = torch.tensor([[[sos, *hyp, eos], [sos, 5, eos, eos, eos]]])
    r_hyps = torch.tensor([[[sos, *hyp[::-1], eos], [sos, 5, eos, eos, eos]]])
    lens = torch.tensor([[4, 2]])
    with torch.no_grad():
        left, right = model.score_hyps_both(enc, torch.tensor([10]), hyps, lens, r_hyps)
        mask = torch.ones(1, 1, 10, dtype=torch.bool)
        lp = torch.log_softmax(model.decoder.left_decoder(enc, mask, torch.tensor([[sos, *hyp]]),
                                                          torch.tensor([4])), -1)
        manual = sum(float(lp[0, i, t]) for i, t in enumerate(hyp + [eos]))
        rp = torch.log_softmax(model.decoder.right_decoder(enc, mask, torch.tensor([[sos, *hyp[::-1]]]),
                                                           torch.tensor([4])), -1)
        r_manual = sum(float(rp[0, i, t]) for i, t in enumerate(hyp[::-1] + [eos]))
        both = model.score_hyps(enc, torch.tensor([10]), hyps, lens, r_hyps)
    assert float(left[0, 0]) == pytest.approx(manual, abs=1e-4)
    assert float(right[0, 0]) == pytest.approx(r_manual, abs=1e-4)
    assert float(both[0, 0]) == pytest.approx(0.7 * manual + 0.3 * r_manual, abs=1e-4)


def test_score_hyps_of_several_utterances_match_one_at_a_time_and_project_the_memory_once(model):
    """Hypotheses are grouped by utterance for the source attention: the scores equal those of each utterance
    scored alone, and the encoder output's keys are projected per utterance (B rows), not per hypothesis."""
    torch.manual_seed(6)
    sos = eos = VOCAB - 1
    enc = torch.randn(2, 12, 32)
    enc_lens = torch.tensor([12, 7])
    hyps = torch.tensor([[[sos, 3, 7, eos], [sos, 5, eos, eos], [sos, 4, 4, eos]],
                         [[sos, 6, eos, eos], [sos, 2, 8, eos], [sos, 9, eos, eos]]])
    lens = torch.tensor([[3, 2, 3], [2, 3, 2]])
    r_hyps = torch.tensor([[[sos, 7, 3, eos], [sos, 5, eos, eos], [sos, 4, 4, eos]],
                           [[sos, 6, eos, eos], [sos, 8, 2, eos], [sos, 9, eos, eos]]])
    seen = []
    hook = model.decoder.left_decoder.decoders[0].src_attn.linear_k.register_forward_hook(
        lambda module, args, out: seen.append(args[0].shape[0]))
    try:
        with torch.no_grad():
            left, right = model.score_hyps_both(enc, enc_lens, hyps, lens, r_hyps)
    finally:
        hook.remove()
    assert seen == [2]
    with torch.no_grad():
        for b in range(2):
            one_left, one_right = model.score_hyps_both(enc[b:b + 1, :int(enc_lens[b])], enc_lens[b:b + 1],
                                                        hyps[b:b + 1], lens[b:b + 1], r_hyps[b:b + 1])
            assert torch.allclose(left[b], one_left[0], atol=1e-5)
            assert torch.allclose(right[b], one_right[0], atol=1e-5)


def _short_table(model, rows: int):
    """The same model with only `rows` rows of positional table (as if max_len were `rows`)."""
    import copy

    short = copy.deepcopy(model)
    pos_enc = short.encoder.embed.pos_enc
    pos_enc.pe = pos_enc.pe[:rows].clone()
    return short


def test_streams_run_past_the_positional_table_and_match_before_it(model):
    """A stream longer than max_len used to fail its Gather (~200 s with 5000 rows). The offset is
    clamped instead; chunks before the clamp point are unchanged."""
    rows = 40  # clamp point: start offset - CACHE > rows - (CACHE + CHUNK), i.e. after 10 chunks
    torch.manual_seed(3)
    feats = torch.randn(1, 30 * CHUNK * 4 + 7, 80)  # 30 chunks: 3x the table
    with torch.no_grad():
        ref_out, _, _ = stream(model, feats)
        out, lps, state = stream(_short_table(model, rows), feats)
    assert int(state["offset"].reshape(-1)[0]) >= 30 * CHUNK > rows  # the real offset keeps counting
    unclamped = 10 * CHUNK
    assert torch.allclose(out[:, :unclamped], ref_out[:, :unclamped], atol=1e-6)
    assert out.shape == ref_out.shape and torch.isfinite(out).all() and torch.isfinite(lps).all()
    # past the clamp point the window's geometry is that of the clamp point: close to the reference, not equal
    assert not torch.allclose(out[:, unclamped + CHUNK:], ref_out[:, unclamped + CHUNK:], atol=1e-6)
