"""attnc.models: Seq2SeqTransformer and GPT. Forward shapes, the same
computation as the same model built from torch modules, gradients against
central finite differences (float64), state dicts and save/load, dropout
streams, and the reference decoder (greedy step by step; beam search against
exhaustive search over every sequence)."""

import itertools
import math

import numpy as np
import pytest

import attnc
from attnc.models import GPT, Seq2SeqTransformer
from reference import decoding

V = 6  # tiny vocabulary: tokens 0..3, BOS = 4, EOS = 5
BOS, EOS = 4, 5


def tiny_seq2seq(dtype=np.float64, dropout=0.0, seed=0, **kw):
    args = dict(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=12, max_len=16)
    args.update(kw)
    return Seq2SeqTransformer(V, V, dropout=dropout, dtype=dtype, seed=seed, **args)


def tiny_gpt(dtype=np.float64, dropout=0.0, seed=0, **kw):
    args = dict(n_layer=2, n_head=2, n_embd=8)
    args.update(kw)
    return GPT(4, 7, dropout=dropout, dtype=dtype, seed=seed, **args)


def seq2seq_batch(rng, B=3, S=5, T=4):
    src = rng.integers(0, 4, (B, S))
    src_lengths = np.array([S, S - 2, 3][:B])
    src_kpm = np.arange(S)[None, :] >= src_lengths[:, None]
    tgt_in = np.concatenate([np.full((B, 1), BOS), rng.integers(0, 4, (B, T - 1))], axis=1)
    tgt_kpm = np.zeros((B, T), bool)
    tgt_kpm[1, T - 1 :] = True
    tgt_out = rng.integers(0, V, (B, T))
    tgt_out[tgt_kpm] = -100
    return src, tgt_in, tgt_out, src_kpm, tgt_kpm


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_seq2seq_forward_shapes(dtype, rng):
    model = tiny_seq2seq(dtype).eval()
    src, tgt_in, _, src_kpm, tgt_kpm = seq2seq_batch(rng)
    logits = model(src, tgt_in, src_kpm, tgt_kpm)
    assert logits.shape == (3, 4, V) and logits.dtype == dtype and np.isfinite(logits).all()
    logits2, w = model(src, tgt_in, src_kpm, tgt_kpm, need_weights=True)
    np.testing.assert_array_equal(logits, logits2)
    assert [a.shape for a in w["encoder"]] == [(3, 2, 5, 5)]
    assert [a.shape for a in w["decoder_self"]] == [(3, 2, 4, 4)] * 2
    assert [a.shape for a in w["decoder_cross"]] == [(3, 2, 4, 5)] * 2
    # padded source keys get no cross-attention; the decoder is causal
    assert np.all(w["decoder_cross"][0][2, :, :, 3:] == 0)
    assert np.all(np.triu(w["decoder_self"][1][0, 0], 1) == 0)
    np.testing.assert_allclose(w["decoder_cross"][1].sum(-1), 1, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpt_forward_shapes_and_causality(dtype, rng):
    model = tiny_gpt(dtype).eval()
    idx = rng.integers(0, 4, (5, 7))
    logits, w = model(idx, need_weights=True)
    assert logits.shape == (5, 7, 4) and logits.dtype == dtype
    assert [a.shape for a in w] == [(5, 2, 7, 7)] * 2
    # changing a later token leaves earlier logits alone
    idx2 = idx.copy()
    idx2[:, 4] = (idx2[:, 4] + 1) % 4
    logits2 = model(idx2)
    np.testing.assert_array_equal(logits[:, :4], logits2[:, :4])
    assert not np.allclose(logits[:, 4:], logits2[:, 4:])
    # a shorter context is the prefix of a longer one
    np.testing.assert_allclose(model(idx[:, :3]), logits[:, :3], rtol=1e-5, atol=1e-6)


def test_argument_errors():
    model = tiny_seq2seq()
    with pytest.raises(TypeError):
        model(np.zeros((1, 3)), np.zeros((1, 2), np.int64))
    with pytest.raises(ValueError, match="max_len"):
        model(np.zeros((1, 17), np.int64), np.zeros((1, 2), np.int64))
    with pytest.raises(ValueError, match="outside"):
        model(np.full((1, 3), V), np.zeros((1, 2), np.int64))
    gpt = tiny_gpt()
    with pytest.raises(ValueError, match="block_size"):
        gpt(np.zeros((1, 8), np.int64))
    with pytest.raises(ValueError, match="beam_size"):
        gpt.generate(np.zeros((1, 2), np.int64), 3, beam_size=0)
    # the decoding options: checked once, by attnc.nn.decode (and its C call) for every model
    with pytest.raises(ValueError, match=rf"eos 9 is outside the output's vocabulary \[0, {gpt.vocab_size}\)"):
        gpt.generate(np.zeros((1, 2), np.int64), 3, eos=9)
    with pytest.raises(ValueError, match="length_penalty must be finite, got -inf"):
        gpt.generate(np.zeros((1, 2), np.int64), 3, beam_size=2, length_penalty=-math.inf)
    with pytest.raises(ValueError, match=rf"eos 9 is outside the output's vocabulary \[0, {model.tgt_vocab}\)"):
        model.generate(np.zeros((1, 3), np.int64), 3, bos=1, eos=9)


# --------------------------------------------------------------------------- against torch


def _torch_seq2seq(torch, model):
    class Ref(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed = torch.nn.Embedding(V, 8)
            self.tgt_embed = torch.nn.Embedding(V, 8)
            self.transformer = torch.nn.Transformer(8, 2, 1, 2, 12, 0.0, batch_first=True, dtype=torch.float64)
            self.generator = torch.nn.Linear(8, V)

        def forward(self, src, tgt, src_kpm, tgt_kpm):
            pe = torch.from_numpy(attnc.nn.sinusoidal_encoding(16, 8, np.float64))
            xs = self.src_embed(src) * math.sqrt(8) + pe[: src.shape[1]]
            xt = self.tgt_embed(tgt) * math.sqrt(8) + pe[: tgt.shape[1]]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=torch.float64)
            h = self.transformer(
                xs,
                xt,
                tgt_mask=mask,
                src_key_padding_mask=src_kpm,
                tgt_key_padding_mask=tgt_kpm,
                memory_key_padding_mask=src_kpm,
            )
            return self.generator(h)

    ref = Ref().double().eval()
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()})
    return ref


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_seq2seq_matches_torch(rng, torch):
    model = tiny_seq2seq().eval()
    src, tgt_in, _, src_kpm, tgt_kpm = seq2seq_batch(rng)
    ref = _torch_seq2seq(torch, model)
    with torch.no_grad():
        expected = ref(*(torch.from_numpy(a) for a in (src, tgt_in, src_kpm, tgt_kpm))).numpy()
    valid = ~tgt_kpm  # torch's fast path may leave padded query rows as anything
    np.testing.assert_allclose(model(src, tgt_in, src_kpm, tgt_kpm)[valid], expected[valid], rtol=1e-10, atol=1e-10)


