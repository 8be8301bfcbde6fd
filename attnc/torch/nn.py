"""torch.nn's attention modules with attnc's fused kernel inside.

Each class is a subclass of torch's: the same constructor arguments,
parameters (``torch.nn.Parameter``, initialised as torch initialises them),
``state_dict()`` keys and forward signature; only the attention runs in
attnc (``attnc.torch.multi_head_attention``, whose weights come from the
fused kernel, so ``need_weights=True`` costs no slow path). A model written
with ``torch.nn.MultiheadAttention`` switches by changing the import, and
loads the state_dicts torch's modules saved.

Differences from torch: with dropout, the returned weights are the
probabilities before dropout (torch returns them after); inputs are CPU
tensors, float32 or float64; the fused fast paths of torch's encoder
(nested tensors) are not taken.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor
from torch.nn.modules.transformer import _detect_is_causal_mask, _get_seq_len

from ..attention._spec import variant_options
from ..attention.sdpa import alibi_slopes
from ..nn import transformer as _c
from ._fused import multi_head_attention

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer", "Transformer"]


class MultiheadAttention(torch.nn.MultiheadAttention):
    """``torch.nn.MultiheadAttention`` computed by attnc's fused kernel.

    Constructor (embed_dim, num_heads, dropout=0.0, bias=True,
    add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None,
    batch_first=False, device=None, dtype=None), parameters and state_dict
    keys (in_proj_weight or q/k/v_proj_weight, in_proj_bias,
    out_proj.weight, out_proj.bias, bias_k, bias_v) are torch's. Keyword-only
    options of today's models, as attnc.nn.MultiheadAttention takes them:
    sinks=True (a learned ``sinks`` parameter (num_heads,), initialised to 0,
    gpt-oss's; in state_dict), alibi=True (the fixed attnc.alibi_slopes(H),
    a buffer outside state_dict), window=(left, right), softcap,
    activation="sigmoid" with sigmoid_bias (sigmoid attention).

    forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False, *,
    segment_ids=None, prefix_lengths=None, block_mask=None, block_size=None): query
    (L, B, E) ((B, L, E) with batch_first, (L, E) unbatched), key (S, B,
    kdim), value (S, B, vdim), float32 or float64 CPU tensors; masks as torch
    takes them (bool True = ignore, or float added). Returns (output like
    query, weights (B, L, S) averaged over heads or (B, H, L, S), or None
    without need_weights), both differentiable. Dropout (in training mode)
    draws its seed from torch's generator. The block masks are per call,
    batch first whatever batch_first says, as attnc.torch.multi_head_attention
    takes them: segment_ids an integer tensor (B, L) or a pair ((B, L),
    (B, S)), prefix_lengths an int or integer tensor (B,) (with
    is_causal=True and no attn_mask), block_mask a bool tensor (B or 1, H or
    1, ceil(L / bq), ceil(S / bk)) with block_size (without B unbatched).

    Example
    -------
    >>> mha = attnc.torch.nn.MultiheadAttention(16, 4, batch_first=True)
    >>> x = torch.randn(2, 5, 16)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape
    (torch.Size([2, 5, 16]), torch.Size([2, 5, 5]))
    >>> sorted(mha.state_dict()) == sorted(torch.nn.MultiheadAttention(16, 4).state_dict())
    True
    >>> oss = attnc.torch.nn.MultiheadAttention(16, 4, batch_first=True, sinks=True, window=(2, 0))
    >>> oss(x, x, x)[0].sum().backward()
    >>> oss.sinks.grad.shape
    torch.Size([4])
    >>> sig = attnc.torch.nn.MultiheadAttention(16, 4, batch_first=True, activation="sigmoid")
    >>> out, w = sig(x, x, x, segment_ids=torch.tensor([[0, 0, 1, 1, 1]] * 2))
    >>> (w[0, 3] > 0).tolist()
    [False, False, True, True, True]
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        sinks: bool = False,
        alibi: bool = False,
        window: tuple[int | None, int | None] | None = None,
        softcap: float | None = None,
        activation: str = "softmax",
        sigmoid_bias: float | None = None,
    ) -> None:
        super().__init__(
            embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first, device, dtype
        )
        self._set_variants(
            sinks=sinks, alibi=alibi, window=window, softcap=softcap, activation=activation, sigmoid_bias=sigmoid_bias
        )

    def _set_variants(
        self, *, sinks=False, alibi=False, window=None, softcap=None, activation="softmax", sigmoid_bias=None
    ) -> None:
        """The options of today's models (also given to a module torch built,
        whose class _attnc_attention changed): window, softcap, activation
        and sigmoid_bias checked as attnc checks them."""
        fixed = dict(window=window, softcap=softcap, activation=activation, sigmoid_bias=sigmoid_bias)
        variant_options(self.num_heads, None, kernel=((), 0, 0), **fixed)
        like = self.out_proj.weight
        self.sinks = torch.nn.Parameter(like.new_zeros(self.num_heads)) if sinks else None
        slopes = torch.from_numpy(alibi_slopes(self.num_heads)).to(like) if alibi else None
        self.register_buffer("alibi_slopes", slopes, persistent=False)
        self.window, self.softcap = window, softcap
        self.activation, self.sigmoid_bias = activation, sigmoid_bias

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        *,
        segment_ids: Tensor | tuple[Tensor, Tensor] | None = None,
        prefix_lengths: Tensor | int | None = None,
        block_mask: Tensor | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        sequence_first = not self.batch_first and query.dim() == 3
        if sequence_first:  # attnc's op is batch first: (L, B, E) viewed as (B, L, E)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, weights = multi_head_attention(
            query,
            key,
            value,
            self.num_heads,
            self.in_proj_weight,
            self.in_proj_bias,
            self.out_proj.weight,
            self.out_proj.bias,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            need_weights=need_weights,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
            q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight,
            bias_k=self.bias_k,
            bias_v=self.bias_v,
            add_zero_attn=self.add_zero_attn,
            dropout_p=self.dropout if self.training else 0.0,
            segment_ids=segment_ids,
            prefix_lengths=prefix_lengths,
            block_mask=block_mask,
            block_size=block_size,
            **self._variants(),
        )
        return (out.transpose(0, 1) if sequence_first else out), weights

    def _variants(self) -> dict:
        """The options of today's models, as multi_head_attention takes them
        (none on a module torch built and _attnc_attention gave this class)."""
        return {
            "sinks": getattr(self, "sinks", None),
            "alibi_slopes": getattr(self, "alibi_slopes", None),
            "window": getattr(self, "window", None),
            "softcap": getattr(self, "softcap", None),
            "activation": getattr(self, "activation", "softmax"),
            "sigmoid_bias": getattr(self, "sigmoid_bias", None),
        }


