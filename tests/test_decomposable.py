"""attnc.models.DecomposableAttention: forward and alignment matrices against a
NumPy float64 reference (tests/reference/decomposable_ref.py), gradients
against a torch composition and central finite differences of the
reference, masks (lengths, masks and padding ids agree; padding never
matters; an empty sentence gives zeros, never NaN), float32 vs float64,
thread-count independence, state dicts, bad input; and the entailment
experiment's --quick run."""

import numpy as np
import pytest

import attnc
from attnc.models import DecomposableAttention
from attnc.models.decomposable import FeedForward
from conftest import numeric_vjp
from helpers import close, same_bits
from reference.decomposable_ref import decomposable_ref


def _pair(rng, B=4, La=6, Lb=5, V=11):
    la = np.array([6, 3, 1, 0][:B]) if B == 4 else rng.integers(1, La + 1, B)
    lb = np.array([5, 5, 2, 4][:B]) if B == 4 else rng.integers(1, Lb + 1, B)
    p = rng.integers(1, V, (B, La))
    h = rng.integers(1, V, (B, Lb))
    p[np.arange(La)[None] >= la[:, None]] = 0
    h[np.arange(Lb)[None] >= lb[:, None]] = 0
    return p, h, la, lb


def _masks(la, lb, La, Lb):
    return np.arange(La)[None] < la[:, None], np.arange(Lb)[None] < lb[:, None]


def _model(project=True, dtype=np.float64, seed=5, V=11, E=4, H=6, context=0):
    m = DecomposableAttention(V, E, H, dtype=dtype, seed=seed, project=project, context=context)
    # random (not torch-style) weights so every unit is active somewhere
    rng = np.random.default_rng(seed)
    m.load_state_dict({k: rng.standard_normal(v.shape) * 0.7 for k, v in m.state_dict().items()})
    return m


@pytest.mark.parametrize("project,context", [(True, 0), (False, 0), (True, 1), (False, 1)])
def test_forward_matches_reference(rng, project, context):
    m = _model(project, context=context)
    p, h, la, lb = _pair(rng)
    ma, mb = _masks(la, lb, p.shape[1], h.shape[1])
    logits, att = m(p, h, la, lb, return_attention=True)
    rl, rab, rba = decomposable_ref(m.state_dict(), p, h, ma, mb, context)
    close(logits, rl, 1e-10, "logits")
    close(att, rab, 1e-12, "attention")
    al = m.align(p, h, la, lb)
    close(al["premise_to_hypothesis"], rab, 1e-12)
    close(al["hypothesis_to_premise"], rba.transpose(0, 2, 1), 1e-12)
    close(al["logits"], rl, 1e-10)
    assert al["scores"].shape == (4, 6, 5) and np.all(al["scores"][3] == 0)
    # the empty premise (row 3): zero alignment, finite logits
    assert np.all(att[3] == 0) and np.isfinite(logits).all()
    # rows of padding are zero, real rows sum to 1
    close(att.sum(-1), ma * (lb[:, None] > 0), 1e-12)


@pytest.mark.parametrize("context", [0, 1])
def test_masks_agree_and_padding_ignored(rng, context):
    m = _model(context=context)
    p, h, la, lb = _pair(rng)
    ma, mb = _masks(la, lb, p.shape[1], h.shape[1])
    ref = m(p, h, la, lb)
    same_bits(m(p, h, premise_mask=ma, hypothesis_mask=mb), ref)
    same_bits(m(p, h), ref)  # padding_idx 0 marks the padding
    p2, h2 = p.copy(), h.copy()
    p2[~ma] = 7
    h2[~mb] = 3
    same_bits(m(p2, h2, la, lb), ref)