def test_gpt_matches_torch(rng, torch):
    model = tiny_gpt().eval()
    layer = torch.nn.TransformerEncoderLayer(
        8, 2, 32, 0.0, activation="gelu", batch_first=True, norm_first=True, dtype=torch.float64
    )
    blocks = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    sd = model.state_dict()
    blocks.load_state_dict(
        {k[len("encoder.") :]: torch.from_numpy(v) for k, v in sd.items() if k.startswith("encoder.")}
    )
    idx = rng.integers(0, 4, (3, 7))
    T = idx.shape[1]
    with torch.no_grad():
        x = torch.from_numpy(sd["wte.weight"][idx] + sd["wpe.weight"][:T])
        mask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
        h = blocks.eval()(x, mask=mask, is_causal=True)
        h = torch.nn.functional.layer_norm(
            h, (8,), torch.from_numpy(sd["ln_f.weight"]), torch.from_numpy(sd["ln_f.bias"])
        )
        expected = (h @ torch.from_numpy(sd["lm_head.weight"]).T).numpy()
    np.testing.assert_allclose(model(idx), expected, rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- gradients


def _fd_check(model, loss_fn, grads, rng, per_tensor=4, eps=1e-6, rtol=1e-6, atol=1e-8):
    """Central differences of loss_fn() for a few random entries of every parameter."""
    assert set(grads) == set(model.state_dict()), set(grads) ^ set(model.state_dict())
    params = dict(model.named_parameters())
    for name, p in params.items():
        g = grads[name]
        assert g.shape == p.shape and g.dtype == p.dtype, name
        flat = p.reshape(-1)  # a view: edits change the model
        picks = rng.choice(flat.size, size=min(per_tensor, flat.size), replace=False)
        for i in picks:
            old = flat[i]
            flat[i] = old + eps
            up = loss_fn()
            flat[i] = old - eps
            down = loss_fn()
            flat[i] = old
            numeric = (up - down) / (2 * eps)
            assert abs(g.reshape(-1)[i] - numeric) <= atol + rtol * max(1.0, abs(numeric)), (
                name,
                i,
                g.reshape(-1)[i],
                numeric,
            )


def test_seq2seq_gradients_match_finite_differences(rng):
    model = tiny_seq2seq().eval()
    src, tgt_in, tgt_out, src_kpm, tgt_kpm = seq2seq_batch(rng)
    # the embedding gradients are sparse: make sure the checked rows are used
    tgt_in[0, 1:] = [0, 1, 2]

    def loss():
        logits = model(src, tgt_in, src_kpm, tgt_kpm)
        return float(attnc.nn.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), label_smoothing=0.1))

    value, grads = model.loss_and_grads(src, tgt_in, tgt_out, src_kpm, tgt_kpm, label_smoothing=0.1)
    assert value == pytest.approx(loss(), rel=1e-12)
    _fd_check(model, loss, grads, rng)


