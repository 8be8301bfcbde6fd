"""attnc.models.from_pretrained: Hugging Face GPT-2 and BERT checkpoints
loaded into attnc's own models (attnc.models.GPT and attnc.models.BERT).

A checkpoint is a ``transformers`` model object or a local directory with
``config.json`` and ``model.safetensors``; the weights are renamed (and
GPT-2's Conv1D matrices, stored (in, out), transposed) into the attnc
modules' torch-style state_dict names. attnc never downloads anything.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import nn
from .._args import shape_str
from .._typing import DTypeLike
from .bert import BERT
from .gpt import GPT

__all__ = ["from_pretrained"]

# Hugging Face's defaults for the config fields read here (save_pretrained
# writes only the fields that differ from them).
_GPT2_DEFAULTS: dict[str, Any] = dict(
    vocab_size=50257,
    n_positions=1024,
    n_embd=768,
    n_layer=12,
    n_head=12,
    n_inner=None,
    activation_function="gelu_new",
    resid_pdrop=0.1,
    embd_pdrop=0.1,
    attn_pdrop=0.1,
    layer_norm_epsilon=1e-5,
    scale_attn_weights=True,
    scale_attn_by_inverse_layer_idx=False,
    reorder_and_upcast_attn=False,
    add_cross_attention=False,
    tie_word_embeddings=True,
)
_BERT_DEFAULTS: dict[str, Any] = dict(
    vocab_size=30522,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=512,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
    pad_token_id=0,
    is_decoder=False,
    add_cross_attention=False,
    position_embedding_type="absolute",
)
# Config fields whose other values change the model in ways attnc's layers do
# not compute: the value each must have.
_GPT2_REQUIRED = dict(
    scale_attn_weights=True,
    scale_attn_by_inverse_layer_idx=False,
    reorder_and_upcast_attn=False,
    add_cross_attention=False,
)
_BERT_REQUIRED = dict(is_decoder=False, add_cross_attention=False, position_embedding_type="absolute")

# Hugging Face's activation names (transformers.activations.ACT2FN) -> the
# layers' activation argument.
_ACTIVATIONS: dict[str, Any] = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": lambda: nn.GELU(approximate="tanh"),
    "gelu_pytorch_tanh": lambda: nn.GELU(approximate="tanh"),
    "gelu_python_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": "relu",
}

# Checkpoint names -> attnc's, per layer ({i} the layer): (attnc name, part,
# transpose). part k of n: the k-th of n matrices stacked into one (BERT's
# query, key and value into in_proj); transpose: GPT-2's Conv1D, stored (in, out).
_Rule = tuple[str, tuple[int, int] | None, bool]
_GPT2_LAYER: dict[str, _Rule] = {
    "ln_1.weight": ("norm1.weight", None, False),
    "ln_1.bias": ("norm1.bias", None, False),
    "attn.c_attn.weight": ("self_attn.in_proj_weight", None, True),
    "attn.c_attn.bias": ("self_attn.in_proj_bias", None, False),
    "attn.c_proj.weight": ("self_attn.out_proj.weight", None, True),
    "attn.c_proj.bias": ("self_attn.out_proj.bias", None, False),
    "ln_2.weight": ("norm2.weight", None, False),
    "ln_2.bias": ("norm2.bias", None, False),
    "mlp.c_fc.weight": ("linear1.weight", None, True),
    "mlp.c_fc.bias": ("linear1.bias", None, False),
    "mlp.c_proj.weight": ("linear2.weight", None, True),
    "mlp.c_proj.bias": ("linear2.bias", None, False),
}
_BERT_LAYER: dict[str, _Rule] = {
    **{
        f"attention.self.{proj}.{w}": (f"self_attn.in_proj_{w}", (k, 3), False)
        for k, proj in enumerate(("query", "key", "value"))
        for w in ("weight", "bias")
    },
    "attention.output.dense.weight": ("self_attn.out_proj.weight", None, False),
    "attention.output.dense.bias": ("self_attn.out_proj.bias", None, False),
    "attention.output.LayerNorm.weight": ("norm1.weight", None, False),
    "attention.output.LayerNorm.bias": ("norm1.bias", None, False),
    "intermediate.dense.weight": ("linear1.weight", None, False),
    "intermediate.dense.bias": ("linear1.bias", None, False),
    "output.dense.weight": ("linear2.weight", None, False),
    "output.dense.bias": ("linear2.bias", None, False),
    "output.LayerNorm.weight": ("norm2.weight", None, False),
    "output.LayerNorm.bias": ("norm2.bias", None, False),
}
_BERT_TOP = {
    "embeddings.word_embeddings.weight": "word_embeddings.weight",
    "embeddings.position_embeddings.weight": "position_embeddings.weight",
    "embeddings.token_type_embeddings.weight": "token_type_embeddings.weight",
    "embeddings.LayerNorm.weight": "embeddings_norm.weight",
    "embeddings.LayerNorm.bias": "embeddings_norm.bias",
}
_BERT_POOLER = {"pooler.dense.weight": "pooler.dense.weight", "pooler.dense.bias": "pooler.dense.bias"}
# Buffers some checkpoints store (Hugging Face skips them too).
_GPT2_BUFFERS = ("attn.bias", "attn.masked_bias")
_BERT_BUFFERS = ("embeddings.position_ids",)


def from_pretrained(source: Any, *, dtype: DTypeLike = np.float32) -> GPT | BERT:
    """A Hugging Face GPT-2 or BERT checkpoint as an attnc model, in eval mode.

    GPT-2 (``GPT2LMHeadModel``, ``GPT2Model``) becomes an ``attnc.models.GPT``
    with GPT-2's tanh GELU, learned positions, final ``ln_f`` and LM head tied
    to the token embedding; BERT (``BertModel``) an ``attnc.models.BERT``
    (embeddings, post-norm layers, pooler). Their forward and backward run
    in attnc's C transformer layers, and ``attnc.vjp`` gives gradients as for
    any attnc model.

    attnc never downloads anything: get a checkpoint with your own tools
    (``transformers``' ``from_pretrained`` then ``save_pretrained(directory)``,
    or ``huggingface_hub.snapshot_download``) and pass the model or the
    directory. Nor does it tokenize: the models take token ids, which you
    get from the checkpoint's own tokenizer (``transformers.AutoTokenizer``,
    ``tokenizers``), as ``tokenizer(text)["input_ids"]`` (and BERT's
    ``attention_mask`` and ``token_type_ids``).

    Parameters
    ----------
    source : a ``transformers`` model object (GPT2LMHeadModel, GPT2Model,
        BertModel; other heads on these bases are not loaded), or the path of
        a local directory holding ``config.json`` and ``model.safetensors``
        (read with the ``safetensors`` package; no torch needed)
    dtype : float32 or float64, the loaded model's dtype (the checkpoint's
        values are cast to it)

    Returns
    -------
    model : attnc.models.GPT for GPT-2: ``model(input_ids, need_weights=False)``,
        input_ids (B, L) int -> logits (B, L, vocab_size), and with
        need_weights also every layer's attention weights, a list of (B,
        n_head, L, L); ``model.generate(...)`` continues prompts.
        attnc.models.BERT for BERT: ``model(input_ids, attention_mask=None,
        token_type_ids=None, need_weights=False)`` -> the last hidden states
        (B, L, hidden_size) (and the weights likewise); ``model.pooler(h)``
        is the pooled output.

    Raises
    ------
    ValueError naming the config field for a configuration attnc does not
    compute (another activation, cross-attention, a decoder BERT,
    scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, unequal
    dropout rates, ...), or naming the weights a checkpoint lacks or has
    beyond the model's or of the wrong shape; FileNotFoundError for a
    missing directory or file; TypeError for another kind of source.

    Example
    -------
    >>> import transformers
    >>> config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=8, n_layer=2, n_head=2)
    >>> hf = transformers.GPT2LMHeadModel(config).eval()
    >>> hf.save_pretrained("tiny-gpt2")
    >>> model = attnc.models.from_pretrained("tiny-gpt2")
    >>> logits, weights = model(np.array([[1, 2, 3]]), need_weights=True)
    >>> logits.shape, len(weights), weights[0].shape
    ((1, 3, 50), 2, (1, 2, 3, 3))
    >>> import torch
    >>> expected = hf(torch.tensor([[1, 2, 3]])).logits.detach().numpy()
    >>> bool(np.allclose(logits, expected, atol=1e-5))
    True
    """
    config, tensors = _read(source)
    kind = config.get("model_type")
    if kind == "gpt2":
        return _gpt2({**_GPT2_DEFAULTS, **config}, tensors, dtype)
    if kind == "bert":
        return _bert({**_BERT_DEFAULTS, **config}, tensors, dtype)
    raise ValueError(f"config model_type {kind!r} is not supported: attnc loads 'gpt2' and 'bert'")


def _read(source) -> tuple[dict, dict[str, np.ndarray]]:
    """(config as a dict, {checkpoint name: array}) of a directory or a transformers model."""
    if isinstance(source, (str, os.PathLike)):
        return _read_directory(os.fspath(source))
    if hasattr(source, "config") and hasattr(source, "state_dict"):
        config = source.config.to_dict()
        return config, {name: _tensor_array(t) for name, t in source.state_dict().items()}
    raise TypeError(
        "source must be a transformers model (GPT2LMHeadModel, GPT2Model, BertModel) or the path of a "
        f"directory with config.json and model.safetensors, got {type(source).__name__}"
    )


def _read_directory(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{path!r} is not a directory. attnc never downloads: save the checkpoint with your own tools "
            "(transformers' save_pretrained, huggingface_hub.snapshot_download) and pass its directory"
        )
    files = {name: os.path.join(path, name) for name in ("config.json", "model.safetensors")}
    for name, file in files.items():
        if not os.path.isfile(file):
            sharded = os.path.isfile(os.path.join(path, "model.safetensors.index.json"))
            hint = " (a sharded checkpoint: attnc reads one model.safetensors)" if sharded else ""
            raise FileNotFoundError(f"{path!r} has no {name}{hint}")
    with open(files["config.json"], encoding="utf-8") as f:
        config = json.load(f)
    if not isinstance(config, dict):
        raise ValueError(f"{files['config.json']} is not a JSON object")
    try:
        from safetensors.numpy import load_file
    except ImportError as e:
        raise ImportError(
            "reading model.safetensors needs the safetensors package: pip install safetensors (or 'attnc[hf]')"
        ) from e
    try:
        return config, load_file(files["model.safetensors"])
    except TypeError as e:  # NumPy has no bfloat16
        raise TypeError(
            f"{files['model.safetensors']}: {e}: NumPy cannot read bfloat16 weights; load the model with "
            "transformers and pass it (attnc casts its tensors), or save it as float32"
        ) from e


def _tensor_array(t) -> np.ndarray:
    """A torch tensor as a NumPy array (bfloat16 and float16 through float32)."""
    t = t.detach().cpu()
    if str(t.dtype) in ("torch.bfloat16", "torch.float16"):
        t = t.float()
    return t.numpy()


def _check_config(config: Mapping, required: Mapping) -> None:
    for field, value in required.items():
        if config[field] != value:
            raise ValueError(
                f"config field {field}={config[field]!r} is not supported: attnc's layers compute {field}={value!r}"
            )


def _activation(config: Mapping, field: str):
    name = config[field]
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"config field {field}={name!r} is not supported: attnc's layers compute {sorted(_ACTIVATIONS)}"
        )
    act = _ACTIVATIONS[name]
    return act() if callable(act) else act


def _dropout(config: Mapping, fields: tuple[str, ...]) -> float:
    """The one dropout rate attnc's models have, which the config's fields must agree on."""
    rates = {config[f] for f in fields}
    if len(rates) != 1:
        values = ", ".join(f"{f}={config[f]}" for f in fields)
        raise ValueError(f"config fields {values} differ: attnc's model has one dropout rate")
    return float(rates.pop())


def _base(tensors: Mapping[str, np.ndarray], prefix: str) -> tuple[dict, dict]:
    """The base model's weights (prefix stripped, when the checkpoint is a
    model with heads: ``transformer.`` for GPT-2, ``bert.`` for BERT) and the
    heads' weights."""
    if not any(k.startswith(prefix) for k in tensors):
        return dict(tensors), {}
    base = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    return base, {k: v for k, v in tensors.items() if not k.startswith(prefix)}


