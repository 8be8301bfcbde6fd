"""The generated binding's structs and lists (csrc/python/gen_binding.py,
csrc/python/args.c), through the operations that use them: weights as dicts
keyed by the C structs' members (a transformer layer's attnc_layer_params,
nested members by their paths), a stack of layers as a list of them
(``struct_list``: the LSTM's attnc_rnn_weights as the call's list and count,
attnc_decode's layers as a list inside attnc_decoder), arguments left out,
and calls holding more buffers than one block of the binding's (64)."""

import numpy as np
import pytest

import attnc
from attnc import _core
from attnc.models import Seq2SeqTransformer
from reference import decoding


def test_an_array_left_out_is_absent():
    """An array keyword not passed is absent, as None is (it crashed)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    y = np.full((3, 2), np.nan)
    _core.linear_forward(output=y, input=x, weight=w)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-13)
    with pytest.raises(TypeError, match="input and weight are required"):
        _core.linear_forward(output=y, input=x)


# --------------------------------------------------------------------------- a list passed as (pointer, count)


def _lstm(**kw):
    return attnc.nn.LSTM(3, 4, dtype=np.float64, seed=0, **kw).eval()


def _rnn_forward(m, x, weights, **kw):
    """rnn_forward of module m's configuration on x with these weights."""
    out = np.empty(x.shape[:2] + (m._directions * m.hidden_size,))
    _core.rnn_forward(output=out, input=x, weights=weights, **(m._rnn_config(False) | kw))
    return out


def test_rnn_weights_by_member():
    """Each dict's keys are attnc_rnn_weights' members; keys left out are absent
    (the biases of a model without them)."""
    x = np.random.default_rng(1).standard_normal((2, 5, 3))
    m = _lstm(bias=False)
    no_bias = [{k: v for k, v in w.items() if v is not None} for w in m._weights()]
    assert all(sorted(w) == ["weight_hh", "weight_ih"] for w in no_bias)
    np.testing.assert_array_equal(_rnn_forward(m, x, no_bias), m(x)[0])


@pytest.mark.parametrize(
    "weights,exc,pattern",
    [
        (lambda w: tuple(w), TypeError, "weights must be a list, got tuple"),
        (lambda w: [3] + w[1:], TypeError, "weights must be a dict, got int"),
        (
            lambda w: [w[0] | {"weight_ix": w[0]["weight_ih"]}] + w[1:],
            TypeError,
            "weights has an unexpected key 'weight_ix'",
        ),
        (lambda w: [w[0] | {"weight_hh": "none"}] + w[1:], TypeError, "weight_hh must be a buffer"),
        (lambda w: w[:1], ValueError, r"weights holds 1 sets, expected one per layer and direction \(2\)"),
        (lambda w: w + w[:1], ValueError, r"weights holds 3 sets, expected one per layer and direction \(2\)"),
    ],
)
def test_rnn_weights_refused(weights, exc, pattern):
    m = _lstm(num_layers=2)
    x = np.zeros((2, 5, 3))
    with pytest.raises(exc, match=pattern):
        _rnn_forward(m, x, weights(m._weights()))


def test_rnn_grads_count_refused():
    m = _lstm(num_layers=2)
    x = np.random.default_rng(2).standard_normal((2, 5, 3))
    _, _, _, (saved, x, lens, h0, c0, weights, config) = m._run(x, (None, None), None, keep=True)
    grads = [{k: np.empty_like(v) for k, v in w.items()} for w in weights]
    with pytest.raises(ValueError, match=r"grads holds 1 sets, expected one per layer and direction \(2\)"):
        _core.rnn_backward(
            dinput=np.empty_like(x),
            grads=grads[:1],
            doutput=np.ones((2, 5, 4)),
            saved=saved,
            input=x,
            weights=weights,
            **config,
        )