# The constructor settings of the options of today's models (MultiheadAttention._set_variants').
_VARIANT_SETTINGS = ("sinks", "alibi", "window", "softcap")
# A layer's: those of its self-attention, and every attention block's activation.
_LAYER_SETTINGS = (*_VARIANT_SETTINGS, "attention", "sigmoid_bias")


def _attnc_attention(layer: torch.nn.Module) -> None:
    """Give layer's torch MultiheadAttention modules attnc's forward: the
    modules torch built (same parameters, initialised from the same draws
    of torch's generator), of attnc's subclass."""
    for module in layer.modules():
        if type(module) is torch.nn.MultiheadAttention:
            module.__class__ = MultiheadAttention


def _set_attention(layer: torch.nn.Module, kwargs: dict) -> None:
    """A layer's settings (kwargs: those of _LAYER_SETTINGS its constructor
    was given) on its attention modules: the self-attention's options of today's models (_VARIANT_SETTINGS) and
    attention="softmax" | "sigmoid" with sigmoid_bias, every attention
    block's (checked as attnc.nn's layers check them: sigmoid refuses sinks)."""
    _attnc_attention(layer)
    variants = {n: kwargs.pop(n) for n in _VARIANT_SETTINGS if n in kwargs}
    attention, bias = _c._attention(
        kwargs.pop("attention", "softmax"), kwargs.pop("sigmoid_bias", None), variants.get("sinks")
    )
    cast(MultiheadAttention, layer.self_attn)._set_variants(**variants, activation=attention, sigmoid_bias=bias)
    if hasattr(layer, "multihead_attn"):
        cast(MultiheadAttention, layer.multihead_attn)._set_variants(activation=attention, sigmoid_bias=bias)


