"""attnc.nn.decode (greedy and beam search in C, with KV caches) against the
pure-Python reference decoder that re-runs the model's full forward at every
step, and beam search against exhaustive search on tiny problems."""

import itertools
import math

import numpy as np
import pytest

import attnc
from attnc.models import GPT, Seq2SeqTransformer
from reference import decoding


def _peaky(model, seed, scale=0.4):
    """Perturb an initialised model so its distributions are far from uniform."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({k: v + rng.normal(0, scale, v.shape) for k, v in model.state_dict().items()})
    return model.eval()


def _seq2seq(dtype, norm_first=False, vocab=7):
    return _peaky(
        Seq2SeqTransformer(
            vocab,
            vocab,
            d_model=16,
            nhead=4,
            num_encoder_layers=2,
            num_decoder_layers=2,
            dim_feedforward=24,
            max_len=16,
            norm_first=norm_first,
            dtype=dtype,
            seed=3,
        ),
        1,
    )


def _gpt(dtype, vocab=5, block=11):
    return _peaky(GPT(vocab, block, n_layer=2, n_head=2, n_embd=12, dtype=dtype, seed=4), 2)


def _memory(model, src, kpm):
    """The encoder's output, as Seq2SeqTransformer computes it."""
    d = model.d_model
    x = model.src_embed(src) * model.dtype.type(math.sqrt(d)) + model._positions(src.shape[1])
    return model.transformer.encoder(x, src_key_padding_mask=kpm)


def _c_seq2seq(model, src, kpm, T, **kw):
    tr = model.transformer
    return attnc.nn.decode(
        tr.decoder.layers,
        model.tgt_embed.weight,
        model._positions(model.max_len),
        model.generator.weight,
        np.zeros((src.shape[0], 1), np.int64),
        T,
        out_bias=model.generator.bias,
        embed_scale=math.sqrt(model.d_model),
        norm=tr.decoder.norm,
        memory=_memory(model, src, kpm),
        memory_key_padding_mask=kpm,
        **kw,
    )


def _ref_seq2seq(model, src, kpm, T, eos=None, beam_size=1, length_penalty=0.0):
    def next_logprobs(prefixes, rows):
        tgt = np.concatenate([np.zeros((len(rows), 1), np.int64), prefixes], axis=1)
        kp = None if kpm is None else kpm[rows]
        return decoding.log_softmax(model(src[rows], tgt, src_key_padding_mask=kp)[:, -1])

    return decoding.reference_decode(next_logprobs, src.shape[0], T, eos, beam_size, length_penalty)


def _c_gpt(model, idx, T, **kw):
    return attnc.nn.decode(
        list(model.encoder.layers),
        model.wte.weight,
        model.wpe.weight,
        model.lm_head.weight,
        idx,
        T,
        norm=model.ln_f,
        **kw,
    )


def _ref_gpt(model, idx, T, eos=None, beam_size=1, length_penalty=0.0):
    def next_logprobs(prefixes, rows):
        return decoding.log_softmax(model(np.concatenate([idx[rows], prefixes], axis=1))[:, -1])

    return decoding.reference_decode(next_logprobs, idx.shape[0], T, eos, beam_size, length_penalty)