def test_seq2seq_vjp_with_weights_and_cotangent(rng):
    model = tiny_seq2seq().eval()
    src, tgt_in, _, src_kpm, tgt_kpm = seq2seq_batch(rng)
    logits, pullback = attnc.vjp(model, src, tgt_in, src_kpm, tgt_kpm)
    cot = rng.standard_normal(logits.shape)
    grads = pullback(cot)
    (logits_w, _), pullback_w = attnc.vjp(model, src, tgt_in, src_kpm, tgt_kpm, need_weights=True)
    np.testing.assert_array_equal(logits, logits_w)
    grads_w = pullback_w(cot, None)
    for k in grads:
        np.testing.assert_allclose(grads_w[k], grads[k], rtol=1e-12, atol=1e-14, err_msg=k)
    _fd_check(model, lambda: float(np.sum(model(src, tgt_in, src_kpm, tgt_kpm) * cot)), grads, rng, per_tensor=2)


def test_gpt_gradients_match_finite_differences(rng):
    model = tiny_gpt().eval()
    idx = rng.integers(0, 4, (3, 7))
    targets = rng.integers(0, 4, (3, 7))
    targets[:, :2] = -100

    def loss():
        return float(attnc.nn.cross_entropy(model(idx).reshape(-1, 4), targets.reshape(-1)))

    value, grads = model.loss_and_grads(idx, targets)
    assert value == pytest.approx(loss(), rel=1e-12)
    _fd_check(model, loss, grads, rng)


def test_training_mode_gradients_follow_the_dropout_masks(rng):
    """In training mode, a seeded model replays its dropout masks: the gradient of
    one replayed step matches finite differences of the same replayed step."""
    idx = rng.integers(0, 4, (2, 7))
    targets = rng.integers(0, 4, (2, 7))
    model = tiny_gpt(dropout=0.3, seed=3)
    state = model.state_dict()
    a, b = tiny_gpt(dropout=0.3, seed=3), tiny_gpt(dropout=0.3, seed=3)
    assert np.array_equal(a(idx), b(idx))
    assert not np.allclose(a(idx), a.eval()(idx))

    def fresh():
        m = tiny_gpt(dropout=0.3, seed=3)
        m.load_state_dict(state)
        return m

    _, grads = fresh().loss_and_grads(idx, targets)
    probe = fresh()
    params = dict(probe.named_parameters())

    def loss():
        m = fresh()  # the same dropout stream on every call
        m.load_state_dict(dict(params))
        return float(attnc.nn.cross_entropy(m(idx).reshape(-1, 4), targets.reshape(-1)))

    _fd_check(probe, loss, grads, rng, per_tensor=1)


