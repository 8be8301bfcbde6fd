"""attnc.models.Seq2Seq (recurrent encoder-decoder with every attention kind) against an
independent PyTorch implementation of the same model (tests/reference/seq2seq_ref.py, loaded
with attnc's state dict): logits, alignments, loss and every gradient in float32 and float64,
scheduled sampling (free-running against the reference's argmax feeding), gradients against
central finite differences, greedy decoding against the reference's step loop (tokens and
alignments), greedy and beam decoding against the pure-Python oracle, beam search against
exhaustive search, thread-count independence, seeding, save / load, argument errors and
inputs never modified. Sizes are tiny: the file takes seconds."""

import itertools

import numpy as np
import pytest

import attnc
import attnc.models
from attnc.models.rnn_seq2seq import _LUONG, KINDS
from helpers import close, same_bits
from reference import decoding
from reference import seq2seq_ref as ref

torch = ref.torch
DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]
REL = {np.float32: 1e-5, np.float64: 1e-12}  # forward vs torch
GREL = {np.float32: 1e-4, np.float64: 1e-9}  # gradients vs torch autograd
VS, VT, E, H, A, S, T = 9, 7, 4, 5, 3, 6, 4
LENGTHS = np.array([6, 2, 4, 1, 5])  # unsorted, with a full row and a length-1 row
# every kind, and the Luong kinds also without input feeding
VARIANTS = [(kind, True) for kind in KINDS] + [(kind, False) for kind in _LUONG]
VARIANT_IDS = [kind if feeding else f"{kind}-no-feeding" for kind, feeding in VARIANTS]


def make(kind, dtype=np.float64, seed=0, **kw):
    kw.setdefault("window", 1.5)
    return attnc.models.Seq2Seq(
        VS, VT, E, H, kind, attention_size=A, max_source_len=S + 2, dtype=dtype, seed=seed, **kw
    )


def data(seed=0, B=5, lengths=LENGTHS):
    rng = np.random.default_rng(seed)
    src = rng.integers(4, VS, (B, S))
    src[np.arange(S)[None, :] >= lengths[:, None]] = 0
    tgt_in = rng.integers(1, VT, (B, T))
    tgt_out = rng.integers(0, VT, (B, T))
    tgt_out[1, T - 2 :] = -100
    return src, lengths.copy(), tgt_in, tgt_out


class Batch:
    def __init__(self, src, src_lengths, tgt_in, tgt_out):
        self.src, self.src_lengths, self.tgt_in, self.tgt_out = src, src_lengths, tgt_in, tgt_out


def oracle(model, dtype):
    tdt = torch.float32 if dtype == np.float32 else torch.float64
    return ref.TorchSeq2Seq(
        model.state_dict(), model.attention_kind, window=model.window, input_feeding=model.input_feeding, dtype=tdt
    )


