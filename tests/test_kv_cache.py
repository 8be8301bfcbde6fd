"""attnc.KVCache: incremental decoding (one token or a chunk at a time) against full
causal attention (attnc, the NumPy reference, torch with the bottom-right causal
alignment), GQA, value_dim != head_dim, weights, gradients, errors, views, threads."""

import numpy as np
import pytest

import attnc
from helpers import close as _close
from helpers import same_bits as _same_bits
from reference import sdpa_ref as ref

REL = {np.float32: 1e-5, np.float64: 1e-12}
GREL = {np.float32: 1e-5, np.float64: 1e-10}
DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]
# (query heads H, cached heads Hkv, head_dim E, value_dim Ev)
HEADS = [(2, 2, 8, 8), (4, 2, 8, 8), (4, 2, 6, 3), (3, 1, 5, 7)]
HEAD_IDS = [f"H{h}kv{k}E{e}Ev{v}" for h, k, e, v in HEADS]


def _seq(rng, B, H, Hkv, T, E, Ev, dtype):
    return (
        rng.standard_normal((B, H, T, E)).astype(dtype),
        rng.standard_normal((B, Hkv, T, E)).astype(dtype),
        rng.standard_normal((B, Hkv, T, Ev)).astype(dtype),
    )


def _bottom_right(t, length):
    """Bool (t, length), True = may attend: query i of the block sees keys <= length - t + i."""
    return np.tril(np.ones((t, length), bool), length - t)


def _decode(q, k, v, chunks, dtype, capacity=None, return_weights=False):
    """Append and attend chunk by chunk; returns the list of (start, stop, result)."""
    B, H, T, E = q.shape
    Hkv, Ev = k.shape[1], v.shape[3]
    cache = attnc.KVCache(B, Hkv, capacity or T, E, dtype, value_dim=Ev)
    res, start = [], 0
    for t in chunks:
        cache.append(k[:, :, start : start + t], v[:, :, start : start + t])
        assert len(cache) == start + t
        res.append((start, start + t, cache.attend(q[:, :, start : start + t], return_weights=return_weights)))
        start += t
    assert start == T
    return cache, res


def _torch_sdpa(torch, q, k, v, mask=None, lower_right=None, grad=False, scale=None):
    tq, tk, tv = (torch.from_numpy(np.array(x)).requires_grad_(grad) for x in (q, k, v))
    if lower_right is not None:
        from torch.nn.attention.bias import causal_lower_right

        m = causal_lower_right(*lower_right)
    else:
        m = None if mask is None else torch.from_numpy(mask)
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=m, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )
    return out, (tq, tk, tv)


# --------------------------------------------------------------------------- forward