# --------------------------------------------------------------------------- state dicts


def test_state_dict_round_trip_and_save_load(rng, tmp_path):
    model = tiny_seq2seq(np.float32, dropout=0.1, seed=1)
    names = list(model.state_dict())
    assert names[:2] == ["src_embed.weight", "tgt_embed.weight"] and names[-2:] == [
        "generator.weight",
        "generator.bias",
    ]
    assert "transformer.decoder.layers.1.multihead_attn.in_proj_weight" in names
    other = tiny_seq2seq(np.float32, dropout=0.1, seed=2)
    src, tgt_in, _, src_kpm, tgt_kpm = seq2seq_batch(rng)
    assert not np.allclose(other.eval()(src, tgt_in), model.eval()(src, tgt_in))
    other.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(other(src, tgt_in, src_kpm, tgt_kpm), model(src, tgt_in, src_kpm, tgt_kpm))
    attnc.save(tmp_path / "m.npz", model)
    loaded = attnc.load(tmp_path / "m.npz")
    assert type(loaded) is Seq2SeqTransformer and not loaded.training and loaded.dropout == 0.1
    np.testing.assert_array_equal(loaded(src, tgt_in, src_kpm, tgt_kpm), model(src, tgt_in, src_kpm, tgt_kpm))

    gpt = tiny_gpt(np.float32, seed=4)
    assert list(gpt.state_dict())[:2] == ["wte.weight", "wpe.weight"]
    assert list(gpt.state_dict())[-3:] == ["ln_f.weight", "ln_f.bias", "lm_head.weight"]
    attnc.save(tmp_path / "g.npz", gpt)
    idx = rng.integers(0, 4, (2, 7))
    np.testing.assert_array_equal(attnc.load(tmp_path / "g.npz")(idx), gpt.eval()(idx))


def test_gpt_init_as_mingpt():
    gpt = GPT(5, 9, n_layer=4, n_head=2, n_embd=32, seed=0)
    sd = gpt.state_dict()
    assert sd["wte.weight"].std() == pytest.approx(0.02, rel=0.1)
    assert sd["encoder.layers.0.linear2.weight"].std() == pytest.approx(0.02 / math.sqrt(8), rel=0.1)
    assert np.all(sd["encoder.layers.3.linear1.bias"] == 0) and np.all(sd["ln_f.weight"] == 1)
    # the layers are initialised independently
    assert not np.array_equal(sd["encoder.layers.0.linear1.weight"], sd["encoder.layers.1.linear1.weight"])


# --------------------------------------------------------------------------- decoding


def _score_all(next_logprobs, row, sequences):
    """sum log p of each complete sequence, by teacher forcing (one call per position)."""
    totals = np.zeros(len(sequences))
    for t in range(max(len(s) for s in sequences)):
        ids = [i for i, s in enumerate(sequences) if len(s) > t]
        prefixes = np.array([sequences[i][:t] for i in ids], np.int64).reshape(len(ids), t)
        lp = next_logprobs(prefixes, np.full(len(ids), row))
        totals[ids] += lp[np.arange(len(ids)), [sequences[i][t] for i in ids]]
    return totals


def _exhaustive(next_logprobs, batch, T, eos, alpha, vocab):
    """The best of every possible output (ending at the first eos, or T tokens)."""
    others = [t for t in range(vocab) if t != eos]
    seqs = [s + (eos,) for k in range(T) for s in itertools.product(others, repeat=k)] if eos is not None else []
    seqs += list(itertools.product(others if eos is not None else range(vocab), repeat=T))
    best = []
    for r in range(batch):
        sums = _score_all(next_logprobs, r, seqs)
        scores = sums / np.array([len(s) for s in seqs], float) ** alpha
        best.append(seqs[int(np.argmax(scores))])
    return best


def _padded(best, eos):
    L = max(len(s) for s in best)
    return np.array([list(s) + [eos] * (L - len(s)) for s in best])


