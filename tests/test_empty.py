"""Empty batches, empty sequences and zero-width features through every public
function, module and model method of attnc, forward and through attnc.vjp, in
float32 and float64.

Each row of CASES calls one public name with arrays whose dims are letters
(B batch, T and S sequence lengths, E features, ...) and lists the letters to
set to 0, one at a time. For each:
- with a `torch` reference (torch's own op, or the op written in torch):
  outputs and every gradient against torch's, in float64;
- without one: every float output and gradient is all zeros (empty arrays
  trivially), in the shapes the call has at sizes 2 and 3 of that letter
  extrapolated to 0 (each dim is affine in each size);
- letters in `refuse` must raise a ValueError (where torch refuses too).
Gradients: attnc.vjp's pullback gives one for every float-array argument (and
every parameter of a module), shaped and typed like it.

Adding a function is one line in CASES; test_every_public_name_has_a_case
fails for a public name that neither CASES nor EXCLUDED lists.
"""

from __future__ import annotations

import dataclasses
import inspect
import tempfile
import types
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import attnc
import attnc.models
from attnc import attribution, models, nn, ntm

DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]
REL = {np.float32: 2e-5, np.float64: 1e-10}

# The letters' sizes (E a multiple of H, for the calls with heads); a case sets one of them to 0.
SIZES = dict(B=2, T=3, S=4, E=4, F=3, H=2, N=5, M=3, V=6, C=3, K=3)


class Dims:
    """One run's sizes and dtype: x["B"] is a size, x.a("B", "T", 4) a random
    float array with those dims, x.i(V, "B", "T") random ints in [0, V)."""

    def __init__(self, dtype, **sizes):
        self.dtype = np.dtype(dtype)
        self.sizes = {**SIZES, **sizes}
        self.rng = np.random.default_rng(0)

    def __getitem__(self, letter):
        return self.sizes[letter]

    def shape(self, dims):
        return tuple(self.sizes[d] if isinstance(d, str) else d for d in dims)

    def a(self, *dims, scale=1.0):
        return (scale * self.rng.standard_normal(self.shape(dims))).astype(self.dtype)

    def pos(self, *dims):
        """Random floats in [0.5, 1.5): bandwidths, sharpening exponents, gates."""
        return (0.5 + self.rng.random(self.shape(dims))).astype(self.dtype)

    def simplex(self, *dims):
        """Random rows summing to 1 along the last dim (attention weights)."""
        w = self.rng.random(self.shape(dims)) + 0.1
        return (w / np.maximum(w.sum(-1, keepdims=True), 1e-300)).astype(self.dtype)

    def mask(self, *dims):
        """A random boolean mask (attnc's meaning: True = may attend), every row
        with its first key allowed."""
        m = self.rng.random(self.shape(dims)) < 0.7
        if m.size:
            m[..., 0] = True
        return m

    def perm(self, *dims):
        """Random permutations of range(last dim), one per row (pointer targets)."""
        return np.argsort(self.rng.random(self.shape(dims)), axis=-1)

    def i(self, high, *dims, low=0):
        return self.rng.integers(low, high, self.shape(dims))

    def lengths(self, n, high):
        """n lengths in [1, high] (a full one first), or zeros for high = 0."""
        lens = self.rng.integers(min(1, high), high + 1, self.sizes[n] if isinstance(n, str) else n)
        if lens.size:
            lens[0] = high
        return lens


@dataclasses.dataclass
class Case:
    name: str  # the public name covered ("attnc.nn.linear", "attnc.models.GPT.generate")
    call: Callable  # x -> (fn or module, args, kwargs)
    zero: str  # letters set to 0, one at a time
    torch: Callable | None = None  # functions: (torch, *args, **kwargs) -> outputs; modules: (torch, m) ->
    #                                a torch module, or a function (params, *args, **kwargs) -> outputs
    grad: bool = True  # differentiable through attnc.vjp
    refuse: str = ""  # letters whose 0 must raise ValueError (as torch refuses)
    free: tuple = ()  # outputs that are not reductions (positions, ...): shape checked, not zeros
    zeros: bool = True  # False: results legitimately non-zero and no torch: shapes, dtypes, finite
    decodes: int | None = None  # a decoder: its outputs are as wide (axis 1) as its longest row, so an
    #                                empty batch's this wide (0, or a tour's closing step)


def call(fn, *args, **kwargs):
    return fn, args, kwargs


# --------------------------------------------------------------------------- torch references


def t_softmax(torch, s, dim=-1):
    """Softmax whose fully masked (all -inf) rows are zeros, attnc's rule."""
    w = torch.softmax(s, dim)
    return torch.where(torch.isnan(w), torch.zeros_like(w), w)


def t_attention(torch, q, k, v=None, *, score="dot", mask=None):
    """attnc.attention with the dot scores, scaled or not, in torch ops."""
    s = q @ k.transpose(-1, -2)
    if score == "scaled_dot" and q.shape[-1]:
        s = s / q.shape[-1] ** 0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = t_softmax(torch, s)
    return w @ (k if v is None else v), w


# attnc's own constructor settings, by the values that leave them off
ATTNC_ONLY: dict[str, tuple] = dict.fromkeys(
    ("num_kv_heads", "rotary", "sinks", "alibi", "window", "softcap", "sigmoid_bias"), (None, False)
)
ATTNC_ONLY["activation"] = ("softmax",)  # MultiheadAttention's (the layers' activation is torch's feed-forward one)
ATTNC_ONLY["attention"] = ("softmax",)  # the layers' attention activation


def _off(key, value):
    """Whether value leaves attnc's own setting key off (by identity for None / False, so 0.0 is a setting)."""
    return any(value is off or (isinstance(off, str) and value == off) for off in ATTNC_ONLY.get(key, ()))


def t_torch_module(name):
    """torch.nn.<name> built with the attnc module's constructor arguments."""

    def make(torch, m):
        # (attnc's own options left at their defaults: torch has no such arguments)
        config = {k: v for k, v in m._config.items() if k != "dtype" and not _off(k, v)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Initializing zero-element tensors is a no-op"
            return getattr(torch.nn, name)(**config)

    return make


def t_pool(torch, h, weight, bias, v):
    """attnc.nn.attention_pool in torch ops: c = sum_t alpha_t h_t,
    alpha = softmax_t(v . tanh(W h_t + b))."""
    alpha = t_softmax(torch, torch.tanh(h @ weight.T + bias) @ v)
    return (alpha[..., None] * h).sum(-2), alpha


def t_conv(name, x, w, b, **kw):
    """torch.nn.functional.<name>; with no input channels (a sum over none),
    as one channel of zeros, which torch computes (its own answer is empty)."""
    import torch

    if x.shape[1] == 0:
        x = x.new_zeros(x.shape[:1] + (1,) + x.shape[2:])
        w = w.new_zeros(w.shape[:1] + (1,) + w.shape[2:])
    return getattr(torch.nn.functional, name)(x, w, b, **kw)


def t_conv_module(name, causal=False):
    """An attnc Conv1d / Conv2d / CausalConv1d as t_conv, with its padding."""

    def make(torch, m):
        def run(params, x):
            if causal:  # padded on the left: the output has the input's length
                x = torch.nn.functional.pad(x, ((m.kernel_size - 1) * m.dilation, 0))
                if x.shape[-1] < m.kernel_size:
                    return x.new_zeros(x.shape[0], m.out_channels, 0)
                return t_conv(name, x, params["weight"], params["bias"], dilation=m.dilation)
            return t_conv(name, x, params["weight"], params["bias"], padding=m._config["padding"])

        return run

    return make


def t_kernel_regression(torch, xq, xt, y, bandwidth):
    d2 = ((xq[:, None, :] - xt[None, :, :]) ** 2).sum(-1)
    w = t_softmax(torch, -d2 / (2 * bandwidth**2))
    return w @ y, w


def t_sdpa_weights(torch, q, k, v, is_causal, enable_gqa, return_weights):
    """Causal grouped-query attention and its weights, in torch ops."""
    group = q.shape[1] // k.shape[1] if k.shape[1] else 1
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5 if q.shape[-1] else 1)
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool).tril()  # torch's is_causal: j <= i
    w = t_softmax(torch, s.masked_fill(~allowed, float("-inf")))
    return w @ v, w