def _mha_blocks(blocks: tuple) -> dict:
    """One attention's block masks as attnc.nn's layers check them
    (_c._encoder_blocks' / _c._decoder_blocks' (query segments, key segments,
    prefix_lengths, block_mask, block_size)) as MultiheadAttention.forward's
    keywords (block_size only with the block mask it sizes)."""
    q_ids, k_ids, prefix_lengths, block_mask, block_size = blocks
    segment_ids = q_ids if k_ids is q_ids else (q_ids, k_ids)
    sized = block_mask is not None
    return dict(
        segment_ids=segment_ids,
        prefix_lengths=prefix_lengths,
        block_mask=block_mask,
        block_size=block_size if sized else None,
    )


def _attend(attn, dropout, x, mem, attn_mask, key_padding_mask, is_causal, blocks) -> Tensor:
    """torch's _sa_block / _mha_block with the block masks (blocks, keywords
    of MultiheadAttention.forward)."""
    out = attn(
        x,
        mem,
        mem,
        attn_mask=attn_mask,
        key_padding_mask=key_padding_mask,
        is_causal=is_causal,
        need_weights=False,
        **blocks,
    )[0]
    return dropout(out)


def _self_causal(src_mask, is_causal, prefix_lengths) -> bool:
    """The encoder's self-attention's is_causal: prefix_lengths makes it
    causal (the kernel's causal rule, which the prefix widens), refusing
    is_causal (as attnc.nn's layers) and any src_mask (which
    MultiheadAttention refuses with the prefix's causal rule)."""
    if prefix_lengths is None:
        return is_causal
    if is_causal or src_mask is not None:
        raise ValueError(
            "prefix_lengths makes the self-attention causal outside the prefix; is_causal=True (and the causal "
            "src_mask) would hide the prefix: pass neither (attnc.torch.nn takes no src_mask with prefix_lengths)"
        )
    return True


