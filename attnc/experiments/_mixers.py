"""One small causal language model for issue 30's experiments (mqar,
length_extrapolation, streaming), whose attention mixer and positions are
settings: token embeddings (+ a position table for "learned" and
"sinusoidal") -> num_layers pre-norm blocks [LayerNorm -> mixer -> residual
-> LayerNorm -> ReLU MLP -> residual] -> LayerNorm -> a linear head.

Mixers (``MIXERS``): "softmax" (attnc.scaled_dot_product_attention, causal),
"window" (the same with ``window=(window - 1, 0)``: each query sees its last
``window`` keys), "sigmoid" (``activation="sigmoid"``: Ramapuram et al.
2024), "linear" (attnc.linear_attention, elu + 1), "performer" (FAVOR+,
a fixed random projection drawn from ``projection_seed``) and
"differential" (attnc.nn.DifferentialAttention). Positions (``POSITIONS``):
"sinusoidal" and "learned" tables added to the token embeddings, "rope"
(attnc.nn.rotary_embedding on queries and keys, for linear and performer
before the feature map), "alibi" (sdpa's ``alibi_slopes``, the paper's
slopes; softmax-type mixers only) and "none". ``sink_logits=True`` gives
every attention layer a learned logit per head that joins each row's
softmax normaliser (sdpa's ``sinks``; softmax and window only).

The forward and backward are composed in Python over attnc's
differentiable functions (each call's pullback kept by _Tape), so
``attnc.vjp(model, ids)`` gives every parameter's gradient.
"""

from __future__ import annotations

import numpy as np

import attnc
from attnc import nn
from attnc._args import child_seeds
from attnc.attention.linear import default_num_features
from attnc.models._common import _Tape
from attnc.nn.module import ModuleList

MIXERS = ("softmax", "window", "sigmoid", "linear", "performer", "differential")
POSITIONS = ("sinusoidal", "learned", "rope", "alibi", "none")
_SDPA = ("softmax", "window", "sigmoid")  # the mixers that run attnc.scaled_dot_product_attention
_TABLES = ("sinusoidal", "learned")  # the positions added to the embeddings