# --------------------------------------------------------------------------- the cases


def module(cls, *args, **kwargs):
    """x -> an attnc module of x's dtype (seeded), sizes given as letters:
    module(nn.Linear, "E", "F")."""

    def make(x):
        sized = [x[a] if isinstance(a, str) else a for a in args]
        if "seed" in inspect.signature(cls).parameters:
            kwargs.setdefault("seed", 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. dropout with one recurrent layer, as torch warns
            return cls(*sized, **kwargs, dtype=x.dtype)

    return make


def on(make, *args, **kw):
    """x -> (the module make(x), its arguments): a tuple of letters is a
    random array of those dims, a callable is called with x, the rest is as
    given."""

    def build(x):
        m = make(x)
        given = tuple(a(x) if callable(a) else x.a(*a) if isinstance(a, tuple) else a for a in args)
        return m, given, {k: v(x) if callable(v) else v for k, v in kw.items()}

    return build


def method(make, name, *args, **kw):
    """x -> (the bound method `name` of the module make(x), its arguments, as on's)."""

    def build(x):
        m, given, kwargs = on(make, *args, **kw)(x)
        return getattr(m, name), given, kwargs

    return build


def batch(**fields):
    """x -> a batch object (the fields a model's loss reads), each field a
    letters tuple or a callable of x."""
    return lambda x: types.SimpleNamespace(**{k: f(x) if callable(f) else x.a(*f) for k, f in fields.items()})


def additive(x, dq="E", dk="E"):
    return dict(score="additive", w_query=x.a(dq, "F"), w_key=x.a(dk, "F"), v=x.a("F"))


def t_additive(torch, q, k, v=None, *, w_query, w_key, v_param=None, **_):
    """The additive score v . tanh(q W_q + k W_k), and attention over it."""
    s = torch.tanh((q @ w_query)[..., :, None, :] + (k @ w_key)[..., None, :, :]) @ v_param
    w = t_softmax(torch, s)
    return s, w @ (k if v is None else v), w


def t_linear(torch, q, k, v, causal=False, feature_map="elu", projection=None, eps=1e-6):
    """attnc.linear_attention's quadratic form: phi(Q) phi(K)^T (causally
    masked), each row over its sum + eps."""

    def phi(x):
        if feature_map == "elu":
            return torch.nn.functional.elu(x) + 1
        e = x.shape[-1]
        xs = x * (e**-0.25 if e else 1.0)
        return torch.exp(xs @ projection.T - 0.5 * (xs * xs).sum(-1, keepdim=True)) / projection.shape[0] ** 0.5

    a = phi(q) @ phi(k).transpose(-1, -2)
    if causal:
        a = a * torch.ones(a.shape[-2:], dtype=a.dtype).tril()
    return (a @ v) / (a.sum(-1, keepdim=True) + eps)


def t_linear_module(torch, m):
    """attnc.nn.LinearAttention in torch ops: t_linear between the projections."""

    def run(p, query, key, value, is_causal=False):
        def heads(x):
            return x.reshape(x.shape[0], x.shape[1], m.num_heads, m.head_dim).transpose(1, 2)

        q, k, v = (
            heads(torch.nn.functional.linear(x, p[f"{n}.weight"], p[f"{n}.bias"]))
            for x, n in ((query, "q_proj"), (key, "k_proj"), (value, "v_proj"))
        )
        w = None if m.projection is None else torch.tensor(m.projection, dtype=torch.float64)
        out = t_linear(torch, q, k, v, is_causal, m.feature_map, w, m.eps).transpose(1, 2)
        return torch.nn.functional.linear(
            out.reshape(out.shape[0], out.shape[1], m.embed_dim), p["out_proj.weight"], p["out_proj.bias"]
        )

    return run


def t_mha(torch, q, k, v, num_heads, w_in, b_in, w_out, b_out, need_weights=True, **kw):
    """torch's functional multi-head attention (sequence first), batch first here."""
    tr = lambda a: a.transpose(0, 1)  # noqa: E731
    out, w = torch.nn.functional.multi_head_attention_forward(
        tr(q),
        tr(k),
        tr(v),
        q.shape[-1],
        num_heads,
        w_in,
        b_in,
        None,
        None,
        False,
        0.0,
        w_out,
        b_out,
        need_weights=need_weights,
        **kw,
    )
    return tr(out), w


def t_ntm(name):
    """tests/reference/ntm_torch.py's op, with the shift index it needs."""

    def run(torch, *args):
        from reference import ntm_torch

        fn = getattr(ntm_torch, name)
        if name in ("shift", "address"):
            w = args[0] if name == "shift" else args[5]
            return fn(*args, ntm_torch.shift_index(w.shape[-1], args[1 if name == "shift" else 3].shape[-1]))
        return fn(*args)

    return run


def kv_cache(x):
    """A cache of x["B"] rows and x["H"] heads holding x["S"] appended keys and values."""
    cache = attnc.KVCache(x["B"], x["H"], capacity=8, head_dim=x["E"], dtype=x.dtype)
    cache.append(x.a("B", "H", "S", "E"), x.a("B", "H", "S", "E"))
    return cache


def kv_append(x):
    cache = attnc.KVCache(x["B"], x["H"], capacity=8, head_dim=x["E"], dtype=x.dtype)
    return (
        (lambda k, v: (cache.append(k, v), cache.keys, cache.values)[1:]),
        (x.a("B", "H", "S", "E"), x.a("B", "H", "S", "E")),
        {},
    )


def save_load(x):
    """attnc.save then attnc.load of a Linear(E, F): its state dict."""
    layer = nn.Linear(x["E"], x["F"], dtype=x.dtype, seed=0)

    def round_trip():
        with tempfile.TemporaryDirectory() as folder:
            attnc.save(f"{folder}/layer.npz", layer)
            return attnc.load(f"{folder}/layer.npz").state_dict()

    return round_trip, (), {}


def square_mask(n):
    return np.triu(np.ones((n, n), bool), k=1)  # torch's meaning: True = may not attend


TINY_LAYER = dict(dim_feedforward=8, dropout=0.0, batch_first=True)
ENC = lambda x: nn.TransformerEncoderLayer(x["E"], x["H"], **TINY_LAYER, dtype=x.dtype, seed=0)  # noqa: E731
DEC = lambda x: nn.TransformerDecoderLayer(x["E"], x["H"], **TINY_LAYER, dtype=x.dtype, seed=0)  # noqa: E731
TOKENS = lambda x: x.i(x["V"], "B", "T")  # noqa: E731
TOKENS2 = lambda x: x.i(2, "B", "T")  # noqa: E731  (BERT's token types)
SCORES = ["dot", "scaled_dot", "general", "cosine", "location", "gaussian"]
CAPTIONER = module(models.Captioner, "F", "V", 4, 6, 5)
DECOMPOSABLE = module(models.DecomposableAttention, "V", 4, 6, 3)
GPT = module(models.GPT, "V", 8, n_layer=1, n_head=2, n_embd=4, dropout=0.0)
GPT2 = module(  # GPT-2's shape (tanh GELU, tied head), as from_pretrained builds it
    models.GPT,
    "V",
    8,
    n_layer=1,
    n_head=2,
    n_embd=4,
    dropout=0.0,
    activation=nn.GELU(approximate="tanh"),
    tie_word_embeddings=True,
)
BERT = module(
    models.BERT, "V", 8, 2, num_hidden_layers=1, num_attention_heads=2, hidden_size=4, intermediate_size=8, dropout=0.0
)
NTM = module(models.NTM, "E", "F", controller_size=4, memory_slots=5, memory_width=3)
POINTER = module(models.PointerNet, 2, 6)
SNAIL = module(models.SNAIL, 2, 1, "E", embedding_size=4, filters=2, attention_sizes=((4, 2),))
SEQ2SEQ = module(models.Seq2Seq, "V", "V", 4, 6)
S2S_BATCH = batch(
    src=lambda x: x.i(x["V"], "B", "S"), src_lengths=lambda x: x.lengths("B", x["S"]), tgt_in=TOKENS, tgt_out=TOKENS
)
S2S_TRANSFORMER = module(
    models.Seq2SeqTransformer,
    "V",
    "V",
    d_model=4,
    nhead=2,
    num_encoder_layers=1,
    num_decoder_layers=1,
    dim_feedforward=8,
    dropout=0.0,
)
SCORE_PARAMS = dict(general=lambda x: dict(weight=x.a("E", "E")), location=lambda x: dict(weight=x.a("E", "S")))


CASES = [
    # ---- attnc: the attention family
    *[
        Case(
            "attnc.score",
            lambda x, kind=kind: call(
                attnc.score,
                x.a("B", "T", "E"),
                x.a("B", "S", "E"),
                score=kind,
                **SCORE_PARAMS.get(kind, lambda x: {})(x),
            ),
            "BTS",
        )
        for kind in SCORES
    ],
    Case(
        "attnc.score",
        lambda x: call(attnc.score, x.a("B", "T", "E"), x.a("B", "S", "E"), score="scaled_dot"),
        "E",
        torch=lambda torch, q, k, score: q @ k.transpose(-1, -2),
    ),  # E = 0: 0 at any scale
    Case(
        "attnc.score",
        lambda x: call(attnc.score, x.a("B", "T", "E"), x.a("B", "S", "E"), **additive(x)),
        "BTSEF",
        torch=lambda torch, q, k, score, v, **w: t_additive(torch, q, k, v_param=v, **w)[0],
    ),
    Case(
        "attnc.attention",
        lambda x: call(
            attnc.attention,
            x.a("B", "T", "E"),
            x.a("B", "S", "E"),
            x.a("B", "S", "F"),
            score="scaled_dot",
            mask=x.mask("B", "T", "S"),
        ),
        "BTSEF",
        torch=t_attention,
    ),
    Case(
        "attnc.attention",
        lambda x: call(attnc.attention, x.a("B", "T", "E"), x.a("B", "S", "E"), x.a("B", "S", "C"), **additive(x)),
        "BTSEFC",
        torch=lambda torch, q, k, vals, score, v, **w: t_additive(torch, q, k, vals, v_param=v, **w)[1:],
    ),
    Case(
        "attnc.attention",
        lambda x: call(
            attnc.attention, x.a("B", "T", "E"), x.a("B", "S", "E"), key_lengths=x.lengths("B", x["S"]), causal=True
        ),
        "BTS",
    ),
    Case(
        "attnc.hard_attention",
        lambda x: call(attnc.hard_attention, x.a("B", "T", "E"), x.a("B", "S", "E"), x.a("B", "S", "F")),
        "BTS",
    ),
    Case(
        "attnc.hard_attention",
        lambda x: call(
            attnc.hard_attention, x.a("B", "T", "E"), x.a("B", "S", "E"), mode="sample", seed=0, **additive(x)
        ),
        "BTS",
    ),
    Case(
        "attnc.local_attention",
        lambda x: call(attnc.local_attention, x.a("B", "T", "E"), x.a("B", "S", "E"), x.a("B", "S", "F"), window=1.5),
        "BTS",
        free=(2,),
    ),
    Case(
        "attnc.local_attention",
        lambda x: call(
            attnc.local_attention,
            x.a("B", "T", "E"),
            x.a("B", "S", "E"),
            window=1.5,
            mode="predictive",
            w_p=x.a("E", "F"),
            v_p=x.a("F"),
            **additive(x),
        ),
        "BTS",
        free=(2,),
    ),
    Case(
        "attnc.kernel_regression",
        lambda x: call(attnc.kernel_regression, x.a("T", "E"), x.a("S", "E"), x.a("S", "F"), bandwidth=x.pos()),
        "TSEF",
        torch=t_kernel_regression,
    ),
    Case(
        "attnc.softmax",
        lambda x: call(attnc.softmax, x.a("B", "T", "S"), mask=x.mask("B", "T", "S")),
        "BTS",
        torch=lambda torch, s, mask: t_softmax(torch, s.masked_fill(~mask, float("-inf"))),
    ),
    Case(
        "attnc.softmax",
        lambda x: call(attnc.softmax, x.a("B", "T", "S"), key_lengths=x.lengths("B", x["S"]), causal=True),
        "BTS",
    ),
    Case(
        "attnc.scaled_dot_product_attention",
        lambda x: call(
            attnc.scaled_dot_product_attention,
            x.a("B", "H", "T", "E"),
            x.a("B", "H", "S", "E"),
            x.a("B", "H", "S", "F"),
            attn_mask=x.a("T", "S"),
        ),
        "BHTSEF",
        torch=lambda torch, q, k, v, attn_mask: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask
        ),
    ),
    Case(
        "attnc.scaled_dot_product_attention",
        lambda x: call(
            attnc.scaled_dot_product_attention,
            x.a("B", "H", "T", "E"),
            x.a("B", 1, "S", "E"),
            x.a("B", 1, "S", "F"),
            is_causal=True,
            enable_gqa=True,
            return_weights=True,
        ),
        "BHTSEF",
        torch=t_sdpa_weights,
    ),
    Case(
        "attnc.multi_head_attention",
        lambda x: call(
            attnc.multi_head_attention,
            x.a("B", "T", "E"),
            x.a("B", "S", "E"),
            x.a("B", "S", "E"),
            x["H"],
            x.a(3 * x["E"], "E"),
            x.a(3 * x["E"]),
            x.a("E", "E"),
            x.a("E"),
            need_weights=False,
        ),
        "BTSE",
        torch=t_mha,
    ),
    Case(
        "attnc.multi_head_attention",
        lambda x: call(
            attnc.multi_head_attention,
            x.a("B", "T", "E"),
            x.a("B", "S", "E"),
            x.a("B", "S", "E"),
            x["H"],
            x.a(3 * x["E"], "E"),
            x.a(3 * x["E"]),
            x.a("E", "E"),
            x.a("E"),
        ),
        "BTS",
        torch=t_mha,
    ),  # E = 0 with the weights: torch divides by 0 (ZeroDivisionError); attnc below
    Case(
        "attnc.multi_head_attention",
        lambda x: call(
            attnc.multi_head_attention,
            x.a("B", "T", "E"),
            x.a("B", "S", "E"),
            x.a("B", "S", "E"),
            1,
            x.a(3 * x["E"], "E"),
            x.a(3 * x["E"]),
            x.a("E", "E"),
            x.a("E"),
        ),
        "E",
        free=(1,),
    ),  # uniform weights (every score 0), an empty output
    # ---- linear attention: elu + 1 and FAVOR+ features (S = 0: no key, zeros)
    Case(
        "attnc.linear_attention",
        lambda x: call(
            attnc.linear_attention, x.a("B", "H", "T", "E"), x.a("B", "H", "S", "E"), x.a("B", "H", "S", "F")
        ),
        "BHTSEF",
        torch=t_linear,
    ),
    Case(
        "attnc.linear_attention",
        lambda x: call(
            attnc.linear_attention,
            x.a("B", "H", "T", "E"),
            x.a("B", "H", "T", "E"),
            x.a("B", "H", "T", "F"),
            causal=True,
            feature_map="favor+",
            projection=x.a("M", "E"),
        ),
        "BHTEFM",
        torch=t_linear,
    ),
    Case(
        "attnc.performer_projection",
        lambda x: call(attnc.performer_projection, x["M"], x["E"], seed=0, dtype=x.dtype),
        "ME",
        grad=False,
        zeros=False,
    ),
    Case(
        "attnc.LinearAttentionState.step",
        lambda x: call(
            attnc.LinearAttentionState().step, x.a("B", "H", "T", "E"), x.a("B", "H", "T", "E"), x.a("B", "H", "T", "F")
        ),
        "BHTEF",
        grad=False,
        torch=lambda torch, q, k, v: t_linear(torch, q, k, v, causal=True),
    ),
    Case("attnc.KVCache", lambda x: call(lambda: (lambda c: (c.keys, c.values))(kv_cache(x))), "BHSE", grad=False),
    Case("attnc.KVCache.append", kv_append, "BHSE", grad=False),
    Case(
        "attnc.KVCache.attend",
        lambda x: call(kv_cache(x).attend, x.a("B", "H", "T", "E"), return_weights=True),
        "BHTE",
        free=(1,),
    ),  # T <= S: the queries are the last T cached positions; E = 0: uniform weights
    Case("attnc.save", save_load, "EF", grad=False),
    # ---- attnc.nn: functions
    Case(
        "attnc.nn.linear",
        lambda x: call(nn.linear, x.a("B", "E"), x.a("F", "E"), x.a("F")),
        "BEF",
        torch=lambda torch, *a: torch.nn.functional.linear(*a),
    ),
    Case(
        "attnc.nn.layer_norm",
        lambda x: call(nn.layer_norm, x.a("B", "T", "E"), x["E"], x.a("E"), x.a("E")),
        "BTE",
        torch=lambda torch, i, n, w, b: torch.nn.functional.layer_norm(i, (n,), w, b),
    ),
    Case("attnc.nn.relu", lambda x: call(nn.relu, x.a("B", "E")), "BE", torch=lambda torch, i: torch.relu(i)),
    Case(
        "attnc.nn.gelu",
        lambda x: call(nn.gelu, x.a("B", "E"), "tanh"),
        "BE",
        torch=lambda torch, i, approximate: torch.nn.functional.gelu(i, approximate=approximate),
    ),
    Case("attnc.nn.relu_dropout", lambda x: call(nn.relu_dropout, x.a("B", "E"), 0.5, seed=0), "BE"),
    Case(
        "attnc.nn.gated_activation",
        lambda x: call(nn.gated_activation, x.a("B", "E"), x.a("B", "E")),
        "BE",
        torch=lambda torch, a, b: torch.tanh(a) * torch.sigmoid(b),
    ),
    Case(
        "attnc.nn.log_softmax",
        lambda x: call(nn.log_softmax, x.a("B", "T", "E")),
        "BT",
        torch=lambda torch, i: torch.log_softmax(i, -1),
    ),
    Case(
        "attnc.nn.embedding",
        lambda x: call(nn.embedding, x.i(x["V"], "B", "T"), x.a("V", "E")),
        "BTE",
        torch=lambda torch, i, w: torch.nn.functional.embedding(i, w),
    ),
    Case(
        "attnc.nn.cross_entropy",
        lambda x: call(nn.cross_entropy, x.a("B", "C"), x.i(x["C"], "B"), reduction="sum"),
        "B",
        torch=lambda torch, i, t, reduction: torch.nn.functional.cross_entropy(i, t, reduction=reduction),
    ),
    Case("attnc.nn.cross_entropy", lambda x: call(nn.cross_entropy, x.a("B", "C"), x.i(x["C"], "B")), "B"),
    Case(
        "attnc.nn.sinusoidal_encoding",
        lambda x: call(nn.sinusoidal_encoding, x["T"], x["E"], x.dtype),
        "TE",
        grad=False,
    ),
    Case(
        "attnc.nn.attention_pool",
        lambda x: call(nn.attention_pool, x.a("B", "T", "E"), x.a("F", "E"), x.a("F"), x.a("F")),
        "BTEF",
        torch=t_pool,
    ),
    Case(
        "attnc.nn.conv1d",
        lambda x: call(nn.conv1d, x.a("B", "C", "T"), x.a("F", "C", 2), x.a("F")),
        "BC",
        torch=lambda torch, *a: t_conv("conv1d", *a),
    ),
    Case(
        "attnc.nn.conv2d",
        lambda x: call(nn.conv2d, x.a("B", "C", "T", "S"), x.a("F", "C", 2, 2), x.a("F"), padding=1),
        "BC",
        torch=lambda torch, *a, padding: t_conv("conv2d", *a, padding=padding),
    ),
    Case(
        "attnc.nn.decode",
        lambda x: call(
            nn.decode, [ENC(x)], x.a("V", "E"), x.a(8, "E"), x.a("V", "E"), x.i(x["V"], "B", 2), 3, beam_size=2
        ),
        "B",
        grad=False,
        decodes=0,
    ),
    # ---- attnc.nn: modules
    Case("attnc.nn.Linear", on(module(nn.Linear, "E", "F"), ("B", "E")), "BEF", torch=t_torch_module("Linear")),
    Case(
        "attnc.nn.LayerNorm", on(module(nn.LayerNorm, "E"), ("B", "T", "E")), "BTE", torch=t_torch_module("LayerNorm")
    ),
    Case("attnc.nn.ReLU", on(module(nn.ReLU), ("B", "E")), "BE", torch=t_torch_module("ReLU")),
    Case("attnc.nn.GELU", on(module(nn.GELU), ("B", "E")), "BE", torch=t_torch_module("GELU")),
    Case("attnc.nn.Embedding", on(module(nn.Embedding, "V", "E"), TOKENS), "BTE", torch=t_torch_module("Embedding")),
    Case(
        "attnc.nn.LSTM",
        on(module(nn.LSTM, "E", "F", num_layers=2, bidirectional=True), ("B", "T", "E")),
        "B",
        refuse="TE",
        torch=t_torch_module("LSTM"),
    ),
    Case(
        "attnc.nn.LSTM", on(module(nn.LSTM, "E", "F"), ("B", "T", "E"), lengths=lambda x: x.lengths("B", x["T"])), "B"
    ),
    Case(
        "attnc.nn.GRU",
        on(module(nn.GRU, "E", "F", num_layers=2), ("B", "T", "E")),
        "B",
        refuse="TE",
        torch=t_torch_module("GRU"),
    ),
    Case("attnc.nn.LSTMCell", on(module(nn.LSTMCell, "E", "F"), ("B", "E")), "BE", torch=t_torch_module("LSTMCell")),
    Case("attnc.nn.GRUCell", on(module(nn.GRUCell, "E", "F"), ("B", "E")), "BE", torch=t_torch_module("GRUCell")),
    Case("attnc.nn.LSTMN", on(module(nn.LSTMN, "E", "F"), ("B", "T", "E")), "BT"),
    Case("attnc.nn.LSTMN", on(module(nn.LSTMN, "E", "F"), ("B", "T", "E")), "E", zeros=False),  # h from the bias
    Case("attnc.nn.Conv1d", on(module(nn.Conv1d, "C", "F", 2), ("B", "C", "T")), "BC", torch=t_conv_module("conv1d")),
    Case(
        "attnc.nn.Conv2d",
        on(module(nn.Conv2d, "C", "F", 2, padding=1), ("B", "C", "T", "S")),
        "BC",
        torch=t_conv_module("conv2d"),
    ),
    Case(
        "attnc.nn.CausalConv1d",
        on(module(nn.CausalConv1d, "C", "F"), ("B", "C", "T")),
        "BTC",
        torch=t_conv_module("conv1d", causal=True),
    ),
    Case("attnc.nn.DenseBlock", on(module(nn.DenseBlock, "C", "F"), ("B", "C", "T")), "BT"),
    Case("attnc.nn.DenseBlock", on(module(nn.DenseBlock, "C", "F"), ("B", "C", "T")), "C", zeros=False),
    Case("attnc.nn.TCBlock", on(module(nn.TCBlock, "C", 4, "F"), ("B", "C", "T")), "BT"),
    Case("attnc.nn.TCBlock", on(module(nn.TCBlock, "C", 4, "F"), ("B", "C", "T")), "C", zeros=False),
    Case("attnc.nn.AttentionBlock", on(module(nn.AttentionBlock, "C", "K", "F"), ("B", "T", "C")), "BT"),
    Case("attnc.nn.AttentionBlock", on(module(nn.AttentionBlock, "C", "K", "F"), ("B", "T", "C")), "C", zeros=False),
    Case(
        "attnc.nn.AttentionPooling",
        on(module(nn.AttentionPooling, "E", "F"), ("B", "T", "E")),
        "BTEF",
        torch=lambda torch, m: lambda p, h: t_pool(torch, h, p["weight"], p["bias"], p["v"]),
    ),
    Case("attnc.nn.SelfAttention2d", on(module(nn.SelfAttention2d, 8, reduction=4), ("B", 8, "T", "S")), "BTS"),
    Case(
        "attnc.nn.rotary_embedding",
        lambda x: call(nn.rotary_embedding, x.a("B", "H", "T", 4), 1, interleaved=True),
        "BHT",  # (zero-width features: tests/test_rotary.py; an odd width cannot turn in pairs)
    ),
    Case("attnc.nn.RotaryEmbedding", on(module(nn.RotaryEmbedding, 4), ("B", "T", 4)), "BT"),
    Case(
        "attnc.nn.DifferentialAttention",
        on(module(nn.DifferentialAttention, "E", "H"), ("B", "T", "E"), is_causal=True),
        "BT",
    ),
    Case(
        "attnc.nn.MultiheadLatentAttention",
        on(module(nn.MultiheadLatentAttention, "E", "H", 3, qk_rope_head_dim=2), ("B", "T", "E")),
        "BT",
    ),
    Case(
        "attnc.nn.LatentCache",
        lambda x: call(
            lambda h: (lambda c: (module(nn.MultiheadLatentAttention, "E", "H", 3)(x)(h, cache=c), c.latent))(
                nn.LatentCache()
            ),
            x.a("B", "T", "E"),
        ),
        "BT",
        grad=False,
    ),
    Case(
        "attnc.nn.LinearAttention",
        on(
            module(nn.LinearAttention, "E", "H", feature_map="favor+"),
            ("B", "T", "E"),
            ("B", "T", "E"),
            ("B", "T", "E"),
            is_causal=True,
        ),
        "BT",
        refuse="E",
        torch=t_linear_module,
    ),
    Case(
        "attnc.nn.LinearAttention",
        on(module(nn.LinearAttention, "E", "H"), ("B", "T", "E"), ("B", "S", "E"), ("B", "S", "E")),
        "BTS",
        refuse="E",
        torch=t_linear_module,
    ),
    Case(
        "attnc.nn.MultiheadAttention",
        on(module(nn.MultiheadAttention, "E", "H"), ("B", "T", "E"), ("B", "S", "E"), ("B", "S", "E")),
        "BTS",
        refuse="E",
        torch=t_torch_module("MultiheadAttention"),
    ),
    Case(
        "attnc.nn.TransformerEncoderLayer",
        on(ENC, ("B", "T", "E")),
        "BT",
        refuse="E",
        torch=t_torch_module("TransformerEncoderLayer"),
    ),
    Case(
        "attnc.nn.TransformerDecoderLayer",
        on(DEC, ("B", "T", "E"), ("B", "S", "E")),
        "BT",
        refuse="E",
        torch=t_torch_module("TransformerDecoderLayer"),
    ),
    Case("attnc.nn.TransformerEncoder", on(lambda x: nn.TransformerEncoder(ENC(x), 2), ("B", "T", "E")), "BT"),
    Case(
        "attnc.nn.TransformerDecoder",
        on(lambda x: nn.TransformerDecoder(DEC(x), 2), ("B", "T", "E"), ("B", "S", "E")),
        "BT",
    ),
    Case(
        "attnc.nn.Transformer",
        on(
            module(nn.Transformer, "E", "H", 1, 1, 8, dropout=0.0),
            ("B", "S", "E"),
            ("B", "T", "E"),
            tgt_mask=lambda x: square_mask(x["T"]),
        ),
        "BT",
    ),
    # ---- attnc.ntm
    Case(
        "attnc.ntm.content_weights",
        lambda x: call(ntm.content_weights, x.a("B", "H", "M"), x.a("B", "N", "M"), x.pos("B", "H")),
        "BHM",
        torch=t_ntm("content_weights"),
    ),
    Case(
        "attnc.ntm.interpolate",
        lambda x: call(ntm.interpolate, x.simplex("B", "H", "N"), x.simplex("B", "H", "N"), x.pos("B", "H") / 2),
        "BHN",
        torch=lambda torch, wc, wp, g: g[..., None] * wc + (1 - g[..., None]) * wp,
    ),
    Case(
        "attnc.ntm.shift",
        lambda x: call(ntm.shift, x.simplex("B", "H", "N"), x.simplex("B", "H", 3)),
        "BH",
        torch=t_ntm("shift"),
    ),
    Case(
        "attnc.ntm.sharpen",
        lambda x: call(ntm.sharpen, x.simplex("B", "H", "N"), 1 + x.pos("B", "H")),
        "BH",
        torch=t_ntm("sharpen"),
    ),
    Case(
        "attnc.ntm.address",
        lambda x: call(
            ntm.address,
            x.a("B", "H", "M"),
            x.pos("B", "H"),
            x.pos("B", "H") / 2,
            x.simplex("B", "H", 3),
            1 + x.pos("B", "H"),
            x.simplex("B", "H", "N"),
            x.a("B", "N", "M"),
        ),
        "BH",
        torch=t_ntm("address"),
    ),
    Case(
        "attnc.ntm.read",
        lambda x: call(ntm.read, x.a("B", "N", "M"), x.simplex("B", "H", "N")),
        "BHNM",
        torch=t_ntm("read"),
    ),
    Case(
        "attnc.ntm.write",
        lambda x: call(
            ntm.write, x.a("B", "N", "M"), x.simplex("B", "H", "N"), x.pos("B", "H", "M") / 2, x.a("B", "H", "M")
        ),
        "BHNM",
        torch=t_ntm("write"),
    ),
    # ---- attnc.models (sizes tiny; every loss over an empty batch is 0, every gradient zeros)
    Case("attnc.models.Captioner", on(CAPTIONER, ("B", "N", "F"), TOKENS), "BT"),
    Case(
        "attnc.models.Captioner.loss_and_grad",
        method(CAPTIONER, "loss_and_grad", batch(features=("B", "N", "F"), tgt_in=TOKENS, tgt_out=TOKENS)),
        "B",
        grad=False,
    ),  # T = 0 is not empty: the doubly stochastic penalty asks every cell for attention
    Case(
        "attnc.models.Captioner.generate",
        method(lambda x: CAPTIONER(x).eval(), "generate", ("B", "N", "F"), max_len=3, bos=1, beam_size=2),
        "B",
        grad=False,
        decodes=0,
    ),
    Case("attnc.models.DecomposableAttention", on(DECOMPOSABLE, TOKENS, lambda x: x.i(x["V"], "B", "S")), "B"),
    Case(
        "attnc.models.DecomposableAttention",
        on(DECOMPOSABLE, TOKENS, lambda x: x.i(x["V"], "B", "S")),
        "TS",
        zeros=False,
    ),  # an empty sentence is still classified
    Case(
        "attnc.models.DecomposableAttention.align",
        method(DECOMPOSABLE, "align", TOKENS, lambda x: x.i(x["V"], "B", "S")),
        "BTS",
        grad=False,
        zeros=False,
    ),
    Case(
        "attnc.models.DecomposableAttention.loss_and_grad",
        method(
            DECOMPOSABLE,
            "loss_and_grad",
            batch(
                premise=TOKENS,
                hypothesis=lambda x: x.i(x["V"], "B", "S"),
                premise_lengths=lambda x: x.lengths("B", x["T"]),
                hypothesis_lengths=lambda x: x.lengths("B", x["S"]),
                labels=lambda x: x.i(3, "B"),
            ),
        ),
        "B",
        grad=False,
    ),
    Case("attnc.models.GPT", on(GPT, TOKENS), "BT"),
    Case("attnc.models.GPT", on(GPT2, TOKENS), "BT"),
    Case(
        "attnc.models.BERT",
        on(BERT, TOKENS, attention_mask=lambda x: x.mask("B", "T").astype(np.int64), token_type_ids=TOKENS2),
        "BT",
    ),
    Case("attnc.models.BERTPooler", on(module(models.BERTPooler, "E"), ("B", "T", "E")), "BE", refuse="T"),
    Case("attnc.models.GPT.loss_and_grads", method(GPT, "loss_and_grads", TOKENS, TOKENS), "BT", grad=False),
    Case(
        "attnc.models.GPT.generate",
        method(GPT, "generate", lambda x: x.i(x["V"], "B", 2), 3, beam_size=2),
        "B",
        grad=False,
        decodes=0,
    ),
    Case("attnc.models.NTM", on(NTM, ("B", "T", "E")), "BT"),
    Case(
        "attnc.models.NTM.loss_and_grad",
        method(
            NTM,
            "loss_and_grad",
            batch(inputs=("B", "T", "E"), targets=("B", "T", "F"), mask=lambda x: x.mask("B", "T")),
        ),
        "BT",
        grad=False,
    ),
    Case("attnc.models.PointerNet", on(POINTER, ("B", "N", 2), lambda x: x.perm("B", "N")), "B"),
    Case(
        "attnc.models.PointerNet.loss_and_grad",
        method(POINTER, "loss_and_grad", batch(inputs=("B", "N", 2), targets=lambda x: x.perm("B", "N"))),
        "B",
        grad=False,
    ),
    *[
        Case(
            "attnc.models.PointerNet.generate",
            method(POINTER, "generate", ("B", "N", 2), beam_size=2, constraint=constraint),
            "B",
            grad=False,
            decodes=int(closing),
        )
        for constraint, closing in (("permutation", False), ("tour", True))
    ],  # a hull's width depends on the points
    Case("attnc.models.SNAIL", on(SNAIL, ("B", 3, "E"), lambda x: x.i(2, "B", 2)), "B"),
    Case(
        "attnc.models.SNAIL.loss_and_grad",
        method(
            SNAIL,
            "loss_and_grad",
            batch(features=("B", 3, "E"), labels=lambda x: x.i(2, "B", 2), targets=lambda x: x.i(2, "B")),
        ),
        "B",
        grad=False,
    ),
    Case(
        "attnc.models.SNAIL.predict", method(SNAIL, "predict", ("B", 3, "E"), lambda x: x.i(2, "B", 2)), "B", grad=False
    ),
    Case(
        "attnc.models.Seq2Seq",
        on(SEQ2SEQ, lambda x: x.i(x["V"], "B", "S"), TOKENS, lambda x: x.lengths("B", x["S"])),
        "BT",
    ),
    Case("attnc.models.Seq2Seq.loss_and_grad", method(SEQ2SEQ, "loss_and_grad", S2S_BATCH), "BT", grad=False),
    Case("attnc.models.Seq2Seq.loss", method(SEQ2SEQ, "loss", S2S_BATCH), "BT", grad=False),
    Case(
        "attnc.models.Seq2Seq.generate",
        method(
            SEQ2SEQ,
            "generate",
            lambda x: x.i(x["V"], "B", "S"),
            lambda x: x.lengths("B", x["S"]),
            3,
            beam_size=2,
            eos=None,
        ),
        "B",
        grad=False,
        decodes=0,
    ),
    Case("attnc.models.Seq2SeqTransformer", on(S2S_TRANSFORMER, lambda x: x.i(x["V"], "B", "S"), TOKENS), "BT"),
    Case(
        "attnc.models.Seq2SeqTransformer.loss_and_grads",
        method(S2S_TRANSFORMER, "loss_and_grads", lambda x: x.i(x["V"], "B", "S"), TOKENS, TOKENS),
        "BT",
        grad=False,
    ),
    Case(
        "attnc.models.Seq2SeqTransformer.generate",
        method(S2S_TRANSFORMER, "generate", lambda x: x.i(x["V"], "B", "S"), 3, 1, beam_size=2),
        "B",
        grad=False,
        decodes=0,
    ),
    # ---- attnc.attribution: (B, T, T) from every layer's (B, H, T, T); no heads to fuse is refused
    *[
        Case(
            f"attnc.attribution.{fn.__name__}",
            lambda x, fn=fn: call(fn, [x.pos("B", "H", "T", "T") for _ in range(2)]),
            "BT",
            grad=False,
            refuse="H",
            zeros=False,
        )
        for fn in (attribution.rollout, attribution.flow)
    ],
    Case(
        "attnc.attribution.relevance",
        lambda x: call(attribution.relevance, *([x.a("B", "H", "T", "T") for _ in range(2)] for _ in range(2))),
        "BT",
        grad=False,
        refuse="H",
        zeros=False,
    ),
    Case(
        "attnc.attribution.attention_gradients",
        lambda x: call(
            attribution.attention_gradients, nn.TransformerEncoder(ENC(x), 2), x.a("B", "T", "E"), np.ones_like
        ),
        "BT",
        grad=False,
        zeros=False,
    ),
    Case(  # the options of today's models: empty inputs still give empty results
        "attnc.scaled_dot_product_attention",
        lambda x: call(
            attnc.scaled_dot_product_attention,
            x.a("B", "H", "T", "E"),
            x.a("B", "H", "S", "E"),
            x.a("B", "H", "S", "F"),
            alibi_slopes=x.pos("H"),
            window=(1, 0),
            softcap=1.5,
            sinks=x.a("H"),
            return_weights=True,
        ),
        "BHTSEF",
        zeros=False,  # E = 0: every score 0, the output, weights and gradients not
    ),
    Case("attnc.alibi_slopes", lambda x: call(attnc.alibi_slopes, x["H"], x.dtype), "H", grad=False),
]