SEARCHES = [  # beam_size, eos, length_penalty, max_new_tokens
    (1, None, 0.0, 9),
    (1, 2, 0.0, 9),
    (3, 2, 0.6, 9),
    (4, None, 0.0, 5),
    (5, 1, -0.5, 6),
    (7, 2, 1.0, 3),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("search", SEARCHES)
def test_seq2seq_decoding_matches_reference(dtype, norm_first, search):
    beam, eos, alpha, T = search
    model = _seq2seq(dtype, norm_first)
    rng = np.random.default_rng(5)
    src = rng.integers(0, 7, (3, 6))
    kpm = np.zeros((3, 6), bool)
    kpm[1, -2:] = True
    kw = dict(eos=eos, beam_size=beam, length_penalty=alpha)
    c = _c_seq2seq(model, src, kpm, T, **kw)
    r = _ref_seq2seq(model, src, kpm, T, **kw)
    assert c.dtype == np.int64
    np.testing.assert_array_equal(c, r)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("search", SEARCHES[:-1])
def test_gpt_decoding_matches_reference(dtype, search):
    beam, eos, alpha, T = search
    T = min(T, 6)
    model = _gpt(dtype)
    idx = np.random.default_rng(6).integers(0, 5, (4, 6))
    kw = dict(eos=eos, beam_size=beam, length_penalty=alpha)
    np.testing.assert_array_equal(_c_gpt(model, idx, T, **kw), _ref_gpt(model, idx, T, **kw))


@pytest.mark.parametrize("rows, prompt, beam", [(12, 3, 3), (1, 40, 1), (2, 20, 2)])
def test_decoding_paths_for_many_rows_and_long_prompts(rows, prompt, beam):
    """A step of at most 32 rows runs its linear layers on weights packed once
    per call, more rows (a wide beam, a long prompt's first step) through
    BLAS: both agree with the reference decoder."""
    model = _gpt(np.float64, block=prompt + 5)
    idx = np.random.default_rng(rows + prompt).integers(0, 5, (rows, prompt))
    kw = dict(eos=None, beam_size=beam, length_penalty=0.0)
    np.testing.assert_array_equal(_c_gpt(model, idx, 5, **kw), _ref_gpt(model, idx, 5, **kw))


def _exhaustive(model, idx, T, eos, alpha):
    """Best sequence of every row over all sequences of up to T tokens (ending
    at the first eos, or at T), by sum(log p) / length ** alpha."""
    V = model.vocab_size
    best = []
    for row in idx:
        top = (-math.inf, None)
        for length in range(1, T + 1):
            for seq in itertools.product(range(V), repeat=length):
                if eos is not None and (eos in seq[:-1] or (length < T and seq[-1] != eos)):
                    continue
                if eos is None and length < T:
                    continue
                ctx = np.array([list(row) + list(seq)], np.int64)
                lp = decoding.log_softmax(model(ctx[:, :-1])[0, len(row) - 1 :])
                score = sum(lp[i, t] for i, t in enumerate(seq)) / length**alpha
                if score > top[0]:
                    top = (score, seq)
        best.append(top[1])
    return best


@pytest.mark.parametrize(
    "T, beam, eos, alpha", [(2, 3, None, 0.0), (2, 3, 1, 0.8), (2, 3, 0, -0.4), (3, 9, None, 0.0), (3, 9, 2, 1.0)]
)
def test_beam_search_is_exhaustive_when_the_beam_holds_every_prefix(T, beam, eos, alpha):
    """beam = V is exhaustive for 2 tokens, beam = V^2 for 3."""
    model = _gpt(np.float64, vocab=3, block=8)
    idx = np.random.default_rng(7).integers(0, 3, (3, 4))
    got = _c_gpt(model, idx, T, eos=eos, beam_size=beam, length_penalty=alpha)
    for row, want in zip(got, _exhaustive(model, idx, T, eos, alpha)):
        n = len(want)
        assert tuple(row[:n]) == want
        assert all(t == (eos if eos is not None else 0) for t in row[n:])


def test_greedy_is_the_argmax_of_the_full_forward():
    model = _gpt(np.float64)
    idx = np.random.default_rng(8).integers(0, 5, (2, 3))
    out = _c_gpt(model, idx, 5)
    ctx = idx
    for t in range(5):
        nxt = model(ctx)[:, -1].argmax(axis=-1)
        np.testing.assert_array_equal(out[:, t], nxt)
        ctx = np.concatenate([ctx, nxt[:, None]], axis=1)


def test_decoding_does_not_depend_on_threads(restore_threads):
    model = _seq2seq(np.float32)
    src = np.random.default_rng(9).integers(0, 7, (4, 6))
    runs = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        runs.append(_c_seq2seq(model, src, None, 8, eos=2, beam_size=3, length_penalty=0.6))
    for r in runs[1:]:
        np.testing.assert_array_equal(r, runs[0])


def test_zero_new_tokens_and_empty_batch():
    model = _gpt(np.float64)
    assert _c_gpt(model, np.zeros((2, 3), np.int64), 0).shape == (2, 0)
    assert _c_gpt(model, np.zeros((0, 3), np.int64), 4).shape == (0, 0)


def test_bad_arguments_raise_clear_errors():
    model = _gpt(np.float64)
    idx = np.zeros((2, 6), np.int64)
    with pytest.raises(ValueError, match="positions"):
        _c_gpt(model, idx, 7)  # 6 + 7 - 1 > block_size 11
    with pytest.raises(TypeError, match="prompt"):
        _c_gpt(model, idx.astype(np.float64), 2)
    with pytest.raises(ValueError, match="prompt holds token 9"):
        _c_gpt(model, idx + 9, 2)
    with pytest.raises(ValueError, match="beam_size"):
        _c_gpt(model, idx, 2, beam_size=0)
    with pytest.raises(ValueError, match="eos"):
        _c_gpt(model, idx, 2, eos=5)
    with pytest.raises(ValueError, match="length_penalty must be finite, got inf"):
        _c_gpt(model, idx, 2, beam_size=2, length_penalty=math.inf)
    with pytest.raises(ValueError, match="memory"):
        _c_gpt(model, idx, 2, memory=np.zeros((2, 3, 12)))
    with pytest.raises(TypeError, match="embedding"):
        attnc.nn.decode(
            list(model.encoder.layers),
            model.wte.weight.astype(np.float32),
            model.wpe.weight,
            model.lm_head.weight,
            idx,
            2,
        )
    s2s = _seq2seq(np.float64)
    with pytest.raises(TypeError, match="memory is required"):
        attnc.nn.decode(
            s2s.transformer.decoder.layers,
            s2s.tgt_embed.weight,
            s2s._positions(s2s.max_len),
            s2s.generator.weight,
            np.zeros((1, 1), np.int64),
            3,
        )
    with pytest.raises(TypeError, match="all be"):
        attnc.nn.decode(
            [s2s.transformer.decoder.layers[0], s2s.transformer.encoder.layers[0]],
            s2s.tgt_embed.weight,
            s2s._positions(s2s.max_len),
            s2s.generator.weight,
            np.zeros((1, 1), np.int64),
            3,
        )


def test_inputs_never_modified(assert_unchanged):
    model = _seq2seq(np.float64)
    src = np.random.default_rng(10).integers(0, 7, (2, 5))
    kpm = np.zeros((2, 5), bool)
    mem = _memory(model, src, kpm)
    prompt = np.zeros((2, 1), np.int64)
    tr = model.transformer
    params = {k: v.copy() for k, v in model.state_dict().items()}
    assert_unchanged(
        attnc.nn.decode,
        tr.decoder.layers,
        model.tgt_embed.weight,
        model._positions(model.max_len),
        model.generator.weight,
        prompt,
        4,
        out_bias=model.generator.bias,
        norm=tr.decoder.norm,
        memory=mem,
        memory_key_padding_mask=kpm,
        beam_size=2,
        eos=1,
    )
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v, params[k])