CHUNKINGS = {"one_by_one": [1] * 9, "chunks": [3, 1, 4, 1], "prefill_then_single": [6, 1, 1, 1], "all_at_once": [9]}


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("heads", HEADS, ids=HEAD_IDS)
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
def test_decoding_matches_full_causal_attention(chunking, heads, dtype, rng, torch):
    H, Hkv, E, Ev = heads
    B, T = 2, 9
    rel = REL[dtype]
    q, k, v = _seq(rng, B, H, Hkv, T, E, Ev, dtype)
    _, res = _decode(q, k, v, CHUNKINGS[chunking], dtype, capacity=T + 3)
    out = np.concatenate([r for _, _, r in res], axis=2)
    assert out.dtype == dtype and out.shape == (B, H, T, Ev)
    gqa = H != Hkv
    full = attnc.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    _close(out, full, rel, "vs attnc full causal")
    _close(out, ref.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa), rel, "vs reference")
    tfull, _ = _torch_sdpa(torch, q, k, v, lower_right=(T, T))
    _close(out, tfull.detach().numpy(), rel, "vs torch full")
    # each block against torch's SDPA on the prefix, bottom-right aligned
    for start, stop, r in res:
        tout, _ = _torch_sdpa(
            torch, q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop], lower_right=(stop - start, stop)
        )
        _close(r, tout.detach().numpy(), rel, f"block {start}:{stop} vs torch lower-right")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_fewer_queries_than_appended(dtype, rng, torch):
    """attend(t queries) after appending more: the queries are the last t positions."""
    q, k, v = _seq(rng, 1, 4, 2, 7, 8, 5, dtype)
    cache = attnc.KVCache(1, 2, 8, 8, dtype, value_dim=5)
    cache.append(k, v)
    full = attnc.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    for t in (1, 3, 7):
        out = cache.attend(q[:, :, 7 - t :])
        _close(out, full[:, :, 7 - t :], REL[dtype], f"last {t} queries")
        tout, _ = _torch_sdpa(torch, q[:, :, 7 - t :], k, v, lower_right=(t, 7))
        _close(out, tout.detach().numpy(), REL[dtype], f"last {t} queries vs torch")
    assert cache.attend(q[:, :, :0]).shape == (1, 4, 0, 5)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_return_weights_and_scale(dtype, rng, torch):
    B, H, Hkv, T, E, Ev = 2, 4, 2, 8, 6, 3
    q, k, v = _seq(rng, B, H, Hkv, T, E, Ev, dtype)
    cache = attnc.KVCache(B, Hkv, T, E, dtype, value_dim=Ev)
    start = 0
    for t in (5, 1, 2):
        stop = start + t
        cache.append(k[:, :, start:stop], v[:, :, start:stop])
        qb = q[:, :, start:stop]
        res = cache.attend(qb, return_weights=True)
        assert isinstance(res, tuple) and len(res) == 2
        out, w = res
        assert w.dtype == dtype and w.shape == (B, H, t, stop)
        mask = _bottom_right(t, stop)
        eo, ew = ref.scaled_dot_product_attention(
            qb, k[:, :, :stop], v[:, :, :stop], attn_mask=mask, enable_gqa=True, return_weights=True
        )
        _close(out, eo, REL[dtype], "output with weights")
        _close(w, ew, REL[dtype], "weights")
        assert np.all(w[..., ~mask] == 0.0), "weights beyond the causal frontier"
        _same_bits(out, cache.attend(qb), "output without weights")
        # scale: a Python float, as torch's
        so = cache.attend(qb, scale=0.3)
        tso, _ = _torch_sdpa(torch, qb, k[:, :, :stop], v[:, :, :stop], lower_right=(t, stop), scale=0.3)
        _close(so, tso.detach().numpy(), REL[dtype], "scale=0.3")
        assert np.max(np.abs(so - out)) > 1e-4, "scale had no effect"
        start = stop


# --------------------------------------------------------------------------- state


def test_capacity_len_reset_and_views(rng):
    dtype = np.float64
    cache = attnc.KVCache(2, 2, 5, 4, dtype, value_dim=3)
    assert cache.capacity == 5 and len(cache) == 0
    assert cache.keys.shape == (2, 2, 0, 4) and cache.values.shape == (2, 2, 0, 3)
    k, v = rng.standard_normal((2, 2, 4, 4)), rng.standard_normal((2, 2, 4, 3))
    k_src, v_src = k.copy(), v.copy()
    cache.append(k, v)
    k[:] = 0.0  # append copies: the cache keeps its own data
    v[:] = 0.0
    _same_bits(cache.keys, k_src, "keys")
    _same_bits(cache.values, v_src, "values")
    for view in (cache.keys, cache.values):
        assert not view.flags.writeable
        with pytest.raises(ValueError):
            view[0, 0, 0, 0] = 1.0
    with pytest.raises(ValueError, match="capacity"):
        cache.append(rng.standard_normal((2, 2, 2, 4)), rng.standard_normal((2, 2, 2, 3)))
    assert len(cache) == 4, "a refused append changed the length"
    _same_bits(cache.keys, k_src, "keys after a refused append")
    cache.append(k_src[:, :, :1], v_src[:, :, :1])  # exactly at capacity
    assert len(cache) == 5
    with pytest.raises(ValueError, match="capacity"):
        cache.append(k_src[:, :, :1], v_src[:, :, :1])
    cache.append(k_src[:, :, :0], v_src[:, :, :0])  # nothing is fine even when full
    assert len(cache) == 5
    q = rng.standard_normal((2, 4, 1, 4))
    before = cache.attend(q)
    cache.reset()
    assert len(cache) == 0 and cache.keys.shape[2] == 0 and cache.capacity == 5
    with pytest.raises(ValueError, match=r"quer|cached|append"):
        cache.attend(q)  # nothing cached to attend to
    # after reset the cache behaves as a fresh one
    fresh = attnc.KVCache(2, 2, 5, 4, dtype, value_dim=3)
    k2, v2 = rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((2, 2, 5, 3))
    cache.append(k2, v2)
    fresh.append(k2, v2)
    _same_bits(cache.attend(q), fresh.attend(q), "after reset")
    assert np.max(np.abs(cache.attend(q) - before)) > 1e-6
    _same_bits(cache.keys, k2, "keys after reset")