class TransformerEncoderLayer(torch.nn.TransformerEncoderLayer):
    """``torch.nn.TransformerEncoderLayer`` whose self-attention is
    attnc.torch.nn.MultiheadAttention.

    Constructor (d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation=relu, layer_norm_eps=1e-5, batch_first=False,
    norm_first=False, bias=True, device=None, dtype=None), parameters and
    state_dict keys are torch's; forward(src, src_mask=None,
    src_key_padding_mask=None, is_causal=False) is torch's path without its
    fused fast path. src (S, B, E) ((B, S, E) with batch_first), float32 or
    float64; returns a tensor like src. Keyword-only sinks, alibi, window,
    softcap: the self-attention's options, as attnc.torch.nn.MultiheadAttention
    takes them (``self_attn.sinks`` a parameter with sinks=True);
    attention="softmax" (default) or "sigmoid" with sigmoid_bias (None: -log
    of the key count per call), as attnc.nn.TransformerEncoderLayer takes
    them (sigmoid refuses sinks).

    forward's keyword-only block masks, as attnc.nn.TransformerEncoderLayer
    takes them, batch first whatever batch_first says: src_segment_ids
    (B, S) integers (packed sequences: a position attends only positions of
    its id; causally with is_causal and the causal src_mask); prefix_lengths
    an int or (B,) integers (a prefix LM: causal, but every position sees the
    first prefix_lengths[b]; it makes the attention causal itself: pass no
    is_causal and no src_mask); src_block_mask a bool tensor (B or 1, nhead
    or 1, ceil(S / bq), ceil(S / bk)) with block_size bq or (bq, bk). They
    take no gradient.

    Example
    -------
    >>> layer = attnc.torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> layer(torch.randn(2, 5, 16)).shape
    torch.Size([2, 5, 16])
    >>> alibi = attnc.torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, alibi=True, window=(3, 0))
    >>> alibi(torch.randn(2, 5, 16)).shape
    torch.Size([2, 5, 16])
    >>> sig = attnc.torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, attention="sigmoid")
    >>> ids = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 1]])
    >>> sig(torch.randn(2, 5, 16), src_segment_ids=ids, prefix_lengths=2).shape
    torch.Size([2, 5, 16])
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = {n: kwargs.pop(n) for n in _LAYER_SETTINGS if n in kwargs}
        super().__init__(*args, **kwargs)
        _set_attention(self, settings)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        *,
        src_segment_ids: Tensor | None = None,
        prefix_lengths: Tensor | int | None = None,
        src_block_mask: Tensor | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> Tensor:
        blocks = _mha_blocks(_c._encoder_blocks(src_segment_ids, prefix_lengths, src_block_mask, block_size))
        causal = _self_causal(src_mask, is_causal, prefix_lengths)

        def sa(x):
            return _attend(self.self_attn, self.dropout1, x, x, src_mask, src_key_padding_mask, causal, blocks)

        x = src
        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + sa(x))
        return self.norm2(x + self._ff_block(x))


class TransformerDecoderLayer(torch.nn.TransformerDecoderLayer):
    """``torch.nn.TransformerDecoderLayer`` whose self- and cross-attention
    are attnc.torch.nn.MultiheadAttention.

    Constructor (d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation=relu, layer_norm_eps=1e-5, batch_first=False,
    norm_first=False, bias=True, device=None, dtype=None), parameters,
    state_dict keys and forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=False, memory_is_causal=False) are torch's. tgt (T, B, E),
    memory (S, B, E) (batch first with batch_first), float32 or float64;
    returns a tensor like tgt. Keyword-only sinks, alibi, window, softcap:
    the self-attention's options, as in attnc.torch.nn.TransformerEncoderLayer;
    attention="softmax" or "sigmoid" with sigmoid_bias: both attentions'.

    forward's keyword-only block masks, as attnc.nn.TransformerDecoderLayer
    takes them, batch first: tgt_segment_ids (B, T) integers (a target
    position attends only targets of its id, causally with tgt_is_causal);
    with memory_segment_ids (B, S) too (it needs tgt_segment_ids) it reads
    only the memory positions of its id, so several (source, target) pairs
    share a row; tgt_block_mask (B or 1, nhead or 1, ceil(T / bq), ceil(T /
    bk)) and memory_block_mask (..., ceil(T / bq), ceil(S / bk)) with
    block_size bq or (bq, bk).

    Example
    -------
    >>> layer = attnc.torch.nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> layer(torch.randn(2, 3, 16), torch.randn(2, 5, 16)).shape
    torch.Size([2, 3, 16])
    >>> tgt_ids, mem_ids = torch.tensor([[0, 1, 1]] * 2), torch.tensor([[0, 0, 1, 1, 1]] * 2)
    >>> layer(torch.randn(2, 3, 16), torch.randn(2, 5, 16), tgt_segment_ids=tgt_ids, memory_segment_ids=mem_ids).shape
    torch.Size([2, 3, 16])
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = {n: kwargs.pop(n) for n in _LAYER_SETTINGS if n in kwargs}
        super().__init__(*args, **kwargs)
        _set_attention(self, settings)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
        *,
        tgt_segment_ids: Tensor | None = None,
        memory_segment_ids: Tensor | None = None,
        tgt_block_mask: Tensor | None = None,
        memory_block_mask: Tensor | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> Tensor:
        blocks = _c._decoder_blocks(tgt_segment_ids, memory_segment_ids, tgt_block_mask, memory_block_mask, block_size)
        self_blocks, cross_blocks = (_mha_blocks(b) for b in blocks)

        def sa(x):
            return _attend(
                self.self_attn, self.dropout1, x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal, self_blocks
            )

        def ca(x):
            mask, kpm = memory_mask, memory_key_padding_mask
            return _attend(self.multihead_attn, self.dropout2, x, memory, mask, kpm, memory_is_causal, cross_blocks)

        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + sa(x))
        x = self.norm2(x + ca(x))
        return self.norm3(x + self._ff_block(x))


class _TransformerEncoder(torch.nn.TransformerEncoder):
    """torch's encoder stack (without its nested-tensor fast path) passing
    the block masks (TransformerEncoderLayer.forward's keywords) to its layers."""

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None, **blocks):
        is_causal = _detect_is_causal_mask(mask, is_causal, _get_seq_len(src, self.layers[0].self_attn.batch_first))
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal, **blocks)
        return out if self.norm is None else self.norm(out)


class _TransformerDecoder(torch.nn.TransformerDecoder):
    """torch's decoder stack passing the block masks to its layers."""

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
        **blocks,
    ):
        batch_first = self.layers[0].self_attn.batch_first
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, _get_seq_len(tgt, batch_first))
        masks = dict(
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            memory_is_causal=memory_is_causal,
        )
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_is_causal=tgt_is_causal, **masks, **blocks)
        return out if self.norm is None else self.norm(out)