def _seq2seq_logprobs(model, src, kpm):
    def next_logprobs(prefixes, rows):
        tgt = np.concatenate([np.full((len(rows), 1), BOS), prefixes], axis=1)
        return decoding.log_softmax(model(src[rows], tgt, kpm[rows])[:, -1])

    return next_logprobs


@pytest.mark.parametrize("T,beam,alpha", [(2, V, 0.0), (2, V, 1.0), (3, (V - 1) ** 2, 0.0), (3, (V - 1) ** 2, 0.7)])
def test_seq2seq_beam_search_is_exhaustive_when_the_beam_holds_every_candidate(T, beam, alpha, rng):
    """With max_new_tokens = 2 a beam of the vocabulary's size keeps every live
    candidate (V - 1 of them after the first step), so beam search must find the
    best of all sequences; for 3 tokens a beam of (V - 1)^2 does."""
    model = tiny_seq2seq(seed=5, d_model=16).eval()
    src, _, _, kpm, _ = seq2seq_batch(rng, B=3)
    got = decoding.seq2seq_transformer(
        model, src, T, BOS, eos=EOS, beam_size=beam, length_penalty=alpha, src_key_padding_mask=kpm
    )
    best = _exhaustive(_seq2seq_logprobs(model, src, kpm), 3, T, EOS, alpha, V)
    np.testing.assert_array_equal(got, _padded(best, EOS))
    assert np.array_equal(model.generate(src, T, BOS, EOS, beam, alpha, src_key_padding_mask=kpm), got)


def test_gpt_beam_search_is_exhaustive(rng):
    model = tiny_gpt(seed=2).eval()
    idx = rng.integers(0, 4, (4, 3))

    def next_logprobs(prefixes, rows):
        return decoding.log_softmax(model(np.concatenate([idx[rows], prefixes], axis=1))[:, -1])

    # (eos, max_new_tokens, beam, length_penalty); 4 tokens exercise the early stop's bound
    for eos, T, beam, alpha in (
        (3, 2, 4, 0.5),
        (None, 2, 4, 0.5),
        (3, 3, 9, 0.5),
        (None, 3, 16, 0.5),
        (3, 4, 27, 0.0),
        (3, 4, 27, 1.0),
        (3, 4, 27, 3.0),
        (3, 4, 27, -1.0),
    ):
        got = decoding.gpt(model, idx, T, eos=eos, beam_size=beam, length_penalty=alpha)
        best = _exhaustive(next_logprobs, 4, T, eos, alpha, 4)
        np.testing.assert_array_equal(
            got, _padded(best, eos if eos is not None else 0), err_msg=f"{eos} {T} {beam} {alpha}"
        )


def test_greedy_takes_the_argmax_at_every_step(rng):
    model = tiny_seq2seq(seed=7).eval()
    src, _, _, kpm, _ = seq2seq_batch(rng, B=3)
    out = model.generate(src, 6, BOS, eos=EOS, src_key_padding_mask=kpm)
    next_logprobs = _seq2seq_logprobs(model, src, kpm)
    for r in range(3):
        seq = []
        for _ in range(6):
            tok = int(np.argmax(next_logprobs(np.array([seq], np.int64).reshape(1, -1), np.array([r]))[0]))
            seq.append(tok)
            if tok == EOS:
                break
        assert list(out[r, : len(seq)]) == seq
        assert np.all(out[r, len(seq) :] == EOS)
    assert out.shape[1] <= 6
    # eval mode is used and the mode restored; without an eos every row has max_new_tokens tokens
    model.train()
    assert model.generate(src, 4, BOS, src_key_padding_mask=kpm).shape == (3, 4) and model.training
    # every submodule gets its own mode back: one the user put in eval mode stays there
    model.transformer.encoder.eval()
    model.generate(src, 2, BOS)
    modes = {name: m.training for name, m in _named_modules(model)}
    assert not any(v for k, v in modes.items() if k.startswith("transformer.encoder"))
    assert all(v for k, v in modes.items() if not k.startswith("transformer.encoder"))


def _named_modules(module, prefix=""):
    yield prefix, module
    for name, child in module._modules.items():
        yield from _named_modules(child, f"{prefix}.{name}" if prefix else name)