def _err_cases():
    r = np.random.default_rng(0)
    a = lambda *s: r.standard_normal(s)  # noqa: E731
    # cache: batch 2, heads 2, capacity 6, head_dim 4, value_dim 3, two positions cached
    return {
        "key_batch": ("append", ValueError, r"\bkey\b", (a(1, 2, 1, 4), a(1, 2, 1, 3))),
        "key_heads": ("append", ValueError, r"\bkey\b", (a(2, 4, 1, 4), a(2, 4, 1, 3))),
        "key_dim": ("append", ValueError, r"\bkey\b", (a(2, 2, 1, 5), a(2, 2, 1, 3))),
        "key_3d": ("append", ValueError, r"\bkey\b", (a(2, 1, 4), a(2, 2, 1, 3))),
        "value_dim": ("append", ValueError, r"\bvalue\b", (a(2, 2, 1, 4), a(2, 2, 1, 4))),
        "value_t": ("append", ValueError, r"\bvalue\b", (a(2, 2, 1, 4), a(2, 2, 2, 3))),
        "key_dtype": ("append", TypeError, r"\bkey\b", (a(2, 2, 1, 4).astype(np.float32), a(2, 2, 1, 3))),
        "value_int": ("append", TypeError, r"\bvalue\b", (a(2, 2, 1, 4), np.ones((2, 2, 1, 3), np.int64))),
        "overflow": ("append", ValueError, r"capacity", (a(2, 2, 5, 4), a(2, 2, 5, 3))),
        "query_dim": ("attend", ValueError, r"\bquery\b", (a(2, 2, 1, 3),)),
        "query_batch": ("attend", ValueError, r"\bquery\b", (a(1, 2, 1, 4),)),
        "query_heads": ("attend", ValueError, r"\bquery\b", (a(2, 3, 1, 4),)),
        "query_3d": ("attend", ValueError, r"\bquery\b", (a(2, 1, 4),)),
        "query_too_many": ("attend", ValueError, r"quer", (a(2, 2, 3, 4),)),
        "query_dtype": ("attend", TypeError, r"\bquery\b", (a(2, 2, 1, 4).astype(np.float32),)),
    }


@pytest.mark.parametrize("case", list(_err_cases()))
def test_errors_name_the_argument(case):
    method, exc, pattern, args = _err_cases()[case]
    cache = attnc.KVCache(2, 2, 6, 4, np.float64, value_dim=3)
    cache.append(np.ones((2, 2, 2, 4)), np.ones((2, 2, 2, 3)))
    with pytest.raises(exc, match=pattern):
        getattr(cache, method)(*args)
    if method == "attend":
        with pytest.raises(exc, match=pattern):
            attnc.vjp(cache.attend, *args)
    assert len(cache) == 2
    _same_bits(cache.keys, np.ones((2, 2, 2, 4)), "keys after a refused call")


@pytest.mark.parametrize(
    "kw,exc",
    [
        (dict(batch=-1), ValueError),
        (dict(heads=-1), ValueError),
        (dict(head_dim=-1), ValueError),
        (dict(capacity=-1), ValueError),
        (dict(batch=2.0), ValueError),
        (dict(heads=True), ValueError),
        (dict(dtype=np.int32), TypeError),
        (dict(dtype=np.float16), TypeError),
    ],
)
def test_constructor_errors(kw, exc):
    args = dict(batch=1, heads=1, capacity=4, head_dim=2)
    args.update(kw)
    name = next(iter(kw))
    with pytest.raises(exc, match=name):
        attnc.KVCache(**args)