def _convert(
    tensors: Mapping, top: Mapping[str, str], layer: Mapping[str, _Rule], n_layer: int, layer_prefix: str, buffers
):
    """{attnc name: array} from the base model's weights: top renames whole
    names, layer those under ``{layer_prefix}{i}.`` into
    ``encoder.layers.{i}.``; every expected name must be there, and nothing
    else but the buffers."""
    expected = dict(top)
    rules: dict[str, _Rule] = {}
    for i in range(n_layer):
        for name, (target, part, transpose) in layer.items():
            rules[f"{layer_prefix}{i}.{name}"] = (f"encoder.layers.{i}.{target}", part, transpose)
    missing = [k for k in [*expected, *rules] if k not in tensors]
    unexpected = [k for k in tensors if k not in expected and k not in rules and _tail(k, layer_prefix) not in buffers]
    if missing or unexpected:
        raise ValueError(f"the checkpoint does not fit the config: missing weights {missing}, unexpected {unexpected}")
    out = {target: (name, np.asarray(tensors[name])) for name, target in expected.items()}
    stacks: dict[str, list] = {}
    for name, (target, part, transpose) in rules.items():
        a = np.asarray(tensors[name])
        a = a.T if transpose and a.ndim == 2 else a
        if part is None:
            out[target] = (name, a)
        else:
            stacks.setdefault(target, [None] * part[1])[part[0]] = (name, a)
    for target, parts in stacks.items():
        names = "+".join(name for name, _ in parts)
        if len({a.shape for _, a in parts}) != 1:
            raise ValueError(f"{names} have shapes {[shape_str(a.shape) for _, a in parts]}, which differ")
        out[target] = (names, np.concatenate([a for _, a in parts]))
    return out