@pytest.mark.parametrize("context", [0, 1])
def test_gradients_against_torch(rng, torch, context):
    m = _model(context=context)
    p, h, la, lb = _pair(rng)
    ma, mb = _masks(la, lb, p.shape[1], h.shape[1])
    logits, pb = attnc.vjp(m, p, h, la, lb)
    cot = rng.standard_normal(logits.shape)
    grads = pb(cot)
    sd = {k: torch.tensor(v, requires_grad=True) for k, v in m.state_dict().items()}

    def ff(prefix, x):
        x = torch.relu(x @ sd[f"{prefix}.linear1.weight"].T + sd[f"{prefix}.linear1.bias"])
        return torch.relu(x @ sd[f"{prefix}.linear2.weight"].T + sd[f"{prefix}.linear2.bias"])

    tma, tmb = torch.from_numpy(ma), torch.from_numpy(mb)

    def window(x, mask):
        if not context:
            return x
        x = x * mask[..., None]
        pad = torch.nn.functional.pad(x, (0, 0, 1, 1))  # one zero position at each end
        return torch.cat([pad[:, :-2], x, pad[:, 2:]], -1) * mask[..., None]

    a = window(sd["embedding.weight"][torch.from_numpy(p)], tma) @ sd["projection.weight"].T
    b = window(sd["embedding.weight"][torch.from_numpy(h)], tmb) @ sd["projection.weight"].T
    e = ff("attend", a) @ ff("attend", b).transpose(1, 2)
    both = tma[:, :, None] & tmb[:, None, :]

    def msoftmax(s, mask, dim):
        w = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=dim)
        return torch.where(mask, torch.nan_to_num(w), torch.zeros_like(w))

    w_ab, w_ba = msoftmax(e, both, 2), msoftmax(e, both, 1)
    beta, alpha = w_ab @ b, w_ba.transpose(1, 2) @ a
    v1 = (ff("compare", torch.cat([a, beta], -1)) * tma[..., None]).sum(1)
    v2 = (ff("compare", torch.cat([b, alpha], -1)) * tmb[..., None]).sum(1)
    tl = ff("aggregate", torch.cat([v1, v2], -1)) @ sd["classifier.weight"].T + sd["classifier.bias"]
    (tl * torch.from_numpy(cot)).sum().backward()
    close(logits, tl.detach().numpy(), 1e-10, "logits")
    assert set(grads) == set(sd)
    for k, t in sd.items():
        close(grads[k], t.grad.numpy(), 1e-9, k)


@pytest.mark.parametrize("project,context", [(True, 0), (False, 0), (True, 1), (False, 1)])
def test_gradients_finite_differences(rng, project, context):
    m = _model(project, V=7, E=3, H=4, context=context)
    p, h, la, lb = _pair(rng, V=7)
    ma, mb = _masks(la, lb, p.shape[1], h.shape[1])
    logits, pb = attnc.vjp(m, p, h, premise_mask=ma, hypothesis_mask=mb)
    cot = rng.standard_normal(logits.shape)
    grads = pb(cot)
    sd = m.state_dict()

    def ref(**params):
        return decomposable_ref(params, p, h, ma, mb, context)[0]

    num = numeric_vjp(ref, dict(sd), [cot], list(sd))
    for k in sd:
        close(grads[k], num[k], 1e-6, k)
    # the padding row of the embedding gets no gradient
    assert np.all(grads["embedding.weight"][0] == 0)


@pytest.mark.parametrize("context", [0, 1])
def test_float32_matches_float64(rng, context):
    m64 = _model(context=context)
    m32 = _model(dtype=np.float32, context=context)
    m32.load_state_dict(m64.state_dict())
    p, h, la, lb = _pair(rng)
    l64, pb64 = attnc.vjp(m64, p, h, la, lb)
    l32, pb32 = attnc.vjp(m32, p, h, la, lb)
    assert l32.dtype == np.float32
    close(l32, l64, 1e-4)
    cot = rng.standard_normal(l64.shape)
    g64, g32 = pb64(cot), pb32(cot.astype(np.float32))
    for k in g64:
        assert g32[k].dtype == np.float32
        close(g32[k], g64[k], 1e-3, k)