@pytest.mark.parametrize("value_dim", [-1, 2.5])
def test_constructor_value_dim_error(value_dim):
    with pytest.raises(ValueError, match="value_dim"):
        attnc.KVCache(1, 1, 4, 2, value_dim=value_dim)


def test_inputs_never_modified(rng, assert_unchanged):
    cache = attnc.KVCache(1, 2, 6, 4, np.float64, value_dim=3)
    k, v = rng.standard_normal((1, 2, 4, 4)), rng.standard_normal((1, 2, 4, 3))
    assert_unchanged(cache.append, k, v)
    q = rng.standard_normal((1, 4, 2, 4))
    assert_unchanged(cache.attend, q, return_weights=True)
    out, pullback = assert_unchanged(attnc.vjp, cache.attend, q)
    assert_unchanged(pullback, rng.standard_normal(out.shape))


# --------------------------------------------------------------------------- gradients


def _vjp_case(rng, dtype, B=2, H=4, Hkv=2, L=6, t=3, E=5, Ev=4):
    q, k, v = _seq(rng, B, H, Hkv, L, E, Ev, dtype)
    cache = attnc.KVCache(B, Hkv, L + 2, E, dtype, value_dim=Ev)
    cache.append(k, v)
    return cache, q[:, :, L - t :], k, v


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("heads", HEADS, ids=HEAD_IDS)
@pytest.mark.parametrize("t", [1, 3, 6])
def test_gradients_match_torch_and_reference(t, heads, dtype, rng, torch):
    H, Hkv, E, Ev = heads
    cache, q, k, v = _vjp_case(rng, dtype, H=H, Hkv=Hkv, t=t, E=E, Ev=Ev)
    L = k.shape[2]
    out, pullback = attnc.vjp(cache.attend, q)
    _same_bits(out, cache.attend(q), "vjp forward")
    dout = rng.standard_normal(out.shape).astype(dtype)
    grads = pullback(dout)
    assert set(grads) == {"query", "keys", "values"}, sorted(grads)
    for n, like in (("query", q), ("keys", k), ("values", v)):
        assert grads[n].shape == like.shape and grads[n].dtype == dtype, (n, grads[n].shape)
    tout, (tq, tk, tv) = _torch_sdpa(torch, q, k, v, lower_right=(t, L), grad=True)
    tout.backward(torch.from_numpy(dout))
    _close(out, tout.detach().numpy(), REL[dtype], "output vs torch")
    for n, tt in (("query", tq), ("keys", tk), ("values", tv)):
        _close(grads[n], tt.grad.numpy(), GREL[dtype], f"gradient {n} vs torch")
    eg = ref.sdpa_grads(q, k, v, dout, attn_mask=_bottom_right(t, L), enable_gqa=H != Hkv)
    for n, rn in (("query", "query"), ("keys", "key"), ("values", "value")):
        _close(grads[n], eg[rn], GREL[dtype], f"gradient {n} vs reference")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_multi_tile_lengths_match_torch(dtype, rng, torch):
    """A cache longer than a kernel tile, filled in uneven chunks, odd lengths."""
    B, H, Hkv, T, E, Ev = 1, 4, 2, 333, 32, 24
    q, k, v = _seq(rng, B, H, Hkv, T, E, Ev, dtype)
    cache = attnc.KVCache(B, Hkv, T, E, dtype, value_dim=Ev)
    for a, b in ((0, 200), (200, 270), (270, T)):
        cache.append(k[:, :, a:b], v[:, :, a:b])
    qb = q[:, :, 270:]
    (out, w), pullback = attnc.vjp(cache.attend, qb, return_weights=True)
    dout = rng.standard_normal(out.shape).astype(dtype)
    grads = pullback(dout, None)
    tout, (tq, tk, tv) = _torch_sdpa(torch, qb, k, v, lower_right=(T - 270, T), grad=True)
    tout.backward(torch.from_numpy(dout))
    _close(out, tout.detach().numpy(), REL[dtype], "output")
    _close(w.sum(-1), np.ones(w.shape[:-1]), REL[dtype], "weights sum to 1")
    for n, tt in (("query", tq), ("keys", tk), ("values", tv)):
        _close(grads[n], tt.grad.numpy(), GREL[dtype], f"gradient {n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_gradients_with_weights_cotangent(dtype, rng):
    cache, q, k, v = _vjp_case(rng, dtype)
    t, L = q.shape[2], k.shape[2]
    (out, w), pullback = attnc.vjp(cache.attend, q, return_weights=True)
    dout = rng.standard_normal(out.shape).astype(dtype)
    dw = rng.standard_normal(w.shape).astype(dtype)
    mask = _bottom_right(t, L)
    for cots, kw in (
        ((dout, dw), dict(dout=dout, dweights=dw)),
        ((None, dw), dict(dout=np.zeros_like(dout), dweights=dw)),
        ((dout, None), dict(dout=dout)),
    ):
        grads = pullback(*cots)
        eg = ref.sdpa_grads(q, k, v, attn_mask=mask, enable_gqa=True, **kw)
        for n, rn in (("query", "query"), ("keys", "key"), ("values", "value")):
            _close(grads[n], eg[rn], GREL[dtype], f"gradient {n}, cotangents {[c is None for c in cots]}")
    assert np.all(pullback(None, dw)["values"] == 0)


def test_pullback_sees_the_cache_as_it_was(rng):
    cache, q, k, v = _vjp_case(rng, np.float64)
    out, pullback = attnc.vjp(cache.attend, q)
    dout = rng.standard_normal(out.shape)
    g1 = pullback(dout)
    cache.append(rng.standard_normal((2, 2, 2, 5)), rng.standard_normal((2, 2, 2, 4)))
    g2 = pullback(dout)
    cache.reset()
    cache.append(rng.standard_normal((2, 2, 6, 5)), rng.standard_normal((2, 2, 6, 4)))
    g3 = pullback(dout)
    for n in g1:
        _same_bits(g1[n], g2[n], f"{n} after append")
        _same_bits(g1[n], g3[n], f"{n} after reset")
    assert g1["keys"].shape == k.shape


def test_gradients_match_finite_differences(rng, fd_check):
    B, H, Hkv, L, t, E, Ev = 1, 2, 1, 4, 2, 3, 2
    kw = dict(
        query=rng.standard_normal((B, H, t, E)),
        keys=rng.standard_normal((B, Hkv, L, E)),
        values=rng.standard_normal((B, Hkv, L, Ev)),
    )

    def fn(query, keys, values):
        c = attnc.KVCache(B, Hkv, L, E, np.float64, value_dim=Ev)
        c.append(keys, values)
        return c.attend(query, return_weights=True)

    cache = attnc.KVCache(B, Hkv, L, E, np.float64, value_dim=Ev)
    cache.append(kw["keys"], kw["values"])
    (out, w), pullback = attnc.vjp(cache.attend, kw["query"], return_weights=True)
    cots = [rng.standard_normal(out.shape), rng.standard_normal(w.shape)]
    fd_check(fn, kw, cots, pullback(*cots), rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------- threads


def test_thread_counts_give_identical_bits(rng, restore_threads):
    B, H, Hkv, T, E, Ev = 1, 4, 2, 300, 32, 24
    q, k, v = _seq(rng, B, H, Hkv, T, E, Ev, np.float32)
    dout = rng.standard_normal((B, H, 60, Ev)).astype(np.float32)
    res = []
    for n in (1, 2):
        attnc.set_num_threads(n)
        cache = attnc.KVCache(B, Hkv, T, E, np.float32, value_dim=Ev)
        outs = []
        for start in (0, 200, 240):
            stop = {0: 200, 200: 240, 240: 300}[start]
            cache.append(k[:, :, start:stop], v[:, :, start:stop])
            outs.append(cache.attend(q[:, :, start:stop]))
        (o, w), pb = attnc.vjp(cache.attend, q[:, :, 240:], return_weights=True)
        res.append((outs, o, w, pb(dout, None)))
    (outs1, o1, w1, g1), (outs2, o2, w2, g2) = res
    for i, (a, b) in enumerate(zip(outs1, outs2)):
        _same_bits(a, b, f"block {i}")
    _same_bits(o1, o2, "vjp output")
    _same_bits(w1, w2, "weights")
    for n in g1:
        _same_bits(g1[n], g2[n], f"gradient {n}")