# Public names with no batch, sequence or feature dim to empty, and why.
EXCLUDED = {
    "attnc.vjp": "the harness itself: every differentiable case runs through it",
    "attnc.FileFormatError": "an exception class",
    "attnc.load": "covered with attnc.save (a round trip of zero-width parameters)",
    "attnc.blas_info": "configuration: no arrays",
    "attnc.show_config": "configuration: no arrays",
    "attnc.get_num_threads": "configuration: no arrays",
    "attnc.set_num_threads": "configuration: no arrays",
    "attnc.pretrained": "takes a model's name, no arrays (tests/test_pretrained.py scores every shipped model)",
    "attnc.KVCache.reset": "no arrays: forgets the cached steps",
    "attnc.LinearAttentionState": "its constructor takes no arrays; its step has a case",
    "attnc.nn.Module": "the base class; its methods handle parameters, not batches",
    "attnc.nn.Transformer.generate_square_subsequent_mask": "a mask of the given size, no batch",
    "attnc.nn.LSTMN.backward_from": "the backward attnc.vjp(LSTMN) runs: covered by LSTMN's case",
    "attnc.models.NTMTrace": "a named tuple of results",
    "attnc.models.PointerOutput": "a named tuple of results",
    "attnc.models.from_pretrained": "takes a checkpoint, no arrays; the models it returns (GPT, BERT) have cases here",
    "attnc.nn.DifferentialAttention.lambda_full": "a number from the parameters, no batch",
    "attnc.nn.MultiheadLatentAttention.absorbed_weights": "the parameters folded together, no batch",
}

