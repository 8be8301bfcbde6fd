"""attnc.nn.LSTM, GRU, LSTMCell, GRUCell: torch's recurrent modules (batch
first), the whole sequence loop in C (csrc/ops/rnn/rnn.c), forward and backward
through time."""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from .. import _core
from .._args import as_array, float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from .module import Module, _settings

_LSTM, _GRU = 0, 1


class _RNNBase(Module, abstract=True):
    _mode = _LSTM
    _min_input_size = 1  # torch's LSTM and GRU refuse input_size 0 (its cells take it)

    def _build(self, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, seed):
        self.input_size = int_arg("input_size", input_size, self._min_input_size)
        self.hidden_size = int_arg("hidden_size", hidden_size, 1)
        self.num_layers = int_arg("num_layers", num_layers, 1)
        if self.num_layers > 64:
            raise ValueError(f"num_layers must be <= 64, got {num_layers}")
        if not batch_first:
            raise ValueError("attnc's modules are always batch first (batch_first=True)")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout <= 1:
            raise ValueError(f"dropout must be a number in [0, 1], got {dropout!r}")
        self.bias, self.dropout, self.bidirectional = bool(bias), float(dropout), bool(bidirectional)
        self.batch_first = True
        rng = np.random.default_rng(seed)
        H, G = self.hidden_size, (4 if self._mode == _LSTM else 3) * self.hidden_size
        k = 1 / math.sqrt(H)
        uniform = lambda shape: rng.uniform(-k, k, shape)  # noqa: E731
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else self._directions * H
            for suffix in self._suffixes:
                self._init_parameter(f"weight_ih_l{layer}{suffix}", (G, width), uniform)
                self._init_parameter(f"weight_hh_l{layer}{suffix}", (G, H), uniform)
                if bias:
                    self._init_parameter(f"bias_ih_l{layer}{suffix}", (G,), uniform)
                    self._init_parameter(f"bias_hh_l{layer}{suffix}", (G,), uniform)
        self._rng = rng

    @property
    def _directions(self):
        return 2 if self.bidirectional else 1

    @property
    def _suffixes(self):
        return ("", "_reverse") if self.bidirectional else ("",)

    @functools.cached_property
    def _weight_names(self):
        """Per layer and direction, attnc_rnn_weights' members -> parameter names (fixed at construction)."""
        return [
            {w: f"{w}_l{layer}{suffix}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
            for layer in range(self.num_layers)
            for suffix in self._suffixes
        ]

    def _weights(self):
        """The weights as the C layer takes them: a dict per layer and direction, None for an absent bias."""
        p = self._parameters
        return [{w: p.get(n) for w, n in names.items()} for names in self._weight_names]

    def _rnn_config(self, training):
        """attnc_rnn_config by member: the keywords of the C calls."""
        dropout = self.dropout if training and self.num_layers > 1 else 0.0
        seed = int(self._rng.integers(2**63)) if dropout else 0
        return dict(
            mode=self._mode,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            bidirectional=self.bidirectional,
            dropout=dropout,
            seed=seed,
        )

    # -- arguments -----------------------------------------------------------------
    def _prepare(self, input, hx, lengths):
        x = float_array(input, "input")
        same_dtype(self.dtype, input=x)
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ValueError(
                f"input has shape {shape_str(x.shape)}, expected (B, T, {self.input_size}) (batch "
                f"first) or (T, {self.input_size})"
            )
        batched = x.ndim == 3
        x = np.ascontiguousarray(x if batched else x[None])
        B, T, _ = x.shape
        if T == 0:
            raise ValueError("input has no time steps (T = 0)")
        states = self._states(hx, B, batched)
        lens = None
        if lengths is not None:
            if not batched:
                raise ValueError("lengths needs a batched (B, T, I) input")
            lens = as_array(lengths, "lengths")
            if lens.dtype.kind not in "iu":
                raise TypeError(f"lengths must be integers, got dtype {lens.dtype}")
            lens = np.ascontiguousarray(lens, dtype=np.int64)  # its shape (B,) and range [1, T]: checked in C
        return x, states, lens, batched

    def _state(self, a, name, B, batched):
        shape = (self.num_layers * self._directions, B, self.hidden_size)
        s = float_array(a, name)
        same_dtype(self.dtype, **{name: s})
        want = shape if batched else (shape[0], shape[2])
        if s.shape != want:
            raise ValueError(f"{name} has shape {shape_str(s.shape)}, expected {shape_str(want)}")
        return np.ascontiguousarray(s if batched else s[:, None])

    # -- the C calls -------------------------------------------------------------------
    def _run(self, x, states, lens, keep):
        B, T, _ = x.shape
        DH, LD = self._directions * self.hidden_size, self.num_layers * self._directions
        config = self._rnn_config(self.training)
        out = np.empty((B, T, DH), x.dtype)
        h_n = np.empty((LD, B, self.hidden_size), x.dtype)
        c_n = np.empty_like(h_n) if self._mode == _LSTM else None
        saved = None
        if keep:
            saved = np.empty(_core.rnn_saved_size(**config, B=B, T=T, input_size=self.input_size), x.dtype)
        h0, c0 = states
        weights = self._weights()
        _core.rnn_forward(
            output=out, h_n=h_n, c_n=c_n, saved=saved, input=x, lengths=lens, h0=h0, c0=c0, weights=weights, **config
        )
        return out, h_n, c_n, (saved, x, lens, h0, c0, weights, config)

    def _backward(self, state, dout, dh_n, dc_n):
        saved, x, lens, h0, c0, weights, config = state
        grads = [{k: None if w is None else np.empty_like(w) for k, w in ws.items()} for ws in weights]
        dx = np.empty_like(x)
        dh0 = np.empty_like(h0) if h0 is not None else None
        dc0 = np.empty_like(c0) if c0 is not None else None
        ready = lambda a: None if a is None else np.ascontiguousarray(a, x.dtype)  # noqa: E731
        _core.rnn_backward(
            dinput=dx,
            dh0=dh0,
            dc0=dc0,
            grads=grads,
            doutput=ready(dout),
            dh_n=ready(dh_n),
            dc_n=ready(dc_n),
            saved=saved,
            input=x,
            lengths=lens,
            h0=h0,
            c0=c0,
            weights=weights,
            **config,
        )
        named = {}
        for names, gs in zip(self._weight_names, grads):
            named.update({names[k]: g for k, g in gs.items() if g is not None})
        return dx, dh0, dc0, named

    def extra_repr(self) -> str:
        return _settings(
            f"{self.input_size}, {self.hidden_size}",
            num_layers=(self.num_layers, 1),
            bias=(self.bias, True),
            batch_first=(True, False),  # torch's default; attnc's always
            dropout=(self.dropout, 0),
            bidirectional=(self.bidirectional, False),
        )


def _unbatch(a, batched, axis=0):
    return a if batched or a is None else np.take(a, 0, axis=axis)


class LSTM(_RNNBase):
    """``torch.nn.LSTM(input_size, hidden_size, num_layers=1, bias=True,
    batch_first=True, dropout=0.0, bidirectional=False)``, always batch first.

    Parameters
    ----------
    input_size : int, I
    hidden_size : int, H
    num_layers : int, stacked layers (each reads the previous one's output)
    bias : bool, whether there are the ``bias_*`` parameters
    batch_first : must be True (attnc's modules are batch first)
    dropout : float in [0, 1], on the outputs of every layer but the last (training mode only)
    bidirectional : bool, a second, reversed direction per layer (D = 2)
    proj_size : must be 0 (projections are not supported)
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (uniform in +-1/sqrt(H), as torch) and dropout

    ``forward(input, hx=None, *, lengths=None)``: input (B, T, I) or (T, I),
    the module's dtype; hx = (h0, c0), each (num_layers * D, B, H), or None
    (zeros); lengths (B,) ints in [1, T]: each row's valid prefix (padding is
    neither read nor written into the final state; outputs there are 0), as
    torch's packed sequences. Returns ``(output (B, T, D * H), (h_n, c_n))``,
    h_n and c_n (num_layers * D, B, H).
    ``attnc.vjp(lstm, input, hx, lengths=...)``: ``pullback(doutput, (dh_n,
    dc_n))`` gives "input", "h0", "c0" and every parameter's gradient.

    ``state_dict()`` (torch's names), for each layer k: ``weight_ih_l{k}``
    (4H, I for k = 0 else D H) with the gates i, f, g, o stacked,
    ``weight_hh_l{k}`` (4H, H), ``bias_ih_l{k}`` and ``bias_hh_l{k}`` (4H,),
    and the same with ``_reverse`` for the second direction.

    Example
    -------
    >>> lstm = attnc.nn.LSTM(8, 16, num_layers=2, bidirectional=True, seed=0)
    >>> out, (h, c) = lstm(np.random.rand(3, 5, 8).astype(np.float32), lengths=np.array([5, 2, 4]))
    >>> out.shape, h.shape, c.shape, float(abs(out[1, 2:]).sum())
    ((3, 5, 32), (4, 3, 16), (4, 3, 16), 0.0)
    >>> {k: v.shape for k, v in lstm.state_dict().items() if k.endswith("l1_reverse")}
    {'weight_ih_l1_reverse': (64, 32), 'weight_hh_l1_reverse': (64, 16), 'bias_ih_l1_reverse': (64,),
     'bias_hh_l1_reverse': (64,)}
    """

    _mode = _LSTM

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        if proj_size:
            raise ValueError("proj_size is not supported (LSTMs with projections are not in attnc)")
        self._build(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, seed)

    def _states(self, hx, B, batched):
        if hx is None:
            return None, None
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise TypeError("hx must be a tuple (h0, c0) for an LSTM")
        return self._state(hx[0], "h0", B, batched), self._state(hx[1], "c0", B, batched)

    def forward(
        self, input: ArrayLike, hx: tuple[ArrayLike, ArrayLike] | None = None, *, lengths: ArrayLike | None = None
    ) -> tuple[Array, tuple[Array, Array]]:
        x, states, lens, batched = self._prepare(input, hx, lengths)
        out, h_n, c_n, _ = self._run(x, states, lens, keep=False)
        return _unbatch(out, batched), (_unbatch(h_n, batched, 1), _unbatch(c_n, batched, 1))

    def _vjp_forward(self, input, hx=None, *, lengths=None):
        x, states, lens, batched = self._prepare(input, hx, lengths)
        out, h_n, c_n, state = self._run(x, states, lens, keep=True)
        outputs = (_unbatch(out, batched), (_unbatch(h_n, batched, 1), _unbatch(c_n, batched, 1)))
        return outputs, (self, state, batched, hx is not None)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        self, state, batched, has_hx = saved
        dout, dstates = cotangents
        dh_n, dc_n = dstates if dstates is not None else (None, None)
        if not batched:
            dout = None if dout is None else dout[None]
            dh_n = None if dh_n is None else dh_n[:, None]
            dc_n = None if dc_n is None else dc_n[:, None]
        dx, dh0, dc0, grads = self._backward(state, dout, dh_n, dc_n)
        grads["input"] = _unbatch(dx, batched)
        if has_hx:
            grads["h0"], grads["c0"] = _unbatch(dh0, batched, 1), _unbatch(dc0, batched, 1)
        return grads


class GRU(_RNNBase):
    """``torch.nn.GRU(input_size, hidden_size, num_layers=1, bias=True,
    batch_first=True, dropout=0.0, bidirectional=False)``, always batch first:
    gates r, z, n with torch's equations (n = tanh(W_in x + b_in + r (W_hn h +
    b_hn)), h' = (1 - z) n + z h).


    Parameters
    ----------
    input_size : int, I
    hidden_size : int, H
    num_layers : int, stacked layers (each reads the previous one's output)
    bias : bool, whether there are the ``bias_*`` parameters
    batch_first : must be True (attnc's modules are batch first)
    dropout : float in [0, 1], on the outputs of every layer but the last (training mode only)
    bidirectional : bool, a second, reversed direction per layer (D = 2)
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (uniform in +-1/sqrt(H), as torch) and dropout

    ``forward(input, hx=None, *, lengths=None)``: input (B, T, I) or (T, I),
    the module's dtype; hx = h0 (num_layers * D, B, H) or None (zeros);
    lengths (B,) ints in [1, T], each row's valid prefix, as in
    ``attnc.nn.LSTM``. Returns ``(output (B, T, D * H), h_n (num_layers * D,
    B, H))``. ``attnc.vjp``: ``pullback(doutput, dh_n)`` gives "input", "h0"
    and every parameter's gradient.

    ``state_dict()`` (torch's names), for each layer k: ``weight_ih_l{k}``
    (3H, I for k = 0 else D H) with the gates r, z, n stacked,
    ``weight_hh_l{k}`` (3H, H), ``bias_ih_l{k}`` and ``bias_hh_l{k}`` (3H,),
    and the same with ``_reverse`` for the second direction.

    Example
    -------
    >>> gru = attnc.nn.GRU(8, 16, seed=0)
    >>> out, h = gru(np.random.rand(3, 5, 8).astype(np.float32))
    >>> out.shape, h.shape, bool(np.array_equal(out[:, -1], h[0]))
    ((3, 5, 16), (1, 3, 16), True)
    >>> {k: v.shape for k, v in gru.state_dict().items()}
    {'weight_ih_l0': (48, 8), 'weight_hh_l0': (48, 16), 'bias_ih_l0': (48,), 'bias_hh_l0': (48,)}
    """

    _mode = _GRU

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        self._build(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, seed)

    def _states(self, hx, B, batched):
        return (None, None) if hx is None else (self._state(hx, "h0", B, batched), None)

    def forward(
        self, input: ArrayLike, hx: ArrayLike | None = None, *, lengths: ArrayLike | None = None
    ) -> tuple[Array, Array]:
        x, states, lens, batched = self._prepare(input, hx, lengths)
        out, h_n, _, _ = self._run(x, states, lens, keep=False)
        return _unbatch(out, batched), _unbatch(h_n, batched, 1)

    def _vjp_forward(self, input, hx=None, *, lengths=None):
        x, states, lens, batched = self._prepare(input, hx, lengths)
        out, h_n, _, state = self._run(x, states, lens, keep=True)
        return (_unbatch(out, batched), _unbatch(h_n, batched, 1)), (self, state, batched, hx is not None)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        self, state, batched, has_hx = saved
        dout, dh_n = cotangents
        if not batched:
            dout = None if dout is None else dout[None]
            dh_n = None if dh_n is None else dh_n[:, None]
        dx, dh0, _, grads = self._backward(state, dout, dh_n, None)
        grads["input"] = _unbatch(dx, batched)
        if has_hx:
            grads["h0"] = _unbatch(dh0, batched, 1)
        return grads


class _LSTMStep(LSTM, abstract=True):  # LSTMCell's layer, saved as the cell
    _min_input_size = 0


class _GRUStep(GRU, abstract=True):  # GRUCell's layer, saved as the cell
    _min_input_size = 0


class _CellBase(Module, abstract=True):
    """A cell is a one-layer, one-step recurrent layer: the same C kernels
    with T = 1, parameters without the ``_l0`` suffix. Its input_size may be
    0 (as torch's cells': the gates then come from h and the biases)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        layer = self._layer_class(input_size, hidden_size, bias=bias, dtype=dtype, seed=seed)
        object.__setattr__(self, "_layer", layer)
        self.input_size, self.hidden_size, self.bias = layer.input_size, layer.hidden_size, layer.bias
        for name, value in layer._parameters.items():  # shared, not copied (nor charged again by attnc.load)
            self._parameters[name.replace("_l0", "")] = value

    def _synced(self):
        """The inner one-layer module, holding this cell's current parameters."""
        for name in self._layer._parameters:
            self._layer._parameters[name] = self._parameters[name.replace("_l0", "")]
        object.__setattr__(self._layer, "_dtype", self.dtype)
        self._layer.training = self.training
        return self._layer

    def _prepare(self, input, hx):
        x = float_array(input, "input")
        if x.ndim not in (1, 2):
            raise ValueError(
                f"input has shape {shape_str(x.shape)}, expected (B, {self.input_size}) or ({self.input_size},)"
            )
        batched = x.ndim == 2
        x2 = x if batched else x[None]
        states = hx
        if hx is not None:
            parts = hx if isinstance(hx, (tuple, list)) else (hx,)
            for a, n in zip(parts, ("h", "c")):
                a = as_array(a, "hx")
                want = (x2.shape[0], self.hidden_size) if batched else (self.hidden_size,)
                if a.shape != want:
                    raise ValueError(f"hx's {n} has shape {shape_str(a.shape)}, expected {shape_str(want)}")
            parts = tuple(np.asarray(a)[None] if batched else np.asarray(a)[None, None] for a in parts)
            states = parts if isinstance(hx, (tuple, list)) else parts[0]
        return x2[:, None], states, batched

    def extra_repr(self) -> str:
        return _settings(f"{self.input_size}, {self.hidden_size}", bias=(self.bias, True))


def _cell_grads(grads, batched, has_hx, names):
    out = {k.replace("_l0", ""): v for k, v in grads.items() if k not in ("input", "h0", "c0")}
    out["input"] = grads["input"][:, 0] if batched else grads["input"][0, 0]
    if has_hx:
        for n in names:
            out[n] = grads[n][0] if batched else grads[n][0, 0]
    return out


class LSTMCell(_CellBase):
    """``torch.nn.LSTMCell(input_size, hidden_size, bias=True)``: one step of an LSTM.

    Parameters
    ----------
    input_size : int, I (may be 0, as torch's)
    hidden_size : int, H
    bias : bool, whether there are ``bias_ih`` and ``bias_hh``
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (uniform in +-1/sqrt(H), as torch)

    ``forward(input, hx=None)``: input (B, I) or (I,), the module's dtype;
    hx = (h, c), each (B, H) or (H,), or None (zeros) -> ``(h', c')``, each
    (B, H) or (H,). ``attnc.vjp(cell, input, hx)``: ``pullback(dh', dc')``
    gives "input", "h0", "c0" (the states' gradients) and the parameters'.

    ``state_dict()`` (torch's names): ``weight_ih`` (4H, I), ``weight_hh``
    (4H, H), ``bias_ih`` and ``bias_hh`` (4H,), gates i, f, g, o.

    Example
    -------
    >>> cell = attnc.nn.LSTMCell(8, 16, seed=0)
    >>> h, c = cell(np.random.rand(3, 8).astype(np.float32))
    >>> h, c = cell(np.random.rand(3, 8).astype(np.float32), (h, c))
    >>> h.shape, c.shape, h.dtype
    ((3, 16), (3, 16), dtype('float32'))
    >>> {k: v.shape for k, v in cell.state_dict().items()}
    {'weight_ih': (64, 8), 'weight_hh': (64, 16), 'bias_ih': (64,), 'bias_hh': (64,)}
    """

    _layer_class = _LSTMStep

    def forward(self, input: ArrayLike, hx: tuple[ArrayLike, ArrayLike] | None = None) -> tuple[Array, Array]:
        x, states, batched = self._prepare(input, hx)
        _, (h, c) = self._synced().forward(x, states)
        return (h[0], c[0]) if batched else (h[0, 0], c[0, 0])

    def _vjp_forward(self, input, hx=None):
        x, states, batched = self._prepare(input, hx)
        (_, (h, c)), saved = self._synced()._vjp_forward(x, states)
        return ((h[0], c[0]) if batched else (h[0, 0], c[0, 0])), (saved, batched, hx is not None)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        inner, batched, has_hx = saved
        dh, dc = cotangents
        lift = lambda a: None if a is None else (a[None] if batched else a[None, None])  # noqa: E731
        grads = LSTM._vjp_backward(inner, (None, (lift(dh), lift(dc))))
        return _cell_grads(grads, batched, has_hx, ("h0", "c0"))


class GRUCell(_CellBase):
    """``torch.nn.GRUCell(input_size, hidden_size, bias=True)``: one step of a GRU.

    Parameters
    ----------
    input_size : int, I (may be 0, as torch's)
    hidden_size : int, H
    bias : bool, whether there are ``bias_ih`` and ``bias_hh``
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (uniform in +-1/sqrt(H), as torch)

    ``forward(input, hx=None)``: input (B, I) or (I,), the module's dtype; hx
    (B, H) or (H,), or None (zeros) -> h' (B, H) or (H,). ``attnc.vjp(cell,
    input, hx)``: ``pullback(dh')`` gives "input", "h0" and the parameters'.

    ``state_dict()`` (torch's names): ``weight_ih`` (3H, I), ``weight_hh``
    (3H, H), ``bias_ih`` and ``bias_hh`` (3H,), gates r, z, n.

    Example
    -------
    >>> cell = attnc.nn.GRUCell(8, 16, seed=0)
    >>> h = cell(np.random.rand(3, 8).astype(np.float32))
    >>> cell(np.random.rand(3, 8).astype(np.float32), h).shape
    (3, 16)
    >>> {k: v.shape for k, v in cell.state_dict().items()}
    {'weight_ih': (48, 8), 'weight_hh': (48, 16), 'bias_ih': (48,), 'bias_hh': (48,)}
    """

    _layer_class = _GRUStep

    def forward(self, input: ArrayLike, hx: ArrayLike | None = None) -> Array:
        x, states, batched = self._prepare(input, hx)
        _, h = self._synced().forward(x, states)
        return h[0] if batched else h[0, 0]

    def _vjp_forward(self, input, hx=None):
        x, states, batched = self._prepare(input, hx)
        (_, h), saved = self._synced()._vjp_forward(x, states)
        return (h[0] if batched else h[0, 0]), (saved, batched, hx is not None)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        inner, batched, has_hx = saved
        (dh,) = cotangents
        lift = None if dh is None else (dh[None] if batched else dh[None, None])
        grads = GRU._vjp_backward(inner, (None, lift))
        return _cell_grads(grads, batched, has_hx, ("h0",))
