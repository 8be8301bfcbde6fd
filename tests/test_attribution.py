"""attnc.attribution: rollout and relevance against NumPy float64 references
(tests/reference/attribution_ref.py), flow against scipy's integer
maximum_flow (weights that are exact binary fractions, so the flows must be
bitwise exact) and networkx's float maximum flow, the attention gradients of
GPT and TransformerEncoder against torch autograd, shapes and dtypes by
hypothesis, float32 vs float64, thread-count independence, inputs never
modified, empty inputs, and bad input."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse
from hypothesis import given
from hypothesis import strategies as st
from scipy.sparse.csgraph import maximum_flow

import attnc
from attnc import attribution
from helpers import close, same_bits
from reference.attribution_ref import mixed_ref, relevance_ref, rollout_ref

FUSIONS = ["mean", "max", "min"]


def random_weights(rng, N, B, H, L, dtype=np.float64):
    """N layers of softmax-like rows (B, H, L, L)."""
    return (
        [rng.dirichlet(np.ones(L), size=(B, H, L)).astype(dtype) for _ in range(N)]
        if L
        else [np.zeros((B, H, 0, 0), dtype) for _ in range(N)]
    )


def dyadic_weights(rng, N, B, H, L, denom=64):
    """Rows of counts / denom (exact in float32 and float64) and the counts;
    with H a power of two, the mean over heads mixed with the identity stays exact."""
    counts = [rng.multinomial(denom, np.ones(L) / L, size=(B, H, L)) for _ in range(N)]
    return [c / denom for c in counts], counts


def layered_graph(mixed, b):
    """Capacities of the layered graph as a dense ((N + 1) L)^2 matrix: node l L + p,
    an edge from (l, p) to (l - 1, q) of capacity A_l[p, q]."""
    N, L = len(mixed), mixed[0].shape[-1]
    cap = np.zeros(((N + 1) * L, (N + 1) * L), mixed[0].dtype)
    for l, a in enumerate(mixed, 1):
        cap[l * L : (l + 1) * L, (l - 1) * L : l * L] = a[b]
    return cap


def flow_scipy(counts, H, denom):
    """Exact max flows with integer capacities: A = (sum_h counts / (H denom)) / 2 + I / 2,
    so 2 H denom A is an integer matrix."""
    N, (B, _, L, _) = len(counts), counts[0].shape
    scale = 2 * H * denom
    mixed = [c.sum(axis=1) + H * denom * np.eye(L, dtype=np.int64) for c in counts]  # scale * A
    out = np.zeros((B, L, L))
    for b in range(B):
        graph = scipy.sparse.csr_matrix(layered_graph(mixed, b).astype(np.int32))
        for i in range(L):
            for j in range(L):
                out[b, i, j] = maximum_flow(graph, N * L + i, j).flow_value / scale
    return out


def flow_networkx(mixed):
    N, (B, L, _) = len(mixed), mixed[0].shape
    out = np.zeros((B, L, L))
    for b in range(B):
        g = nx.DiGraph()
        cap = layered_graph(mixed, b)
        for u, v in zip(*np.nonzero(cap)):
            g.add_edge(int(u), int(v), capacity=float(cap[u, v]))
        for i in range(L):
            for j in range(L):
                s, t = N * L + i, j
                out[b, i, j] = nx.maximum_flow_value(g, s, t) if s in g and t in g else 0.0
    return out


# --------------------------------------------------------------------------- rollout


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("residual", [0.0, 0.5, 0.9, 1.0])
def test_rollout_matches_reference(rng, fusion, residual):
    ws = random_weights(rng, 4, 3, 2, 6)
    r = attribution.rollout(ws, head_fusion=fusion, residual=residual)
    close(r, rollout_ref(ws, fusion, residual), 1e-13, f"{fusion} {residual}")


def test_rollout_one_layer_is_the_mixed_matrix_and_rows_sum_to_one(rng):
    ws = random_weights(rng, 1, 2, 3, 5)
    close(attribution.rollout(ws), mixed_ref(ws)[0], 1e-15)
    r = attribution.rollout(random_weights(rng, 5, 2, 3, 5))
    close(r.sum(-1), np.ones((2, 5)), 1e-13)


def test_rollout_zero_rows_stay_zero(rng):
    # residual 0 and a layer whose first query attends nowhere (fully masked): that row is 0
    ws = random_weights(rng, 2, 1, 2, 4)
    ws[1][:, :, 0] = 0
    r = attribution.rollout(ws, residual=0.0)
    same_bits(r[0, 0], np.zeros(4))
    close(r, rollout_ref(ws, "mean", 0.0), 1e-14)


def test_unbatched_and_tuple_weights(rng):
    ws = random_weights(rng, 3, 1, 2, 5)
    batched = attribution.rollout(ws)
    same_bits(attribution.rollout(tuple(w[0] for w in ws)), batched[0])
    same_bits(attribution.flow([w[0] for w in ws]), attribution.flow(ws)[0])


# --------------------------------------------------------------------------- flow


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 2, 1, 5), (3, 2, 2, 5), (4, 1, 4, 6)])  # H a power of 2: A stays exact
def test_flow_exact_against_scipy_integer_maximum_flow(rng, dtype, shape):
    N, B, H, L = shape
    denom = 64
    ws, counts = dyadic_weights(rng, N, B, H, L, denom)
    f = attribution.flow([w.astype(dtype) for w in ws])
    assert f.dtype == dtype
    same_bits(f, flow_scipy(counts, H, denom).astype(dtype), f"{shape}")


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("residual", [0.0, 0.5])
def test_flow_against_networkx(rng, fusion, residual):
    ws = random_weights(rng, 3, 2, 3, 5)
    f = attribution.flow(ws, head_fusion=fusion, residual=residual)
    close(f, flow_networkx(mixed_ref(ws, fusion, residual)), 1e-12, f"{fusion} {residual}")


def test_flow_of_one_layer_is_its_matrix_and_cut_bounds(rng):
    ws = random_weights(rng, 1, 2, 2, 6)
    close(attribution.flow(ws), mixed_ref(ws)[0], 1e-15)
    ws = random_weights(rng, 4, 2, 2, 6)
    f, mixed = attribution.flow(ws), mixed_ref(ws)
    # two cuts: the source's out-edges (a row of A_N: capacity 1) and the sink's in-edges (a column of A_1)
    bound = np.minimum(1.0, mixed[0].sum(axis=1))[:, None, :]
    assert (f >= 0).all() and (f <= bound + 1e-12).all()


def test_flow_size_guard(rng):
    ws = [np.full((1, 1, 200, 200), 1 / 200) for _ in range(2)]  # B N L^4 = 3.2e9: allowed
    ws = ws * 3  # 6 layers: 9.6e9 > 2^33
    with pytest.raises(ValueError, match=r"attention flow over B=1, 6 layers, L=200 .* too slow; use rollout"):
        attribution.flow(ws)


# --------------------------------------------------------------------------- relevance


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relevance_matches_reference(rng, dtype):
    ws = random_weights(rng, 3, 2, 4, 6, dtype)
    gs = [rng.standard_normal(w.shape).astype(dtype) for w in ws]
    r = attribution.relevance(ws, gs)
    assert r.dtype == dtype
    close(r, relevance_ref(ws, gs), 1e-13 if dtype == np.float64 else 1e-5)


def _torch_layer(torch, sd, prefix, x, H, norm_first, act, mask, probs):
    """torch.nn.TransformerEncoderLayer's math (batch first, eval), keeping each
    layer's attention probabilities in probs (with their gradients)."""
    F = torch.nn.functional
    E = x.shape[-1]

    def p(name):
        return sd[prefix + name]

    def attn(h):
        B, L, _ = h.shape
        q, k, v = (h @ p("self_attn.in_proj_weight").T + p("self_attn.in_proj_bias")).split(E, dim=-1)
        q, k, v = (t.reshape(B, L, H, E // H).transpose(1, 2) for t in (q, k, v))
        s = q @ k.transpose(-1, -2) / (E // H) ** 0.5
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        a = torch.softmax(s, dim=-1)
        a.retain_grad()
        probs.append(a)
        ctx = (a @ v).transpose(1, 2).reshape(B, L, E)
        return ctx @ p("self_attn.out_proj.weight").T + p("self_attn.out_proj.bias")

    def ff(h):
        h = h @ p("linear1.weight").T + p("linear1.bias")
        h = F.gelu(h) if act == "gelu" else F.relu(h)
        return h @ p("linear2.weight").T + p("linear2.bias")

    def norm(i, h):
        return F.layer_norm(h, (E,), p(f"norm{i}.weight"), p(f"norm{i}.bias"), 1e-5)

    if norm_first:
        x = x + attn(norm(1, x))
        return x + ff(norm(2, x))
    x = norm(1, x + attn(x))
    return norm(2, x + ff(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_attention_gradients_against_torch(rng, torch, norm_first):
    H, L, E, n = 2, 5, 8, 3
    layer = attnc.nn.TransformerEncoderLayer(E, H, dim_feedforward=12, norm_first=norm_first, dtype=np.float64, seed=1)
    encoder = attnc.nn.TransformerEncoder(layer, n).eval()
    x = rng.standard_normal((2, L, E))
    cot = rng.standard_normal((2, L, E))
    ws, gs = attribution.attention_gradients(encoder, x, cot)
    sd = {k: torch.tensor(v, requires_grad=True) for k, v in encoder.state_dict().items()}
    h, probs = torch.tensor(x), []
    for i in range(n):
        h = _torch_layer(torch, sd, f"layers.{i}.", h, H, norm_first, "relu", None, probs)
    np.testing.assert_allclose(encoder(x), h.detach().numpy(), rtol=0, atol=1e-12)
    (h * torch.tensor(cot)).sum().backward()
    for i in range(n):
        np.testing.assert_allclose(ws[i], probs[i].detach().numpy(), rtol=0, atol=1e-13, err_msg=f"weights {i}")
        np.testing.assert_allclose(gs[i], probs[i].grad.numpy(), rtol=0, atol=1e-12, err_msg=f"grads {i}")


def test_gpt_attention_gradients_and_relevance_against_torch(rng, torch):
    V, T, n, H, E = 7, 6, 2, 2, 8
    model = attnc.models.GPT(V, T, n_layer=n, n_head=H, n_embd=E, dtype=np.float64, seed=3).eval()
    idx = rng.integers(0, V, (2, T))
    target = 4

    def score(logits):
        cot = np.zeros_like(logits)
        cot[:, -1, target] = 1
        return cot

    ws, gs = attribution.attention_gradients(model, idx, score)
    sd = {k: torch.tensor(v, requires_grad=True) for k, v in model.state_dict().items()}
    h = sd["wte.weight"][torch.tensor(idx)] + sd["wpe.weight"][:T]
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    probs = []
    for i in range(n):
        h = _torch_layer(torch, sd, f"encoder.layers.{i}.", h, H, True, "gelu", causal, probs)
    h = torch.nn.functional.layer_norm(h, (E,), sd["ln_f.weight"], sd["ln_f.bias"], 1e-5)
    logits = h @ sd["lm_head.weight"].T
    np.testing.assert_allclose(model(idx), logits.detach().numpy(), rtol=0, atol=1e-12)
    logits[:, -1, target].sum().backward()
    torch_gs = [p.grad.numpy() for p in probs]
    for i in range(n):
        np.testing.assert_allclose(gs[i], torch_gs[i], rtol=0, atol=1e-12, err_msg=f"grads {i}")
    close(attribution.relevance(ws, gs), relevance_ref(ws, torch_gs), 1e-12)


def test_attention_gradients_refusals(rng):
    layer = attnc.nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.1, seed=0)
    x = rng.standard_normal((1, 3, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=r"model ran with dropout .* model\.eval\(\)"):
        attribution.attention_gradients(attnc.nn.TransformerEncoder(layer, 2), x, np.ones_like(x))
    with pytest.raises(TypeError, match="model is a TransformerEncoderLayer, whose pullback does not give"):
        attribution.attention_gradients(layer.eval(), x, np.ones_like(x))


def test_encoder_decoder_pullback_keys_unchanged(rng):
    # the encoder's attention gradients stay inside the encoder-decoder's pullback
    m = attnc.nn.Transformer(8, 2, 1, 1, dim_feedforward=12, dtype=np.float64, seed=0).eval()
    src, tgt = rng.standard_normal((1, 4, 8)), rng.standard_normal((1, 3, 8))
    (out, _), pullback = attnc.vjp(m, src, tgt, need_weights=True)
    grads = pullback(np.ones_like(out), None)
    assert set(grads) == set(m.state_dict()) | {"src", "tgt"}


# --------------------------------------------------------------------------- properties


@given(
    N=st.integers(1, 3),
    B=st.integers(0, 2),
    H=st.integers(1, 3),
    L=st.integers(0, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    fusion=st.sampled_from(FUSIONS),
    seed=st.integers(0, 2**32 - 1),
)
def test_shapes_and_dtypes(N, B, H, L, dtype, fusion, seed):
    rng = np.random.default_rng(seed)
    ws = random_weights(rng, N, B, H, L, dtype)
    gs = [rng.standard_normal(w.shape).astype(dtype) for w in ws]
    tol = 1e-12 if dtype == np.float64 else 2e-6
    r, f, rel = attribution.rollout(ws, head_fusion=fusion), attribution.flow(ws), attribution.relevance(ws, gs)
    for out in (r, f, rel):
        assert out.shape == (B, L, L) and out.dtype == dtype
    close(r, rollout_ref(ws, fusion), tol)
    close(rel, relevance_ref(ws, gs), tol)
    if B and L and dtype == np.float64:
        close(f, flow_networkx(mixed_ref(ws)), 1e-12)


@given(
    N=st.integers(1, 3),
    B=st.integers(1, 2),
    H=st.sampled_from([1, 2, 4]),
    L=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_flow_exact_on_binary_fractions(N, B, H, L, seed):
    ws, counts = dyadic_weights(np.random.default_rng(seed), N, B, H, L)
    same_bits(attribution.flow(ws), flow_scipy(counts, H, 64))


def test_float32_within_1e5_of_float64(rng):
    ws = random_weights(rng, 4, 2, 3, 7)
    gs = [rng.standard_normal(w.shape) for w in ws]
    w32, g32 = [w.astype(np.float32) for w in ws], [g.astype(np.float32) for g in gs]
    for name, fn in (("rollout", attribution.rollout), ("flow", attribution.flow)):
        close(fn(w32), fn(ws), 1e-5, name)
    close(attribution.relevance(w32, g32), attribution.relevance(ws, gs), 1e-5, "relevance")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_thread_count_independence(rng, restore_threads, dtype):
    ws = random_weights(rng, 3, 5, 2, 12, dtype)
    gs = [rng.standard_normal(w.shape).astype(dtype) for w in ws]
    results = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        results.append(
            (attribution.rollout(ws), attribution.flow(ws, head_fusion="max"), attribution.relevance(ws, gs))
        )
    for other in results[1:]:
        for a, b, name in zip(results[0], other, ("rollout", "flow", "relevance")):
            same_bits(a, b, name)


def test_inputs_never_modified(rng, assert_unchanged):
    ws = random_weights(rng, 3, 2, 2, 5)
    gs = [rng.standard_normal(w.shape) for w in ws]
    assert_unchanged(attribution.rollout, ws)
    assert_unchanged(attribution.flow, ws)
    assert_unchanged(attribution.relevance, ws, gs)


@pytest.mark.parametrize("B, L", [(0, 4), (2, 0), (0, 0)])
def test_empty_inputs_give_empty_results(B, L):
    ws = [np.zeros((B, 2, L, L)) for _ in range(3)]
    for out in (attribution.rollout(ws), attribution.flow(ws), attribution.relevance(ws, ws)):
        assert out.shape == (B, L, L) and out.dtype == np.float64


# --------------------------------------------------------------------------- bad input


def _bad(exc, pattern, fn, *args, **kwargs):
    with pytest.raises(exc, match=pattern):
        fn(*args, **kwargs)


@pytest.mark.parametrize("fn", [attribution.rollout, attribution.flow])
def test_bad_weights(rng, fn):
    ws = random_weights(rng, 3, 2, 2, 4)
    _bad(
        ValueError,
        r"weights\[1\] has shape \(2, 2, 5, 5\) but weights\[0\] has \(2, 2, 4, 4\)",
        fn,
        [ws[0], random_weights(rng, 1, 2, 2, 5)[0], ws[2]],
    )
    _bad(
        ValueError,
        r"weights\[0\] has shape \(2, 2, 4, 3\), expected \(B, H, L, L\) or \(H, L, L\)",
        fn,
        [w[..., :3] for w in ws],
    )
    _bad(ValueError, r"weights\[0\] has shape \(4, 4\), expected", fn, [w[0, 0] for w in ws])
    _bad(ValueError, r"weights\[0\] has shape \(1, 2, 2, 4, 4\), expected", fn, [w[None] for w in ws])
    neg = [w.copy() for w in ws]
    neg[2][1, 0, 3, 2] = -0.25
    _bad(ValueError, r"weights has a negative value -0.25 in layer 2 \(of 3 layers\)", fn, neg)
    nan = [w.copy() for w in ws]
    nan[1][0, 1, 0, 0] = np.nan
    _bad(ValueError, r"weights has a non-finite value nan in layer 1", fn, nan)
    nan[1][0, 1, 0, 0] = np.inf
    _bad(ValueError, r"weights has a non-finite value inf in layer 1", fn, nan)
    _bad(TypeError, r"weights must be a list or tuple with one array per layer", fn, np.stack(ws))
    _bad(ValueError, r"weights is empty", fn, [])
    _bad(
        TypeError,
        r"weights\[1\] has dtype float32 but the call's dtype is float64",
        fn,
        [ws[0], ws[1].astype(np.float32)],
    )
    _bad(TypeError, r"weights\[0\] has dtype int64", fn, [np.ones((1, 1, 2, 2), np.int64)])
    _bad(ValueError, r"unknown head_fusion 'median'", fn, ws, head_fusion="median")
    for residual in (-0.1, 1.5, np.nan):
        _bad(ValueError, r"residual", fn, ws, residual=residual)
    _bad(ValueError, r"weights has 0 heads", fn, [np.zeros((1, 0, 3, 3))])


def test_bad_relevance_arguments(rng):
    ws = random_weights(rng, 2, 2, 2, 4)
    gs = [rng.standard_normal(w.shape) for w in ws]
    _bad(ValueError, r"grads has 1 layers of shape \(2, 2, 4, 4\) but weights has 2", attribution.relevance, ws, gs[:1])
    _bad(
        ValueError,
        r"grads has 2 layers of shape \(2, 2, 3, 3\)",
        attribution.relevance,
        ws,
        [g[..., :3, :3] for g in gs],
    )
    _bad(TypeError, r"grads has dtype float32", attribution.relevance, ws, [g.astype(np.float32) for g in gs])
    bad = [g.copy() for g in gs]
    bad[1][0, 0, 0, 0] = np.nan
    _bad(ValueError, r"grads has a non-finite value nan in layer 1 \(of 2 layers\)", attribution.relevance, ws, bad)
    # relevance takes any finite weights (the positive part is taken after the product)
    neg = [-w for w in ws]
    close(attribution.relevance(neg, gs), relevance_ref(neg, gs), 1e-13)