# --------------------------------------------------------------------------- the harness


def flat(out, numbers=True) -> list:
    """The arrays of a result in order: tuples, lists and dicts (by key) opened,
    None dropped, Python numbers (a loss) as 0-d arrays (or dropped)."""
    if out is None:
        return []
    if isinstance(out, dict):
        return [a for k in sorted(out) for a in flat(out[k], numbers)]
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in flat(o, numbers)]
    return [np.asarray(out)] if numbers or isinstance(out, np.ndarray) else []


def cotangent(out, rng):
    """A random cotangent for every float array of out (None for the rest),
    in out's structure."""
    if isinstance(out, (tuple, list)):
        return tuple(cotangent(o, rng) for o in out)
    if isinstance(out, np.ndarray) and out.dtype.kind == "f":
        return rng.standard_normal(out.shape).astype(out.dtype)
    return None


def run(case, x):
    """The case's call at sizes x: (fn, args, kwargs, outputs, gradients and the
    cotangents that gave them, both None without attnc.vjp)."""
    fn, args, kwargs = case.call(x)
    if not case.grad:
        return fn, args, kwargs, fn(*args, **kwargs), None, None
    outputs, pullback = attnc.vjp(fn, *args, **kwargs)
    rng = np.random.default_rng(1)
    cots = cotangent(outputs, rng) if isinstance(outputs, tuple) else (cotangent(outputs, rng),)
    return fn, args, kwargs, outputs, pullback(*cots), cots