def test_gpt_reference_decoder_crops_the_context(rng):
    model = tiny_gpt(seed=1).eval()
    idx = rng.integers(0, 4, (2, 6))
    out = decoding.gpt(model, idx, 5)
    assert out.shape == (2, 5)
    seq = idx.copy()
    for t in range(5):
        nxt = model(seq[:, -7:])[:, -1].argmax(-1)
        assert np.array_equal(out[:, t], nxt)
        seq = np.concatenate([seq, nxt[:, None]], axis=1)


def test_gpt_generate_needs_the_context_to_fit(rng):
    """The C decoder keeps every position (no cropping): too long a context is
    a clear error, a fitting one equals the reference."""
    model = tiny_gpt(seed=1).eval()
    idx = rng.integers(0, 4, (2, 6))
    with pytest.raises(ValueError, match="block_size"):
        model.generate(idx, 5)
    np.testing.assert_array_equal(model.generate(idx[:, :3], 5), decoding.gpt(model, idx[:, :3], 5))


def test_reference_decode_rules():
    """The decoding rules on a hand-made distribution: beam search finds a
    sequence greedy misses, and the length penalty moves the choice between
    a short and a long answer."""

    # step 1: token 0 (p .6) or 1 (p .4); after 0: p = (.5, .3, .2); after 1, token 2 = eos is certain
    def next_logprobs(prefixes, rows):
        out = []
        for p in prefixes:
            if len(p) == 0:
                probs = [0.6, 0.4, 1e-12]
            elif p[0] == 1:
                probs = [1e-12, 1e-12, 1.0]
            else:
                probs = [0.5, 0.3, 0.2]
            out.append(np.log(probs))
        return np.array(out)

    greedy = decoding.reference_decode(next_logprobs, 1, 3, eos=2)
    assert greedy.tolist() == [[0, 0, 0]]
    beam = decoding.reference_decode(next_logprobs, 1, 3, eos=2, beam_size=2)
    assert beam.tolist() == [[1, 2]]  # log .4 beats log .6 + log .5 + ...
    # (1, 2) has log p = -0.92 over 2 tokens, (0, 0, 0) -1.90 over 3: scored
    # log p / length ** alpha, alpha = 1 keeps the short one, alpha = 2 takes the long one
    assert decoding.reference_decode(next_logprobs, 1, 3, eos=2, beam_size=2, length_penalty=1.0).tolist() == [[1, 2]]
    longer = decoding.reference_decode(next_logprobs, 1, 3, eos=2, beam_size=2, length_penalty=2.0)
    assert longer.tolist() == [[0, 0, 0]]
    assert decoding.reference_decode(next_logprobs, 1, 0, eos=2, beam_size=2).shape == (1, 0)


def _table_logprobs(table):
    """next_logprobs from a table {prefix: probabilities over 3 tokens}, matched
    by the longest listed prefix (uniform when none is listed)."""

    def next_logprobs(prefixes, rows):
        out = []
        for p in prefixes.tolist():
            key = max((k for k in table if tuple(p[: len(k)]) == k), key=len, default=None)
            out.append(np.log(table[key] if key is not None else [1 / 3] * 3))
        return np.array(out)

    return next_logprobs


@pytest.mark.parametrize("alpha,T,expected", [(2.0, 6, [0] * 6), (-1.0, 8, [0, 0, 2])])
def test_beam_early_stop_is_exact(alpha, T, expected):
    """A row stops only when no live hypothesis can beat its best finished one at
    any length still possible: here (1, eos) is found first and the better
    answer only shows up later (a bound at length L + 1 alone, or at
    max_new_tokens alone, would stop too early)."""
    tiny = 1e-12
    table = {(): [0.2, 0.8, tiny], (1,): [tiny, tiny, 1.0], (0,): [0.9, 0.1, tiny], (0, 0): [1.0, tiny, tiny]}
    if alpha < 0:
        table = {(): [0.75, 0.25, tiny], (1,): [tiny, tiny, 1.0], (0,): [0.9, 0.1, tiny], (0, 0): [tiny, tiny, 1.0]}
    got = decoding.reference_decode(_table_logprobs(table), 1, T, eos=2, beam_size=2, length_penalty=alpha)
    assert got.tolist() == [expected]