# torch's classes inside a torch.nn.Transformer and attnc.torch.nn's twins of them.
_TWINS = {
    torch.nn.TransformerEncoderLayer: TransformerEncoderLayer,
    torch.nn.TransformerDecoderLayer: TransformerDecoderLayer,
    torch.nn.TransformerEncoder: _TransformerEncoder,
    torch.nn.TransformerDecoder: _TransformerDecoder,
}


def _packing(src_segment_ids, tgt_segment_ids, src_block_mask, tgt_block_mask, memory_block_mask, block_size):
    """Transformer.forward's block masks, checked as attnc.nn.Transformer
    checks them, as (the encoder's, the decoder's) keywords, only those
    given: the memory's segments are the source's, so target segment k
    reads source segment k."""
    _c._check_packing(src_segment_ids, tgt_segment_ids, src_block_mask, tgt_block_mask, memory_block_mask, block_size)
    encoder = dict(src_segment_ids=src_segment_ids, src_block_mask=src_block_mask)
    decoder = dict(tgt_segment_ids=tgt_segment_ids, memory_segment_ids=src_segment_ids)
    decoder.update(tgt_block_mask=tgt_block_mask, memory_block_mask=memory_block_mask)
    for blocks in (encoder, decoder):
        if any(n.endswith("block_mask") and v is not None for n, v in blocks.items()):
            blocks["block_size"] = block_size
    return ({n: v for n, v in blocks.items() if v is not None} for blocks in (encoder, decoder))


class Transformer(torch.nn.Transformer):
    """``torch.nn.Transformer`` whose attention modules are
    attnc.torch.nn.MultiheadAttention (its encoder never takes torch's
    nested-tensor fast path).

    Constructor (d_model=512, nhead=8, num_encoder_layers=6,
    num_decoder_layers=6, dim_feedforward=2048, dropout=0.1, activation=relu,
    custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
    batch_first=False, norm_first=False, bias=True, device=None, dtype=None),
    parameters, state_dict keys and forward(src, tgt, src_mask=None,
    tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    src_is_causal=None, tgt_is_causal=None, memory_is_causal=False) are
    torch's. src (S, B, E), tgt (T, B, E) (batch first with batch_first),
    float32 or float64; returns (T, B, E).

    forward's keyword-only block masks, as attnc.nn.Transformer takes them,
    batch first: packed (source, target) pairs with src_segment_ids (B, S)
    and tgt_segment_ids (B, T) integers (src's need tgt's): the encoder's
    segments, the decoder's and the memory's (the source's), so target
    segment k reads source segment k only; src_block_mask (B or 1, nhead or
    1, ceil(S / bq), ceil(S / bk)), tgt_block_mask (..., ceil(T / bq),
    ceil(T / bk)), memory_block_mask (..., ceil(T / bq), ceil(S / bk)) with
    block_size bq or (bq, bk). A custom_encoder / custom_decoder gets them
    only if given.

    Example
    -------
    >>> model = attnc.torch.nn.Transformer(16, 4, 1, 1, dim_feedforward=32, batch_first=True)
    >>> model(torch.randn(2, 5, 16), torch.randn(2, 3, 16)).shape
    torch.Size([2, 3, 16])
    >>> src_ids, tgt_ids = torch.tensor([[0, 0, 1, 1, 1]] * 2), torch.tensor([[0, 1, 1]] * 2)
    >>> model(torch.randn(2, 5, 16), torch.randn(2, 3, 16), src_segment_ids=src_ids, tgt_segment_ids=tgt_ids).shape
    torch.Size([2, 3, 16])
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _attnc_attention(self)
        for module in self.modules():  # the layers' forward: no fused fast path, the block masks
            if type(module) in _TWINS:
                module.__class__ = _TWINS[type(module)]
        self.encoder.use_nested_tensor = False

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
        *,
        src_segment_ids: Tensor | None = None,
        tgt_segment_ids: Tensor | None = None,
        src_block_mask: Tensor | None = None,
        tgt_block_mask: Tensor | None = None,
        memory_block_mask: Tensor | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> Tensor:
        packing = (src_segment_ids, tgt_segment_ids, src_block_mask, tgt_block_mask, memory_block_mask, block_size)
        enc_blocks, dec_blocks = _packing(*packing)  # only those given: a custom encoder / decoder may take none
        batch = 0 if self.batch_first else 1
        if src.dim() == 3 and src.size(batch) != tgt.size(batch):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal, **enc_blocks
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
            **dec_blocks,
        )