def arguments(fn, args, kwargs) -> dict:
    """The call's arguments by name (a function's **params opened)."""
    sig = inspect.signature(fn.forward if isinstance(fn, nn.Module) else fn)
    bound = sig.bind(*args, **kwargs)
    named = {}
    for name, value in bound.arguments.items():
        if sig.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def expected_grad_names(fn, named) -> set:
    names = {n for n, v in named.items() if isinstance(v, np.ndarray) and v.dtype.kind == "f"}
    if isinstance(fn, nn.Module):
        names |= set(fn.state_dict())
    return names


def to_torch(torch, v):
    if isinstance(v, np.ndarray):
        if v.dtype.kind == "f":
            return torch.tensor(v, dtype=torch.float64, requires_grad=True)
        return torch.from_numpy(v.copy())
    if isinstance(v, (tuple, list)):
        return type(v)(to_torch(torch, e) for e in v)
    if isinstance(v, dict):
        return {k: to_torch(torch, e) for k, e in v.items()}
    return v


def torch_run(torch, case, fn, args, kwargs, cots):
    """torch's outputs and gradients (by attnc's names) for the same call."""
    targs, tkwargs = to_torch(torch, args), to_torch(torch, kwargs)
    params = {}
    if isinstance(fn, nn.Module):
        made = case.torch(torch, fn)
        params = {n: torch.tensor(p, dtype=torch.float64, requires_grad=True) for n, p in fn.state_dict().items()}
        if isinstance(made, torch.nn.Module):
            out = torch.func.functional_call(made.double(), params, targs, tkwargs)
        else:
            out = made(params, *targs, **tkwargs)
    else:
        out = case.torch(torch, *targs, **tkwargs)
    outs = flat_torch(out)
    loss = sum(
        (o * torch.from_numpy(c.astype(np.float64))).sum()
        for o, c in zip(outs, flat(cots))
        if c is not None and o.dtype.is_floating_point
    )
    leaves = {**{n: t for n, t in arguments(fn, targs, tkwargs).items() if isinstance(t, torch.Tensor)}, **params}
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        loss.backward()
    grads = {
        n: (t.grad if t.grad is not None else torch.zeros_like(t)).numpy()
        for n, t in leaves.items()
        if t.dtype.is_floating_point
    }
    return [o.detach().numpy() for o in outs], grads