@pytest.mark.parametrize("context", [0, 1])
def test_threads_bitwise(rng, restore_threads, context):
    m = DecomposableAttention(40, 16, 32, seed=1, context=context)
    p, h, la, lb = _pair(rng, B=50, La=9, Lb=8, V=40)
    cot = rng.standard_normal((50, 3)).astype(np.float32)
    out = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        logits, pb = attnc.vjp(m, p, h, la, lb)
        out.append((logits, pb(cot)))
    for logits, g in out[1:]:
        same_bits(logits, out[0][0])
        for k in g:
            same_bits(g[k], out[0][1][k], k)


def test_state_dict_seed_and_save(tmp_path):
    m = DecomposableAttention(12, 5, 7, num_classes=4, seed=3)
    keys = list(m.state_dict())
    assert keys[:2] == ["embedding.weight", "projection.weight"] and keys[-2:] == [
        "classifier.weight",
        "classifier.bias",
    ]
    assert m.state_dict()["compare.linear1.weight"].shape == (7, 14)  # [a_i; beta_i], d = 7 after the projection
    assert m.state_dict()["aggregate.linear1.weight"].shape == (7, 14)  # [v1; v2]
    unprojected = DecomposableAttention(12, 5, 7, project=False).state_dict()
    assert "projection.weight" not in unprojected and unprojected["compare.linear1.weight"].shape == (7, 10)
    windowed = DecomposableAttention(12, 5, 7, context=1).state_dict()
    assert windowed["projection.weight"].shape == (7, 15)  # [x_{i-1}; x_i; x_{i+1}] -> 7
    assert DecomposableAttention(12, 5, 7, project=False, context=1).state_dict()["attend.linear1.weight"].shape == (
        7,
        15,
    )
    same_bits(DecomposableAttention(12, 5, 7, num_classes=4, seed=3).attend.linear1.weight, m.attend.linear1.weight)
    attnc.save(tmp_path / "m.npz", m)
    m2 = attnc.load(tmp_path / "m.npz")
    p = np.array([[1, 2, 3]])
    same_bits(m2(p, p), m(p, p))
    ff = FeedForward(3, 4, seed=0)
    assert list(ff.state_dict()) == ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"]


@pytest.mark.parametrize("context", [0, 1])
def test_inputs_not_modified(rng, context):
    m = _model(context=context)
    p, h, la, lb = _pair(rng)
    before = [x.copy() for x in (p, h, la, lb)]
    sd = m.state_dict()
    logits, pb = attnc.vjp(m, p, h, la, lb)
    pb(np.ones_like(logits))
    for x, y in zip((p, h, la, lb), before):
        assert np.array_equal(x, y)
    for k, v in m.state_dict().items():
        same_bits(v, sd[k])


def test_bad_input():
    m = DecomposableAttention(10, 4, 6, seed=0)
    p = np.array([[1, 2, 3]])
    with pytest.raises(TypeError, match="premise must be an integer array"):
        m(p.astype(float), p)
    with pytest.raises(ValueError, match=r"hypothesis must have shape \(B, L\)"):
        m(p, p[0])
    with pytest.raises(ValueError, match="token ids outside"):
        m(p, p + 8)
    with pytest.raises(ValueError, match="different batch sizes"):
        m(p, np.ones((2, 3), np.int64))
    with pytest.raises(ValueError, match="premise_lengths must be in"):
        m(p, p, np.array([4]))
    with pytest.raises(ValueError, match="hypothesis_lengths has shape"):
        m(p, p, None, np.array([1, 2]))
    with pytest.raises(TypeError, match="premise_mask must be a boolean"):
        m(p, p, premise_mask=np.ones((1, 3)))
    with pytest.raises(ValueError, match="not both"):
        m(p, p, np.array([2]), premise_mask=np.ones((1, 3), bool))
    with pytest.raises(ValueError, match="hidden_size must be an int >= 1"):
        DecomposableAttention(10, 4, 0)
    with pytest.raises(ValueError, match="context must be 0 or 1"):
        DecomposableAttention(10, 4, 6, context=2)


def test_training_step_lowers_loss():
    from attnc.datasets import EntailmentTask

    task = EntailmentTask()
    m = DecomposableAttention(task.vocab_size, 16, 32, seed=0)
    opt = attnc.optim.Adam(m, lr=3e-3)
    batch = task.batch(64, seed=1)
    first, _ = m.loss_and_grad(batch)
    for _ in range(30):
        loss, g = m.loss_and_grad(batch)
        assert set(g) == set(m.state_dict())
        opt.step(g)
    assert loss < 0.7 * first