def _tail(name: str, layer_prefix: str) -> str:
    """A name without its ``{layer_prefix}{i}.`` (a layer's own name), or as it is."""
    if name.startswith(layer_prefix):
        i, _, rest = name[len(layer_prefix) :].partition(".")
        if i.isdigit():
            return rest
    return name


def _load(model, converted: Mapping[str, tuple[str, np.ndarray]]):
    """Load the converted weights into model (every parameter, shapes
    checked and named by the checkpoint's names); returns it in eval mode."""
    own = dict(model.named_parameters())
    for target, (name, a) in converted.items():
        if a.shape != own[target].shape:
            raise ValueError(
                f"checkpoint weight {name} has shape {shape_str(a.shape)}, the config gives "
                f"{shape_str(own[target].shape)} ({target})"
            )
    model.load_state_dict({target: a for target, (_, a) in converted.items()})
    return model.eval()


def _gpt2(config: dict, tensors: Mapping, dtype) -> GPT:
    _check_config(config, _GPT2_REQUIRED)
    base, heads = _base(tensors, "transformer.")
    tied = bool(config["tie_word_embeddings"])
    top = {k: k for k in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")}
    if not tied:
        if "lm_head.weight" not in heads:
            raise ValueError("the checkpoint has no lm_head.weight and tie_word_embeddings is False")
        base["lm_head.weight"] = heads["lm_head.weight"]
        top["lm_head.weight"] = "lm_head.weight"
    model = GPT(
        config["vocab_size"],
        config["n_positions"],
        n_layer=config["n_layer"],
        n_head=config["n_head"],
        n_embd=config["n_embd"],
        dropout=_dropout(config, ("embd_pdrop", "resid_pdrop", "attn_pdrop")),
        activation=_activation(config, "activation_function"),
        n_inner=config["n_inner"],
        layer_norm_epsilon=config["layer_norm_epsilon"],
        tie_word_embeddings=tied,
        dtype=dtype,
    )
    return _load(model, _convert(base, top, _GPT2_LAYER, config["n_layer"], "h.", _GPT2_BUFFERS))


def _bert(config: dict, tensors: Mapping, dtype) -> BERT:
    _check_config(config, _BERT_REQUIRED)
    base, _ = _base(tensors, "bert.")
    base = {_renamed_norm(k): v for k, v in base.items()}
    pooled = any(k.startswith("pooler.") for k in base)
    model = BERT(
        config["vocab_size"],
        config["max_position_embeddings"],
        config["type_vocab_size"],
        num_hidden_layers=config["num_hidden_layers"],
        num_attention_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        dropout=_dropout(config, ("hidden_dropout_prob", "attention_probs_dropout_prob")),
        activation=_activation(config, "hidden_act"),
        layer_norm_eps=config["layer_norm_eps"],
        pad_token_id=config["pad_token_id"],
        add_pooling_layer=pooled,
        dtype=dtype,
    )
    top = {**_BERT_TOP, **(_BERT_POOLER if pooled else {})}
    layers = _convert(base, top, _BERT_LAYER, config["num_hidden_layers"], "encoder.layer.", _BERT_BUFFERS)
    return _load(model, layers)


def _renamed_norm(name: str) -> str:
    """Older BERT checkpoints name LayerNorm parameters gamma and beta."""
    if ".LayerNorm." in name and name.endswith((".gamma", ".beta")):
        return name.rsplit(".", 1)[0] + (".weight" if name.endswith(".gamma") else ".bias")
    return name