def test_deep_rnn_holds_more_buffers_than_a_block(torch):
    """A 20-layer bidirectional LSTM: 160 weight arrays in one call, forward and
    backward, against torch's."""
    rng = np.random.default_rng(3)
    m = attnc.nn.LSTM(3, 4, num_layers=20, bidirectional=True, dtype=np.float64, seed=0)
    x, dout = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 8))
    (out, _), pullback = attnc.vjp(m, x)
    grads = pullback(dout, None)
    tm = torch.nn.LSTM(3, 4, num_layers=20, bidirectional=True, batch_first=True, dtype=torch.float64)
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in m.state_dict().items()})
    tx = torch.from_numpy(x).requires_grad_()
    tout = tm(tx)[0]
    tout.backward(torch.from_numpy(dout))
    np.testing.assert_allclose(out, tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["input"], tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


# --------------------------------------------------------------------------- nested members, a list in a struct


def _encoder_layer():
    return attnc.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dtype=np.float64, seed=0).eval()


def _layer_forward(layer, x, params, **kw):
    out = np.empty_like(x)
    _core.layer_forward(output=out, input=x, params=params, **(layer._layer_config(False) | kw))
    return out


def test_layer_params_by_member_path():
    """attnc_layer_params' nested members are keyed by their C paths."""
    layer = _encoder_layer()
    x = np.random.default_rng(4).standard_normal((2, 3, 8))
    params = layer._params()
    assert "self_attn.in_weight" in params and "norm_ff.bias" in params and "cross_attn.in_weight" not in params
    np.testing.assert_array_equal(_layer_forward(layer, x, params), layer(x))
    with pytest.raises(TypeError, match="params has an unexpected key 'self_attn.in_proj_weight'"):
        _layer_forward(layer, x, params | {"self_attn.in_proj_weight": params["self_attn.in_weight"]})
    with pytest.raises(TypeError, match="params must be a dict, got list"):
        _layer_forward(layer, x, list(params.values()))
    with pytest.raises(ValueError, match=r"nhead must be in \[1, "):
        _layer_forward(layer, x, params, nhead=0)


def _deep_seq2seq():
    rng = np.random.default_rng(5)
    model = Seq2SeqTransformer(
        7,
        7,
        d_model=8,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=5,
        dim_feedforward=12,
        max_len=8,
        dtype=np.float64,
        seed=3,
    )
    model.load_state_dict({k: v + rng.normal(0, 0.4, v.shape) for k, v in model.state_dict().items()})
    return model.eval()


def test_decoder_layers_as_a_list_beyond_a_block():
    """Five decoder layers (90 arrays in attnc_decoder's list of layers): the C
    decoder against the reference that reruns the full forward."""
    model = _deep_seq2seq()
    src = np.random.default_rng(6).integers(0, 7, (3, 5))
    for beam in (1, 3):
        np.testing.assert_array_equal(
            model.generate(src, 6, bos=0, eos=2, beam_size=beam),
            decoding.seq2seq_transformer(model, src, 6, bos=0, eos=2, beam_size=beam),
        )


def test_decoder_layers_refused():
    model = _deep_seq2seq()
    layers = [layer._params() for layer in model.transformer.decoder.layers]
    first = model.transformer.decoder.layers[0]
    kw = dict(
        tokens=np.empty((1, 2), np.int64),
        lengths=np.empty(1, np.int64),
        **first._layer_config(False),
        embedding=model.tgt_embed.weight,
        positions=model._positions(4),
        out_weight=model.generator.weight,
        prompt=np.zeros((1, 1), np.int64),
        memory=np.zeros((1, 3, 8)),
        max_new_tokens=2,
    )
    with pytest.raises(TypeError, match="layers must be a list, got tuple"):
        _core.decode(layers=tuple(layers), **kw)
    with pytest.raises(TypeError, match="layers has an unexpected key 'linear1.weight'"):
        _core.decode(layers=layers[:1] + [layers[1] | {"linear1.weight": layers[1]["linear1_weight"]}], **kw)
    with pytest.raises(TypeError, match="missing required argument 'layers'"):
        _core.decode(**kw)