def flat_torch(out) -> list:
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in flat_torch(o)]
    return [out]


def close(got, want, rel, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    assert np.isfinite(got).all(), f"{what}: not finite"
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=rel * scale, err_msg=what)


def extrapolated(case, dtype, letter) -> list:
    """The output shapes at letter = 0 from those at 2 and 3 (affine in each size)."""
    s2, s3 = ([o.shape for o in flat(run_forward(case, Dims(dtype, **{letter: n})))] for n in (2, 3))
    assert len(s2) == len(s3)
    return [tuple(3 * a - 2 * b for a, b in zip(p, q)) for p, q in zip(s2, s3)]


def run_forward(case, x):
    fn, args, kwargs = case.call(x)
    return fn(*args, **kwargs)


PARAMS = [
    pytest.param(case, letter, dt, id=f"{case.name}[{i}]-{letter}=0-{dt_id}")
    for i, case in enumerate(CASES)
    for letter in case.zero + case.refuse
    for dt, dt_id in zip(DTYPES, DT_IDS)
]


@pytest.mark.parametrize("case,letter,dtype", PARAMS)
def test_zero_size(case, letter, dtype, request):
    x = Dims(dtype, **{letter: 0})
    if letter in case.refuse:
        with pytest.raises(ValueError):
            run(case, x)
        return
    fn, args, kwargs, outputs, grads, cots = run(case, x)
    got = flat(outputs)
    for o in flat(outputs, numbers=False):
        if o.dtype.kind == "f":
            assert o.dtype == x.dtype, f"an output has dtype {o.dtype}"
    named = arguments(fn, args, kwargs)
    if grads is not None:
        like = {**named, **(fn.state_dict() if isinstance(fn, nn.Module) else {})}
        owner = getattr(fn, "__self__", None)  # a bound method's object: KVCache.attend's cached keys
        extra = set(grads) - expected_grad_names(fn, named)
        assert expected_grad_names(fn, named) <= set(grads) and all(hasattr(owner, n) for n in extra), sorted(grads)
        like.update({n: getattr(owner, n) for n in extra})
        for n, g in grads.items():
            assert g.shape == like[n].shape and g.dtype == x.dtype, (n, g.shape, g.dtype)
    rel = REL[dtype]
    if case.torch is not None:
        torch = request.getfixturevalue("torch")
        want, want_grads = torch_run(torch, case, fn, args, kwargs, cots)
        assert len(got) == len(want), (len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            close(g, w, rel, f"output {i}")
        for n, g in (grads or {}).items():
            close(g, want_grads[n], rel, f"gradient of {n}")
        return
    shapes = extrapolated(case, dtype, letter)
    if case.decodes is not None and letter == "B":
        shapes = [s[:1] + (case.decodes,) + s[2:] for s in shapes]
    assert [o.shape for o in got] == shapes
    for i, o in enumerate(got):
        if o.dtype.kind == "f":
            assert np.isfinite(o).all(), f"output {i} is not finite"
            assert not case.zeros or i in case.free or not o.any(), f"output {i} is not zero"
    for n, g in (grads or {}).items():
        assert np.isfinite(g).all(), f"the gradient of {n} is not finite"
        assert not case.zeros or not g.any(), f"the gradient of {n} is not zero"


# --------------------------------------------------------------------------- coverage


def public_names() -> set:
    """attnc's public functions, classes and their public methods, by qualified
    name (an alias counts as the function it names)."""
    names = set()
    for mod in (attnc, nn, ntm, models, attribution):
        for n in mod.__all__:
            obj = getattr(mod, n)
            if inspect.ismodule(obj):
                continue
            names.add(f"{mod.__name__}.{n}")
            if not inspect.isclass(obj):
                continue
            for m, member in vars(obj).items():
                if m.startswith("_") or (not callable(member) and not isinstance(member, staticmethod)):
                    continue
                if issubclass(obj, nn.Module) and hasattr(nn.Module, m):
                    continue  # forward (calling the module), extra_repr, state_dict, ...
                fn = member.__func__ if isinstance(member, staticmethod) else member
                names.add(f"{mod.__name__}.{fn.__qualname__}")
    return names


def test_every_public_name_has_a_case():
    covered = {case.name for case in CASES}
    public = public_names()
    assert not covered & set(EXCLUDED), "a name both covered and excluded"
    assert covered <= public, f"cases of names that are not public: {sorted(covered - public)}"
    assert set(EXCLUDED) <= public, f"stale exclusions: {sorted(set(EXCLUDED) - public)}"
    missing = public - covered - set(EXCLUDED)
    assert not missing, f"public names without a case in CASES (or a reason in EXCLUDED): {sorted(missing)}"


# --------------------------------------------------------------------------- zero-width heads


def test_sdpa_zero_width_heads_float_mask_gradient(torch, fd_check):
    """float32 attention with E = 0, a float attn_mask and 32 or more query rows
    per kv head, where the AVX2 and AVX-512 builds pack K and V for their tile
    kernels: an empty K (nothing to pack) once left V packed, mixing two ways
    of computing the products, and the mask's gradient was off by about 1.5
    (the baseline build, which packs nothing, was right)."""
    from reference import sdpa_ref

    x = Dims(np.float32)
    L, S = 40, 7  # 40 query rows per kv head: past the packing's threshold of 32
    q, k, v = x.a(2, 2, L, 0), x.a(2, 2, S, 0), x.a(2, 2, S, 5)
    mask = x.a(L, S)
    out, pullback = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, attn_mask=mask)
    dout = x.a(*out.shape)
    grads = pullback(dout)
    tq, tk, tv, tm = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v, mask))
    t_out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
    t_out.backward(torch.from_numpy(dout.astype(np.float64)))
    close(out, t_out.detach().numpy(), REL[np.float32], "output")
    for name, t in (("attn_mask", tm), ("value", tv)):
        close(grads[name], t.grad.numpy(), REL[np.float32], f"gradient of {name}")
    # and against central differences of the NumPy float64 reference (E = 0: any scale)
    fd_check(
        lambda **kw: sdpa_ref.scaled_dot_product_attention(**kw, scale=1.0),
        dict(query=q, key=k, value=v, attn_mask=mask),
        [dout.astype(np.float64)],
        grads,
        wrt=["attn_mask", "value"],
        rtol=0,
        atol=1e-5,
    )