def _heads(x, H):
    """(B, L, H * E) -> (B, H, L, E)."""
    B, L, D = x.shape
    return np.ascontiguousarray(x.reshape(B, L, H, D // H).transpose(0, 2, 1, 3))


def _merge(x):
    """(B, H, L, E) -> (B, L, H * E)."""
    B, H, L, E = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(B, L, H * E)


class MixerAttention(nn.Module):
    """Causal self-attention of one kind (module docstring): a joint
    query-key-value projection ``qkv`` (3 d_model, d_model), the kernel,
    ``out`` (d_model, d_model); ``sinks`` (num_heads,) with sink_logits.

    ``forward(x, start=0)``: x (B, L, d_model) -> (B, L, d_model); RoPE
    counts positions from ``start``. ``attnc.vjp(module, x)`` gives "x" and
    the parameters' gradients. ``project(x)`` -> the heads' (q, k, v) before
    any position, and ``attend(q, k, v, q_pos, k_pos)`` the kernel over them
    (for decoding with a cache of one's own).

    Example
    -------
    >>> m = MixerAttention(8, 2, "window", "rope", window=3, seed=0)
    >>> m(np.ones((1, 5, 8), np.float32)).shape
    (1, 5, 8)
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        mixer: str = "softmax",
        positions: str = "rope",
        window: int = 16,
        sink_logits: bool = False,
        projection_seed: int = 0,
        *,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__(dtype)
        if mixer not in _SDPA + ("linear", "performer"):
            raise ValueError(f"mixer must be one of {_SDPA + ('linear', 'performer')}, got {mixer!r}")
        if positions == "alibi" and mixer not in _SDPA:
            raise ValueError(f"positions='alibi' needs a softmax-type mixer {_SDPA}, got {mixer!r}")
        if sink_logits and mixer not in ("softmax", "window"):
            raise ValueError(f"sink_logits needs mixer 'softmax' or 'window', got {mixer!r}")
        if d_model % num_heads or (d_model // num_heads) % 2:
            raise ValueError(f"d_model ({d_model}) must split into num_heads ({num_heads}) heads of even width")
        self.num_heads, self.mixer, self.positions, self.window = num_heads, mixer, positions, int(window)
        seeds = child_seeds(seed, 2)
        self.qkv = nn.Linear(d_model, 3 * d_model, dtype=dtype, seed=seeds[0])
        self.out = nn.Linear(d_model, d_model, dtype=dtype, seed=seeds[1])
        self._init_parameter("sinks", (num_heads,), np.zeros if sink_logits else None)
        head_dim = d_model // num_heads
        self._projection = (
            attnc.performer_projection(default_num_features(head_dim), head_dim, seed=projection_seed)
            if mixer == "performer"
            else None
        )

    def project(self, x, tape=None):
        """The heads' queries, keys and values (B, H, L, E), before positions."""
        tape = tape or _Tape(False)
        qkv = tape("qkv", nn.linear, x, self.qkv.weight, self.qkv.bias)
        return tuple(_heads(part, self.num_heads) for part in np.split(qkv, 3, axis=-1))

    def attend(self, q, k, v, q_start=0, k_positions=None, tape=None, causal=True, weights=False):
        """The kernel: RoPE at q_start.. and k_positions (default q_start..),
        then the mixer; causal=False: every key is in every query's past (a
        cache); weights: (output, weights) of a softmax-type mixer."""
        tape = tape or _Tape(False)
        if self.positions == "rope":
            q = tape("rope_q", nn.rotary_embedding, q, q_start)
            k = tape("rope_k", nn.rotary_embedding, k, q_start if k_positions is None else k_positions)
        if self.mixer in ("linear", "performer"):
            projection = None if self._projection is None else self._projection.astype(self.dtype)
            feature_map = "elu" if self.mixer == "linear" else "favor+"
            return tape(
                "kernel", attnc.linear_attention, q, k, v, causal=causal, feature_map=feature_map, projection=projection
            )
        options = {}
        if self.positions == "alibi":
            options["alibi_slopes"] = attnc.alibi_slopes(self.num_heads, self.dtype)
        if self.mixer == "window":
            options["window"] = (self.window - 1, 0)
        if self.mixer == "sigmoid":
            options["activation"] = "sigmoid"
        if self.sinks is not None:
            options["sinks"] = self.sinks
        return tape(
            "kernel", attnc.scaled_dot_product_attention, q, k, v, is_causal=causal, return_weights=weights, **options
        )

    def weights(self, x, start=0):
        """(B, H, L, L) float64: each query's weights over the keys. For
        linear and performer the kernel's implied ones, phi(q_i) . phi(k_j)
        over the row's sum (computed in float64 from the features; eps
        left out); sigmoid's need not sum to 1, nor sink_logits' rows."""
        q, k, v = self.project(x)
        if self.mixer in _SDPA:
            return self.attend(q, k, v, start, weights=True)[1].astype(np.float64)
        if self.positions == "rope":
            q, k = nn.rotary_embedding(q, start), nn.rotary_embedding(k, start)
        q, k = q.astype(np.float64), k.astype(np.float64)
        if self.mixer == "linear":
            phi_q, phi_k = (np.where(t > 0, t + 1, np.exp(t)) for t in (q, k))
        else:
            w, scale = self._projection, q.shape[-1] ** -0.25
            phi_q, phi_k = (np.exp((t * scale) @ w.T - ((t * scale) ** 2).sum(-1, keepdims=True) / 2) for t in (q, k))
        a = np.tril(phi_q @ phi_k.swapaxes(-1, -2))
        return a / a.sum(-1, keepdims=True)

    def _run(self, grad, x, start):
        tape = _Tape(grad)
        q, k, v = self.project(x, tape)
        o = self.attend(q, k, v, start, tape=tape)
        return tape("out", nn.linear, _merge(o), self.out.weight, self.out.bias), tape.pullbacks

    def forward(self, x, start=0):
        return self._run(False, x, start)[0]

    def _vjp_forward(self, x, start=0):
        return self._run(True, x, start)

    def _vjp_backward(self, pullbacks, cotangents):
        g = pullbacks["out"](cotangents[0])
        grads = {"out.weight": g["weight"], "out.bias": g["bias"]}
        g = pullbacks["kernel"](_heads(g["input"], self.num_heads))
        if "sinks" in g:
            grads["sinks"] = g["sinks"]
        dq, dk, dv = g["query"], g["key"], g["value"]
        if self.positions == "rope":
            dq, dk = pullbacks["rope_q"](dq)["x"], pullbacks["rope_k"](dk)["x"]
        g = pullbacks["qkv"](np.concatenate([_merge(dq), _merge(dk), _merge(dv)], axis=-1))
        grads.update({"qkv.weight": g["weight"], "qkv.bias": g["bias"], "x": g["input"]})
        return grads


class MixerBlock(nn.Module):
    """A pre-norm block: x + mixer(norm1(x)), then h + fc2(relu(fc1(norm2(h)))).

    ``attn`` is a MixerAttention or, for mixer="differential", an
    attnc.nn.DifferentialAttention (num_heads differential heads; RoPE inside
    it for positions="rope"). ``forward(x, start=0)`` -> (B, L, d_model).

    Example
    -------
    >>> MixerBlock(8, 2, "differential", "rope", seed=0)(np.ones((1, 4, 8), np.float32)).shape
    (1, 4, 8)
    """

    attn: MixerAttention | nn.DifferentialAttention

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        mixer: str = "softmax",
        positions: str = "rope",
        window: int = 16,
        sink_logits: bool = False,
        dim_feedforward: int | None = None,
        layer_index: int = 1,
        projection_seed: int = 0,
        mlp: bool = True,
        *,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__(dtype)
        seeds = child_seeds(seed, 3)
        self.mixer, self.positions, self.has_mlp = mixer, positions, bool(mlp)
        self.norm1 = nn.LayerNorm(d_model, dtype=dtype)
        if mixer == "differential":
            if positions == "alibi" or sink_logits:
                raise ValueError("the differential mixer takes neither positions='alibi' nor sink_logits")
            rotary = nn.RotaryEmbedding(d_model // (2 * num_heads), dtype=dtype) if positions == "rope" else None
            self.attn = nn.DifferentialAttention(
                d_model, num_heads, layer_index, rotary=rotary, dtype=dtype, seed=seeds[0]
            )
        else:
            self.attn = MixerAttention(
                d_model, num_heads, mixer, positions, window, sink_logits, projection_seed, dtype=dtype, seed=seeds[0]
            )
        if self.has_mlp:
            self.norm2 = nn.LayerNorm(d_model, dtype=dtype)
            ff = dim_feedforward or 4 * d_model
            self.fc1 = nn.Linear(d_model, ff, dtype=dtype, seed=seeds[1])
            self.fc2 = nn.Linear(ff, d_model, dtype=dtype, seed=seeds[2])

    def _run(self, grad, x, start):
        tape = _Tape(grad)
        n = self.norm1
        h = tape("norm1", nn.layer_norm, x, n.normalized_shape, n.weight, n.bias, n.eps)
        if self.mixer == "differential":
            if start and self.positions == "rope":
                raise ValueError("the differential mixer counts positions from 0 (start must be 0)")
            h = x + tape("attn", self.attn, h, is_causal=True)
        else:
            h = x + tape("attn", self.attn, h, start)
        return h + self.mlp(h, tape), tape.pullbacks

    def mlp(self, h, tape=None):
        """fc2(relu(fc1(norm2(h)))), without the residual (zeros without an MLP)."""
        if not self.has_mlp:
            return np.zeros_like(h)
        tape = tape or _Tape(False)
        n = self.norm2
        y = tape("norm2", nn.layer_norm, h, n.normalized_shape, n.weight, n.bias, n.eps)
        y = tape("relu", nn.relu, tape("fc1", nn.linear, y, self.fc1.weight, self.fc1.bias))
        return tape("fc2", nn.linear, y, self.fc2.weight, self.fc2.bias)

    def forward(self, x, start=0):
        return self._run(False, x, start)[0]

    def _vjp_forward(self, x, start=0):
        return self._run(True, x, start)

    def _vjp_backward(self, pullbacks, cotangents):
        dh = cotangents[0]
        grads: dict = {}
        if self.has_mlp:
            g = pullbacks["fc2"](dh)
            grads.update({"fc2.weight": g["weight"], "fc2.bias": g["bias"]})
            g = pullbacks["fc1"](pullbacks["relu"](g["input"])["input"])
            grads.update({"fc1.weight": g["weight"], "fc1.bias": g["bias"]})
            g = pullbacks["norm2"](g["input"])
            grads.update({"norm2.weight": g["weight"], "norm2.bias": g["bias"]})
            dh = dh + g["input"]
        g = pullbacks["attn"](dh)
        dattn = g.pop("x")
        grads.update({f"attn.{k}": v for k, v in g.items()})
        g = pullbacks["norm1"](dattn)
        grads.update({"norm1.weight": g["weight"], "norm1.bias": g["bias"]})
        grads["x"] = dh + g["input"]
        return grads


class MixerLM(nn.Module):
    """The experiments' causal language model (module docstring).

    Parameters
    ----------
    vocab_size : int, V
    max_len : int, the learned position table's rows (positions "learned";
        the longest sequence it can read); other positions have no limit
    d_model, num_layers, num_heads : ints (d_model / num_heads even; for
        "differential", d_model / (2 num_heads) even)
    mixer : one of MIXERS; positions : one of POSITIONS
    window : int >= 1, the keys a "window" query sees (itself included)
    sink_logits : bool, a learned sink logit per head and layer
    dim_feedforward : int, the MLP's width (default 4 d_model)
    projection_seed : int, Performer's random projection
    mlp : bool, False for attention-only blocks (no norm2 -> MLP -> residual)
    dtype, seed : the parameters' dtype and initialisation

    ``forward(ids, start=0)``: ids (B, L) int -> logits (B, L, V); positions
    count from ``start``. ``loss_and_grads((inputs, targets))`` -> (mean
    cross-entropy over targets != -100, gradients by state_dict name).
    ``token_losses(inputs, targets)`` -> (B, L) float64 cross-entropy.

    Example
    -------
    >>> lm = MixerLM(10, 16, d_model=8, num_heads=2, mixer="linear", positions="learned", seed=0)
    >>> lm(np.zeros((2, 5), np.int64)).shape
    (2, 5, 10)
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int = 64,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 2,
        mixer: str = "softmax",
        positions: str = "rope",
        window: int = 16,
        sink_logits: bool = False,
        dim_feedforward: int | None = None,
        projection_seed: int = 0,
        mlp: bool = True,
        *,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__(dtype)
        if mixer not in MIXERS:
            raise ValueError(f"mixer must be one of {MIXERS}, got {mixer!r}")
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        seeds = child_seeds(seed, num_layers + 3)
        self.max_len, self.mixer, self.positions = int(max_len), mixer, positions
        self.tokens = nn.Embedding(vocab_size, d_model, dtype=dtype, seed=seeds[0])
        if positions == "learned":
            self.pos = nn.Embedding(max_len, d_model, dtype=dtype, seed=seeds[1])
        self.blocks = ModuleList(
            [
                MixerBlock(
                    d_model,
                    num_heads,
                    mixer,
                    positions,
                    window,
                    sink_logits,
                    dim_feedforward,
                    i + 1,
                    projection_seed,
                    mlp,
                    dtype=dtype,
                    seed=seeds[3 + i],
                )
                for i in range(num_layers)
            ],
            dtype=dtype,
        )
        self.norm = nn.LayerNorm(d_model, dtype=dtype)
        self.head = nn.Linear(d_model, vocab_size, dtype=dtype, seed=seeds[2])

    def embed(self, ids, start=0, tape=None):
        """Token embeddings plus the position table's rows start .. start + L - 1."""
        tape = tape or _Tape(False)
        x = tape("tokens", nn.embedding, ids, self.tokens.weight)
        L = ids.shape[1]
        if self.positions == "learned":
            if start + L > self.max_len:
                raise ValueError(f"learned positions: {start + L} positions exceed max_len {self.max_len}")
            x = x + tape("pos", nn.embedding, np.arange(start, start + L), self.pos.weight)
        elif self.positions == "sinusoidal":
            x = x + nn.sinusoidal_encoding(start + L, x.shape[-1], self.dtype)[start:]
        return x

    def _run(self, grad, ids, start):
        tape = _Tape(grad)
        x = self.embed(ids, start, tape)
        for i, block in enumerate(self.blocks):
            x = tape(f"blocks.{i}", block, x, start)
        n = self.norm
        x = tape("norm", nn.layer_norm, x, n.normalized_shape, n.weight, n.bias, n.eps)
        return tape("head", nn.linear, x, self.head.weight, self.head.bias), tape.pullbacks

    def forward(self, ids, start=0):
        return self._run(False, np.asarray(ids), start)[0]

    def _vjp_forward(self, ids, start=0):
        return self._run(True, np.asarray(ids), start)

    def _vjp_backward(self, pullbacks, cotangents):
        g = pullbacks["head"](cotangents[0])
        grads = {"head.weight": g["weight"], "head.bias": g["bias"]}
        g = pullbacks["norm"](g["input"])
        grads.update({"norm.weight": g["weight"], "norm.bias": g["bias"]})
        dx = g["input"]
        for i in reversed(range(len(self.blocks))):
            g = pullbacks[f"blocks.{i}"](dx)
            dx = g.pop("x")
            grads.update({f"blocks.{i}.{k}": v for k, v in g.items()})
        grads["tokens.weight"] = pullbacks["tokens"](dx)["weight"]
        if "pos" in pullbacks:
            grads["pos.weight"] = pullbacks["pos"](np.ascontiguousarray(dx.sum(axis=0)))["weight"]
        return grads

    def loss_and_grads(self, batch):
        inputs, targets = batch
        logits, pullback = attnc.vjp(self, inputs)
        V = logits.shape[-1]
        loss, ce = attnc.vjp(nn.cross_entropy, logits.reshape(-1, V), targets.reshape(-1))
        dlogits = ce(np.ones((), self.dtype))["input"].reshape(logits.shape)
        return float(loss), pullback(dlogits)

    def attention_maps(self, ids, start=0):
        """[(B, H, L, L) float64 per layer]: every query's weights over the
        keys (MixerAttention.weights; differential: its map A, rows summing to 1 - lambda)."""
        x, maps = self.embed(np.asarray(ids), start), []
        for block in self.blocks:
            n = block.norm1
            h = nn.layer_norm(x, n.normalized_shape, n.weight, n.bias, n.eps)
            if self.mixer == "differential":
                maps.append(block.attn(h, is_causal=True, need_weights=True)[1].astype(np.float64))
            else:
                maps.append(block.attn.weights(h, start))
            x = block(x, start)
        return maps

    def token_losses(self, inputs, targets, start=0):
        """(B, L) float64: each target's cross-entropy (nan where it is -100)."""
        return token_losses(self(inputs, start), targets)


def token_losses(logits, targets):
    """(B, L) float64 cross-entropy of logits (B, L, V) at targets (B, L); nan at -100."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1))
    t = np.where(targets < 0, 0, targets)
    out = lse - np.take_along_axis(z, t[..., None], axis=-1)[..., 0]
    return np.where(targets < 0, np.nan, out)


def train_lm(model, cfg, batches, args, desc, rngs=None, evaluate=None):
    """AdamW with a warm-up and a cosine decay, gradients clipped to norm 1,
    on the run's training loop (a phase of its own, named desc)."""
    from . import _common

    opt = attnc.optim.AdamW(model, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    sched = attnc.optim.LambdaLR(opt, _common.warmup_cosine(cfg["warmup"], cfg["steps"], cfg["final_lr"]))
    return _common.train(
        model,
        opt,
        model.loss_and_grads,
        batches,
        cfg["steps"],
        scheduler=sched,
        clip=1.0,
        desc=desc,
        disable_progress=args.no_progress,
        run=args.run,
        rngs=rngs,
        evaluate=evaluate,
    )