# --------------------------------------------------------------------------- forward and gradients vs torch


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind,feeding", VARIANTS, ids=VARIANT_IDS)
def test_forward_matches_torch(kind, feeding, dtype):
    m = make(kind, dtype, input_feeding=feeding)
    src, lens, tgt_in, _ = data()
    logits, align = m(src, tgt_in, lens, return_alignments=True)
    tl, ta = oracle(m, dtype)(src, lens, tgt_in, return_alignments=True)
    assert logits.dtype == dtype and align.dtype == dtype
    close(logits, tl.detach().numpy(), REL[dtype], "logits")
    close(align, ta.detach().numpy(), REL[dtype], "alignments")
    assert (align[np.arange(S)[None, None, :] >= lens[:, None, None].repeat(T, 1)] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind,feeding", VARIANTS, ids=VARIANT_IDS)
def test_loss_and_grad_match_torch(kind, feeding, dtype):
    m = make(kind, dtype, input_feeding=feeding)
    batch = Batch(*data(1))
    loss, grads = m.loss_and_grad(batch)
    tloss, tgrads = oracle(m, dtype).loss_and_grad(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out)
    close(loss, tloss, GREL[dtype], "loss")
    assert list(grads) == list(m.state_dict())
    for name, g in grads.items():
        assert g.dtype == dtype and g.shape == m.state_dict()[name].shape, name
        close(g, tgrads[name], GREL[dtype], name)


@pytest.mark.parametrize("kind", ["bahdanau", "luong-general", "local-p", "none"])
def test_vjp_of_logits_matches_torch(kind):
    m = make(kind)
    src, lens, tgt_in, _ = data(2)
    cot = np.random.default_rng(3).standard_normal((5, T, VT))
    logits, pullback = attnc.vjp(m, src, tgt_in, lens)
    grads = pullback(cot)
    t = oracle(m, np.float64)
    (t(src, lens, tgt_in) * torch.from_numpy(cot)).sum().backward()
    for name, p in t.named_parameters():
        close(grads[name], p.grad.numpy(), GREL[np.float64], name)


@pytest.mark.parametrize("kind,feeding", VARIANTS, ids=VARIANT_IDS)
def test_free_running_scheduled_sampling_matches_torch(kind, feeding):
    """sampling=1 feeds every step t >= 1 the previous step's argmax: the reference with an
    all-True sample mask."""
    m = make(kind, input_feeding=feeding)
    batch = Batch(*data(4))
    loss, grads = m.loss_and_grad(batch, sampling=1.0, seed=0)
    mask = np.ones((5, T), bool)
    tloss, tgrads = oracle(m, np.float64).loss_and_grad(
        batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, sample_mask=mask
    )
    close(loss, tloss, GREL[np.float64], "loss")
    for name, g in grads.items():
        close(g, tgrads[name], GREL[np.float64], name)


def test_scheduled_sampling_is_seeded_and_mixes():
    m = make("bahdanau")
    src, lens, tgt_in, _ = data(5, B=40, lengths=np.random.default_rng(0).integers(1, S + 1, 40))
    a = m(src, tgt_in, lens, sampling=0.5, seed=7)
    same_bits(a, m(src, tgt_in, lens, sampling=0.5, seed=7), "same seed")
    assert not np.array_equal(a, m(src, tgt_in, lens, sampling=0.5, seed=8))
    # without a seed, each call draws its own from the model's generator; a model built with the
    # same seed replays the same draws
    first, second = m(src, tgt_in, lens, sampling=0.5), m(src, tgt_in, lens, sampling=0.5)
    assert not np.array_equal(first, second)
    again = make("bahdanau")
    same_bits(again(src, tgt_in, lens, sampling=0.5), first, "replayed draw")
    teacher, free = m(src, tgt_in, lens), m(src, tgt_in, lens, sampling=1.0)
    same_bits(teacher, m(src, tgt_in, lens, sampling=0.0, seed=7), "sampling=0 is teacher forcing")
    # every row's step-1 logits equal either teacher forcing's or free running's
    for b in range(40):
        assert np.array_equal(a[b, 1], teacher[b, 1]) or np.array_equal(a[b, 1], free[b, 1])
    mixed = [np.array_equal(a[b, 1], teacher[b, 1]) for b in range(40) if not np.array_equal(teacher[b, 1], free[b, 1])]
    assert 0 < sum(mixed) < len(mixed)


# --------------------------------------------------------------------------- finite differences


@pytest.mark.parametrize("kind,feeding", VARIANTS, ids=VARIANT_IDS)
def test_gradients_match_finite_differences(kind, feeding):
    m = make(kind, seed=1, input_feeding=feeding)
    src, lens, tgt_in, _ = data(6)
    cot = np.random.default_rng(7).standard_normal((5, T, VT))
    _, pullback = attnc.vjp(m, src, tgt_in, lens)
    grads = pullback(cot)
    rng = np.random.default_rng(8)
    eps = 1e-6
    for name, p in m.named_parameters():
        for _ in range(3):
            ix = tuple(int(rng.integers(0, n)) for n in p.shape)
            old = p[ix]
            p[ix] = old + eps
            up = float((m(src, tgt_in, lens) * cot).sum())
            p[ix] = old - eps
            down = float((m(src, tgt_in, lens) * cot).sum())
            p[ix] = old
            fd = (up - down) / (2 * eps)
            assert abs(grads[name][ix] - fd) <= 1e-6 * max(1.0, abs(fd)), (name, ix, grads[name][ix], fd)


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind,feeding", VARIANTS, ids=VARIANT_IDS)
def test_greedy_matches_torch_step_loop(kind, feeding, dtype):
    m = make(kind, dtype, seed=2, input_feeding=feeding)
    src, lens, _, _ = data(9)
    tokens, align = m.generate(src, lens, max_len=6, bos=1, eos=2)
    ttok, talign = oracle(m, dtype).greedy(src, lens, max_len=6, bos=1, eos=2)
    np.testing.assert_array_equal(tokens, ttok)
    close(align, talign, REL[dtype], "alignments")


@pytest.mark.parametrize("kind,feeding", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("beam,penalty", [(1, 0.0), (3, 0.0), (4, 1.0), (7, -0.5)])
def test_decoding_matches_python_oracle(kind, feeding, beam, penalty):
    m = make(kind, seed=3, input_feeding=feeding)
    src, lens, _, _ = data(10)
    tokens, _ = m.generate(src, lens, max_len=5, beam_size=beam, length_penalty=penalty)
    np.testing.assert_array_equal(
        tokens, decoding.rnn_seq2seq(m, src, lens, max_len=5, beam_size=beam, length_penalty=penalty)
    )


@pytest.mark.parametrize("kind", ["bahdanau", "local-p"])
def test_decoded_alignments_are_those_of_the_decoded_tokens(kind):
    """Feeding the decoded tokens back by teacher forcing gives the decoder's alignments,
    for greedy and for the winning beam hypothesis."""
    m = make(kind, seed=4)
    src, lens, _, _ = data(11)
    for beam in (1, 4):
        tokens, align = m.generate(src, lens, max_len=5, beam_size=beam, eos=None)
        tgt_in = np.concatenate([np.ones((5, 1), np.int64), tokens[:, :-1]], axis=1)
        _, forced = m(src, tgt_in, lens, return_alignments=True)
        close(align, forced, 1e-12, f"beam {beam}")


def test_beam_as_wide_as_every_prefix_is_exhaustive():
    m = make("luong-general", seed=5)
    src, lens, _, _ = data(12)
    tokens, _ = m.generate(src, lens, max_len=2, beam_size=VT * VT, eos=None)
    for b in range(5):
        best, best_score = None, -np.inf
        for seq in itertools.product(range(VT), repeat=2):
            tgt_in = np.array([[1, seq[0]]])
            lp = attnc.nn.log_softmax(m(src[b : b + 1], tgt_in, lens[b : b + 1]))[0]
            score = lp[0, seq[0]] + lp[1, seq[1]]
            if score > best_score:
                best, best_score = seq, score
        assert tuple(tokens[b]) == best


def test_generate_stops_rows_at_eos():
    m = make("bahdanau", seed=6)
    src, lens, _, _ = data(13)
    biased = m.state_dict()
    biased["out.bias"][2] += 3.0  # make eos likely
    m.load_state_dict(biased)
    tokens, align = m.generate(src, lens, max_len=8, eos=2)
    for b in range(5):
        row = list(tokens[b])
        if 2 in row:
            end = row.index(2)
            assert all(t == 2 for t in row[end:])
            assert (align[b, end + 1 :] == 0).all()


# --------------------------------------------------------------------------- threads, seeds, save / load


@pytest.mark.parametrize("kind,feeding", [("bahdanau", True), ("luong-location", True), ("local-p", False)])
def test_results_do_not_depend_on_the_thread_count(kind, feeding, restore_threads):
    m = make(kind, dtype=np.float32, input_feeding=feeding)
    rng = np.random.default_rng(14)
    lens = rng.integers(1, S + 1, 40)
    src, lens, tgt_in, tgt_out = data(14, B=40, lengths=lens)
    batch = Batch(src, lens, tgt_in, tgt_out)
    runs = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        loss, grads = m.loss_and_grad(batch, sampling=0.3, seed=1)
        runs.append((loss, grads, m.generate(src, lens, max_len=4, beam_size=3)))
    for loss, grads, (tok, align) in runs[1:]:
        assert loss == runs[0][0]
        for name in grads:
            same_bits(grads[name], runs[0][1][name], name)
        same_bits(tok, runs[0][2][0], "tokens")
        same_bits(align, runs[0][2][1], "alignments")


def test_seeded_initialisation_and_state_dict_names():
    a, b, c = make("bahdanau", seed=1), make("bahdanau", seed=1), make("bahdanau", seed=2)
    for name in a.state_dict():
        same_bits(a.state_dict()[name], b.state_dict()[name], name)
    assert any(not np.array_equal(a.state_dict()[n], c.state_dict()[n]) for n in a.state_dict())
    names = set(a.state_dict())
    assert {
        "attention.query.weight",
        "attention.key.weight",
        "attention.v",
        "bridge.weight",
        "decoder.weight_ih",
        "encoder.weight_ih_l0_reverse",
        "out.weight",
    } <= names
    assert set(make("local-p").state_dict()) >= {
        "attention.weight",
        "attention.position.weight",
        "attention.position.v",
        "combine.weight",
    }
    assert "encoder.weight_ih_l0_reverse" not in make("luong-dot").state_dict()
    # without input feeding the decoder's LSTM reads the embedded token alone
    assert make("local-p").state_dict()["decoder.weight_ih"].shape == (4 * H, E + H)
    assert make("local-p", input_feeding=False).state_dict()["decoder.weight_ih"].shape == (4 * H, E)
    assert "input_feeding=False" in repr(make("luong-dot", input_feeding=False))


@pytest.mark.parametrize("feeding", [True, False])
def test_save_and_load_round_trip(tmp_path, feeding):
    m = make("local-m", seed=3, input_feeding=feeding)
    attnc.save(tmp_path / "m.npz", m)
    back = attnc.load(tmp_path / "m.npz")
    src, lens, tgt_in, _ = data(15)
    same_bits(back(src, tgt_in, lens), m(src, tgt_in, lens), "logits")
    assert back.window == m.window and back.attention_kind == "local-m" and back.input_feeding is feeding


# --------------------------------------------------------------------------- errors and inputs


def test_argument_errors_name_the_argument():
    with pytest.raises(ValueError, match="attention"):
        make("luong-cosine")
    with pytest.raises(ValueError, match="bidirectional"):
        make("luong-dot", bidirectional=True)
    with pytest.raises(TypeError, match="max_source_len"):
        attnc.models.Seq2Seq(VS, VT, attention="luong-location")
    with pytest.raises(ValueError, match="window"):
        make("local-p", window=0.5)
    with pytest.raises(ValueError, match="input_feeding=False is for the Luong kinds"):
        make("bahdanau", input_feeding=False)
    with pytest.raises(TypeError, match="input_feeding must be True or False"):
        make("luong-general", input_feeding="no")
    m = make("bahdanau")
    src, lens, tgt_in, _ = data()
    with pytest.raises(ValueError, match="src holds ids"):
        m(src + VS, tgt_in, lens)
    with pytest.raises(ValueError, match="tgt_in holds ids"):
        m(src, tgt_in + VT, lens)
    with pytest.raises(TypeError, match="src must hold integer"):
        m(src.astype(np.float32), tgt_in, lens)
    with pytest.raises(ValueError, match="src_lengths must be in"):
        m(src, tgt_in, lens * 0)
    with pytest.raises(ValueError, match="src_lengths must have shape"):
        m(src, tgt_in, lens[:2])
    with pytest.raises(ValueError, match="tgt_in has 2 rows"):
        m(src, tgt_in[:2], lens)
    with pytest.raises(ValueError, match="sampling"):
        m(src, tgt_in, lens, sampling=1.5)
    with pytest.raises(ValueError, match="beam_size"):
        m.generate(src, lens, beam_size=0)
    with pytest.raises(ValueError, match="bos"):
        m.generate(src, lens, bos=VT)
    # eos and the length penalty are checked by the C decoder, the lengths in Python (one place each)
    with pytest.raises(ValueError, match=rf"eos {VT} is outside the vocabulary \[0, {VT}\)"):
        m.generate(src, lens, eos=VT)
    with pytest.raises(ValueError, match="eos must be an int >= 0, got -1"):
        m.generate(src, lens, eos=-1)
    with pytest.raises(ValueError, match="length_penalty must be finite, got inf"):
        m.generate(src, lens, beam_size=2, length_penalty=float("inf"))
    with pytest.raises(ValueError, match="max_len must be an int >= 0, got -1"):
        m.generate(src, lens, max_len=-1)
    with pytest.raises(ValueError, match="luong-location"):
        attnc.models.Seq2Seq(VS, VT, attention="luong-location", max_source_len=3)(src, tgt_in, lens)
    m.eval()
    with pytest.raises(ValueError, match="scheduled sampling is for training"):
        m(src, tgt_in, lens, sampling=0.5)


def test_inputs_are_never_modified():
    m = make("local-p")
    src, lens, tgt_in, tgt_out = data()
    copies = [a.copy() for a in (src, lens, tgt_in, tgt_out)]
    state = m.state_dict()
    m.loss_and_grad(Batch(src, lens, tgt_in, tgt_out), sampling=0.5, seed=0)
    m.generate(src, lens, beam_size=3)
    for a, c in zip((src, lens, tgt_in, tgt_out), copies):
        same_bits(a, c)
    for name, p in m.state_dict().items():
        same_bits(p, state[name], name)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_empty_batches_and_no_target_steps(dtype):
    m = make("local-p", dtype)
    for src, tgt_in in (
        (np.ones((2, S), np.int64), np.zeros((2, 0), np.int64)),
        (np.zeros((0, S), np.int64), np.zeros((0, 3), np.int64)),
    ):
        logits, pullback = attnc.vjp(m, src, tgt_in)
        assert logits.shape == (src.shape[0], tgt_in.shape[1], VT)
        for name, g in pullback(np.zeros_like(logits)).items():
            assert g.shape == m.state_dict()[name].shape and not g.any(), name
    tokens, align = m.generate(np.zeros((0, S), np.int64), max_len=4)
    assert tokens.shape == (0, 0) and align.shape == (0, 0, S)