# --------------------------------------------------------------------------- misaligned empty buffers


def misaligned_empty(shape, dtype):
    """An empty array at an address no float is aligned to (NumPy calls an
    empty array aligned wherever it starts): a zero-size slice of bytes."""
    a = np.ndarray(shape, dtype, buffer=bytearray(16), offset=1)
    assert a.size == 0 and a.ctypes.data % np.dtype(dtype).itemsize
    return a


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize(
    "name,call",
    [
        ("nn.linear", lambda e, x: nn.linear(e(0, 4), x.a(3, 4), x.a(3))),
        ("nn.relu", lambda e, x: nn.relu(e(0, 4))),
        ("nn.layer_norm", lambda e, x: nn.layer_norm(e(0, 4), 4)),
        ("softmax", lambda e, x: attnc.softmax(e(0, 2, 3))),
        ("attention", lambda e, x: attnc.attention(e(0, 2, 4), e(0, 3, 4))),
        (
            "scaled_dot_product_attention",
            lambda e, x: attnc.scaled_dot_product_attention(e(0, 1, 2, 4), e(0, 1, 3, 4), e(0, 1, 3, 4)),
        ),
    ],
)
def test_misaligned_empty_buffers_are_empty_inputs(name, call, dtype):
    """Nothing is read from an empty buffer, so where it starts does not matter
    (it was refused as "not aligned"): the results are an aligned empty
    input's."""
    x = Dims(dtype)
    aligned = call(lambda *s: np.zeros(s, dtype), Dims(dtype))
    got = call(lambda *s: misaligned_empty(s, dtype), x)
    assert [a.shape for a in flat(got)] == [a.shape for a in flat(aligned)]
    for g, a in zip(flat(got), flat(aligned)):
        np.testing.assert_array_equal(g, a)