def test_entailment_quick_run(tmp_path):
    from test_experiments import TIMING, run_experiment

    path = tmp_path / "ent.npz"
    first, stderr = run_experiment("entailment", "--quick", "--seed", "2", "--threads", "1", "--save", str(path))
    assert "it/s" in stderr or "s/it" in stderr
    for key in (
        "accuracy",
        "per_class_accuracy",
        "train_seconds",
        "heldout_size",
        "final_loss",
        "alignment_accuracy",
        "premise_alignment_accuracy",
    ):
        assert key in first
    assert set(first["per_class_accuracy"]) == {"entailment", "contradiction", "neutral"}
    assert 0 <= first["accuracy"] <= 1 and first["final_loss"] < first["first_loss"]
    assert 0 <= first["alignment_accuracy"] <= 1 and 0 <= first["premise_alignment_accuracy"] <= 1
    second, _ = run_experiment("entailment", "--quick", "--seed", "2", "--threads", "2")
    assert {k: v for k, v in first.items() if k not in TIMING} == {k: v for k, v in second.items() if k not in TIMING}
    model = attnc.load(path)
    assert model(np.array([[1, 2]]), np.array([[1]])).shape == (1, 3)


def test_notebook_helpers():
    from attnc.experiments import entailment

    model, task, metrics = entailment.train_model(seed=0, quick=True, steps=5)
    words_p, words_h, att, probs = entailment.alignment(model, task, "the red cat and the blue dog", "a blue cat")
    assert att.shape == (len(words_p), len(words_h)) and set(probs) == set(task.labels)
    assert model.context == 1
    close(att.sum(1), np.ones(len(words_p)), 1e-5)


def test_dropout_train_and_eval(rng):
    from attnc.datasets import EntailmentTask

    task = EntailmentTask()
    b = task.batch(16, seed=0)
    m = DecomposableAttention(task.vocab_size, 8, 16, dropout=0.2, seed=4)
    m2 = DecomposableAttention(task.vocab_size, 8, 16, dropout=0.2, seed=4)
    args = (b.premise, b.hypothesis, b.premise_lengths, b.hypothesis_lengths)
    t1, t2 = m(*args), m(*args)
    assert not np.array_equal(t1, t2)  # fresh masks each training call
    same_bits(m2(*args), t1)  # the same seed draws the same masks
    m.eval()
    e1 = m(*args)
    same_bits(m(*args), e1)
    same_bits(DecomposableAttention(task.vocab_size, 8, 16, seed=4).eval()(*args), e1)
    m.train()
    loss, g = m.loss_and_grad(b)
    assert np.isfinite(loss) and set(g) == set(m.state_dict())
    with pytest.raises(ValueError, match="dropout must be in"):
        DecomposableAttention(10, 4, 4, dropout=1.0)


def test_alignment_accuracy_counts_the_targets(rng):
    from attnc.datasets import EntailmentTask
    from attnc.experiments import entailment

    task = EntailmentTask()
    m = DecomposableAttention(task.vocab_size, 8, 16, seed=2, context=1)
    b = task.batch(40, seed=3, split="test")
    got = entailment.alignment_accuracy(m, b, chunk=7)
    al = m.align(b.premise, b.hypothesis, b.premise_lengths, b.hypothesis_lengths)
    hits = rev = total = 0
    for n in range(len(b)):
        la, lb = b.premise_lengths[n], b.hypothesis_lengths[n]
        for j in range(lb):
            i = b.targets[n, j]
            if i >= 0:
                total += 1
                hits += int(np.argmax(al["scores"][n, :la, j]) == i)
                rev += int(np.argmax(al["premise_to_hypothesis"][n, i, :lb]) == j)
    assert total > 40
    assert got == {"alignment_accuracy": hits / total, "premise_alignment_accuracy": rev / total}
