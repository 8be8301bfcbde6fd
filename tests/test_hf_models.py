"""attnc.models.from_pretrained against Hugging Face transformers: small
randomly initialised GPT2LMHeadModel, GPT2Model and BertModel built here from
configs (no network), loaded from the object and from a save_pretrained
directory (config.json + model.safetensors), give transformers' logits,
hidden states, pooled output and every layer's attention weights (eager
attention, output_attentions=True), and the gradients torch's autograd gives
(attnc.vjp). Unsupported configs and broken directories raise errors naming
what is wrong. Also: torch modules built on nn.MultiheadAttention /
nn.TransformerEncoder load their state dicts (torch tensors as they come)
into attnc's modules, whose attention weights are torch's."""

import json
import os

import numpy as np
import pytest

import attnc
import attnc.models
from attnc import nn

V, P, E, H, NL = 37, 24, 16, 4, 2  # vocabulary, positions, width, heads, layers
B, L = 3, 9
TOL = {np.float32: 1e-5, np.float64: 1e-10}
DTYPES = [np.float32, np.float64]


def _randomise(torch, model, seed=0):
    """Non-trivial LayerNorm weights and biases (transformers initialises them 1 and 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model.eval()


def gpt2(transformers, torch, cls="GPT2LMHeadModel", **overrides):
    torch.manual_seed(0)
    kw = dict(vocab_size=V, n_positions=P, n_embd=E, n_layer=NL, n_head=H, bos_token_id=0, eos_token_id=0)
    config = transformers.GPT2Config(**{**kw, **overrides}, attn_implementation="eager")
    return _randomise(torch, getattr(transformers, cls)(config))


def bert(transformers, torch, cls="BertModel", **overrides):
    torch.manual_seed(1)
    kw = dict(
        vocab_size=V,
        hidden_size=E,
        num_hidden_layers=NL,
        num_attention_heads=H,
        intermediate_size=3 * E,
        max_position_embeddings=P,
        type_vocab_size=3,
        layer_norm_eps=1e-6,
    )
    config = transformers.BertConfig(**{**kw, **overrides}, attn_implementation="eager")
    return _randomise(torch, getattr(transformers, cls)(config))


def saved(model, path):
    model.save_pretrained(path)
    assert {"config.json", "model.safetensors"} <= set(os.listdir(path))
    return str(path)


def load(hf, source, tmp_path, dtype):
    """attnc's model from the transformers object or from its saved directory."""
    return attnc.models.from_pretrained(hf if source == "object" else saved(hf, tmp_path / "checkpoint"), dtype=dtype)


def reference(torch, hf, dtype):
    """The transformers model in the dtype compared against (a copy in float64)."""
    import copy

    return copy.deepcopy(hf).to(torch.float64) if dtype == np.float64 else hf


def as_numpy(t):
    return t.detach().numpy()


def close(actual, expected, tol, what):
    err = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64)).max()
    assert err <= tol, f"{what}: max abs error {err:.3g} > {tol:g}"


def ids_and_mask(rng):
    ids = rng.integers(0, V, (B, L))
    ids[0, 1] = 0  # BERT's padding token (its embedding row gets no gradient)
    mask = np.ones((B, L), np.int64)
    mask[1, 6:] = 0  # padding at the end of two rows
    mask[2, 2:] = 0
    return ids, mask


# ---------------------------------------------------------------------------- GPT-2


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("source", ["object", "directory"])
def test_gpt2_logits_and_attention_match_transformers(source, dtype, transformers, torch, tmp_path, rng):
    hf = gpt2(transformers, torch)
    model = load(hf, source, tmp_path, dtype)
    assert isinstance(model, attnc.models.GPT) and model.dtype == dtype and not model.training
    assert "lm_head.weight" not in model.state_dict()  # tied to wte, as GPT-2's
    ids = rng.integers(0, V, (B, L))
    logits, weights = model(ids, need_weights=True)
    out = reference(torch, hf, dtype)(torch.tensor(ids), output_attentions=True)
    assert logits.shape == (B, L, V) and logits.dtype == dtype
    close(logits, as_numpy(out.logits), TOL[dtype], "logits")
    assert len(weights) == NL == len(out.attentions)
    for i, (w, expected) in enumerate(zip(weights, out.attentions)):
        assert w.shape == (B, H, L, L)
        close(w, as_numpy(expected), TOL[dtype], f"layer {i} attention weights")
    np.testing.assert_array_equal(model(ids), logits)


def test_gpt2_model_without_head_gives_the_tied_heads_logits(transformers, torch, rng):
    """GPT2Model's checkpoint has no lm_head: the logits are its last hidden state times wte^T."""
    hf = gpt2(transformers, torch, "GPT2Model")
    ids = rng.integers(0, V, (B, L))
    out = hf(torch.tensor(ids))
    expected = as_numpy(out.last_hidden_state @ hf.wte.weight.T)
    close(attnc.models.from_pretrained(hf)(ids), expected, 1e-5, "logits")


def test_gpt2_original_checkpoint_layout(transformers, torch, tmp_path, rng):
    """The layout of the original GPT-2 checkpoints: GPT2Model's names (no
    transformer. prefix, no lm_head) and each layer's causal-mask buffers
    attn.bias and attn.masked_bias, which are skipped."""
    from safetensors.numpy import load_file, save_file

    hf = gpt2(transformers, torch, "GPT2Model")
    path = saved(hf, tmp_path / "checkpoint")
    file = os.path.join(path, "model.safetensors")
    tensors = load_file(file)
    assert "wte.weight" in tensors and "lm_head.weight" not in tensors
    for i in range(NL):
        tensors[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, P, P), np.float32))
        tensors[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    save_file(tensors, file)
    ids = rng.integers(0, V, (B, L))
    expected = as_numpy(hf(torch.tensor(ids)).last_hidden_state @ hf.wte.weight.T)
    close(attnc.models.from_pretrained(path)(ids), expected, 1e-5, "logits")


@pytest.mark.parametrize(
    "overrides",
    [dict(activation_function="gelu"), dict(activation_function="relu", n_inner=24), dict(layer_norm_epsilon=1e-3)],
    ids=["gelu", "relu-n_inner", "eps"],
)
def test_gpt2_config_variants(overrides, transformers, torch, tmp_path, rng):
    hf = gpt2(transformers, torch, **overrides)
    ids = rng.integers(0, V, (B, L))
    close(load(hf, "directory", tmp_path, np.float32)(ids), as_numpy(hf(torch.tensor(ids)).logits), 1e-5, "logits")


def test_gpt2_untied_head(transformers, torch, tmp_path, rng):
    """tie_word_embeddings=False: the checkpoint's own lm_head.weight is the output layer."""
    hf = gpt2(transformers, torch, tie_word_embeddings=False)
    with torch.no_grad():
        hf.lm_head.weight.normal_()
    model = load(hf, "directory", tmp_path, np.float32)
    np.testing.assert_array_equal(model.state_dict()["lm_head.weight"], as_numpy(hf.lm_head.weight))
    ids = rng.integers(0, V, (B, L))
    close(model(ids), as_numpy(hf(torch.tensor(ids)).logits), 1e-5, "logits")


def test_gpt2_gradients_match_torch_autograd(transformers, torch, rng):
    """attnc.vjp's gradients are torch's, mapped back to GPT-2's names (Conv1D
    transposed; wte's gradient sums the embedding and the tied head)."""
    hf = gpt2(transformers, torch).double()
    model = attnc.models.from_pretrained(hf, dtype=np.float64)
    ids = rng.integers(0, V, (B, L))
    dlogits = rng.standard_normal((B, L, V))
    _, pullback = attnc.vjp(model, ids)
    grads = pullback(dlogits)
    (hf(torch.tensor(ids)).logits * torch.from_numpy(dlogits)).sum().backward()
    layer, block = "encoder.layers.1.", hf.transformer.h[1]
    pairs = {
        "wte.weight": hf.transformer.wte.weight.grad,
        "wpe.weight": hf.transformer.wpe.weight.grad,
        "ln_f.weight": hf.transformer.ln_f.weight.grad,
        layer + "self_attn.in_proj_weight": block.attn.c_attn.weight.grad.T,
        layer + "self_attn.out_proj.weight": block.attn.c_proj.weight.grad.T,
        layer + "linear1.weight": block.mlp.c_fc.weight.grad.T,
        layer + "linear2.bias": block.mlp.c_proj.bias.grad,
        layer + "norm1.weight": block.ln_1.weight.grad,
    }
    assert set(grads) == set(model.state_dict())
    for name, expected in pairs.items():
        close(grads[name], as_numpy(expected), 1e-10, name)


def test_gpt2_generate_is_greedy_argmax_of_its_logits(transformers, torch, rng):
    """The C decoder runs the tanh GELU layers and the tied head: greedy decoding
    continues each prompt with the argmax of the full forward's last logits."""
    model = attnc.models.from_pretrained(gpt2(transformers, torch), dtype=np.float64)
    prompt = rng.integers(0, V, (2, 3))
    new = model.generate(prompt, 5)
    seq = prompt
    for _ in range(5):
        seq = np.concatenate([seq, model(seq)[:, -1].argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(new, seq[:, 3:])


# ---------------------------------------------------------------------------- BERT


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("source", ["object", "directory"])
def test_bert_hidden_states_pooler_and_attention_match_transformers(source, dtype, transformers, torch, tmp_path, rng):
    hf = bert(transformers, torch)
    model = load(hf, source, tmp_path, dtype)
    assert isinstance(model, attnc.models.BERT) and model.dtype == dtype and not model.training
    ids, mask = ids_and_mask(rng)
    types = rng.integers(0, 3, (B, L))
    hidden, weights = model(ids, attention_mask=mask, token_type_ids=types, need_weights=True)
    out = reference(torch, hf, dtype)(
        torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(types), output_attentions=True
    )
    assert hidden.shape == (B, L, E) and hidden.dtype == dtype
    close(hidden, as_numpy(out.last_hidden_state), TOL[dtype], "last hidden states")
    close(model.pooler(hidden), as_numpy(out.pooler_output), TOL[dtype], "pooler output")
    assert len(weights) == NL
    for i, (w, expected) in enumerate(zip(weights, out.attentions)):
        assert w.shape == (B, H, L, L)
        close(w, as_numpy(expected), TOL[dtype], f"layer {i} attention weights")
        assert np.all(w[2, :, :, 2:] == 0), "padded keys get no attention"
    # without a mask or token types: all tokens, type 0
    close(model(ids), as_numpy(reference(torch, hf, dtype)(torch.tensor(ids)).last_hidden_state), TOL[dtype], "no mask")


def test_bert_with_heads_loads_its_base(transformers, torch, tmp_path, rng):
    """BertForMaskedLM's checkpoint: the bert. weights load (no pooler: it has
    none), the cls. head is left out."""
    hf = bert(transformers, torch, "BertForMaskedLM")
    model = load(hf, "directory", tmp_path, np.float32)
    assert model.pooler is None
    ids, mask = ids_and_mask(rng)
    expected = hf.bert(torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
    close(model(ids, attention_mask=mask), as_numpy(expected), 1e-5, "hidden states")


def test_bert_old_layernorm_names_load(transformers, torch, tmp_path, rng):
    """Checkpoints written before transformers renamed LayerNorm.gamma / beta load too."""
    from safetensors.numpy import load_file, save_file

    hf = bert(transformers, torch)
    path = saved(hf, tmp_path / "checkpoint")
    file = os.path.join(path, "model.safetensors")
    tensors = load_file(file)
    renamed = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in tensors.items()
    }
    assert sum(k.endswith("gamma") for k in renamed) == 1 + NL * 2
    save_file(renamed, file)
    ids, _ = ids_and_mask(rng)
    close(attnc.models.from_pretrained(path)(ids), as_numpy(hf(torch.tensor(ids)).last_hidden_state), 1e-5, "hidden")


def test_bert_gradients_match_torch_autograd(transformers, torch, rng):
    hf = bert(transformers, torch).double()
    model = attnc.models.from_pretrained(hf, dtype=np.float64)
    ids, mask = ids_and_mask(rng)
    types = rng.integers(0, 3, (B, L))
    dh = rng.standard_normal((B, L, E))
    _, pullback = attnc.vjp(model, ids, attention_mask=mask, token_type_ids=types)
    grads = pullback(dh)
    out = hf(torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(types))
    (out.last_hidden_state * torch.from_numpy(dh)).sum().backward()
    emb, layer = hf.embeddings, hf.encoder.layer[0]
    attn = layer.attention.self
    pairs = {
        "word_embeddings.weight": emb.word_embeddings.weight.grad,
        "position_embeddings.weight": emb.position_embeddings.weight.grad,
        "token_type_embeddings.weight": emb.token_type_embeddings.weight.grad,
        "embeddings_norm.bias": emb.LayerNorm.bias.grad,
        "encoder.layers.0.self_attn.in_proj_weight": torch.cat(
            [attn.query.weight.grad, attn.key.weight.grad, attn.value.weight.grad]
        ),
        "encoder.layers.0.norm1.weight": layer.attention.output.LayerNorm.weight.grad,
        "encoder.layers.0.linear1.bias": layer.intermediate.dense.bias.grad,
    }
    assert set(grads) == set(model.state_dict())
    assert not grads["pooler.dense.weight"].any()  # the hidden states do not depend on the pooler
    for name, expected in pairs.items():
        close(grads[name], as_numpy(expected), 1e-10, name)
    # the pooler's own gradients: torch's for a cotangent on pooler_output
    h = out.last_hidden_state.detach().requires_grad_()
    dp = rng.standard_normal((B, E))
    (hf.pooler(h) * torch.from_numpy(dp)).sum().backward()
    _, pool_pullback = attnc.vjp(model.pooler, as_numpy(h))
    g = pool_pullback(dp)
    close(g["hidden_states"], as_numpy(h.grad), 1e-10, "pooler input")
    close(g["dense.weight"], as_numpy(hf.pooler.dense.weight.grad), 1e-10, "pooler weight")


def test_bert_input_errors(transformers, torch, rng):
    model = attnc.models.from_pretrained(bert(transformers, torch))
    ids, mask = ids_and_mask(rng)
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, attention_mask=mask[:, :-1])
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, attention_mask=2 * mask)
    with pytest.raises(ValueError, match="token_type_ids"):
        model(ids, token_type_ids=np.full((B, L), 3))
    with pytest.raises(ValueError, match="input_ids"):
        model(np.full((B, L), V))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(np.zeros((1, P + 1), np.int64))


# ---------------------------------------------------------------------------- errors


def _edit_config(path, **fields):
    file = os.path.join(path, "config.json")
    with open(file) as f:
        config = json.load(f)
    config.update(fields)
    with open(file, "w") as f:
        json.dump(config, f)


GPT2_UNSUPPORTED = [
    dict(activation_function="silu"),
    dict(scale_attn_by_inverse_layer_idx=True),
    dict(reorder_and_upcast_attn=True),
    dict(add_cross_attention=True),
    dict(scale_attn_weights=False),
    dict(attn_pdrop=0.0),
]
BERT_UNSUPPORTED = [
    dict(hidden_act="silu"),
    dict(is_decoder=True),
    dict(add_cross_attention=True),
    dict(position_embedding_type="relative_key"),
    dict(hidden_dropout_prob=0.2),
]


@pytest.mark.parametrize(
    "kind,fields",
    [("gpt2", f) for f in GPT2_UNSUPPORTED] + [("bert", f) for f in BERT_UNSUPPORTED],
    ids=[f"gpt2-{next(iter(f))}" for f in GPT2_UNSUPPORTED] + [f"bert-{next(iter(f))}" for f in BERT_UNSUPPORTED],
)
def test_unsupported_config_fields_are_named(kind, fields, transformers, torch, tmp_path):
    hf = (gpt2 if kind == "gpt2" else bert)(transformers, torch)
    path = saved(hf, tmp_path / "checkpoint")
    _edit_config(path, **fields)
    (field,) = fields
    with pytest.raises(ValueError, match=f"config field.* {field}="):
        attnc.models.from_pretrained(path)


def test_unsupported_config_of_an_object_is_named(transformers, torch):
    hf = gpt2(transformers, torch, scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        attnc.models.from_pretrained(hf)


def test_missing_and_wrong_sources(transformers, torch, tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        attnc.models.from_pretrained("gpt2")  # a hub name, not a directory
    path = saved(gpt2(transformers, torch), tmp_path / "checkpoint")
    os.remove(os.path.join(path, "model.safetensors"))
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        attnc.models.from_pretrained(path)
    os.remove(os.path.join(path, "config.json"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        attnc.models.from_pretrained(path)
    with pytest.raises(TypeError, match="source must be"):
        attnc.models.from_pretrained(np.zeros(3))
    path = saved(gpt2(transformers, torch), tmp_path / "other")
    _edit_config(path, model_type="llama")
    with pytest.raises(ValueError, match="model_type 'llama'"):
        attnc.models.from_pretrained(path)


def test_bfloat16_checkpoints(transformers, torch, tmp_path, rng):
    """A bfloat16 model object loads (its tensors cast); a bfloat16 directory,
    which NumPy cannot read, raises an error saying what to do."""
    hf = gpt2(transformers, torch).to(torch.bfloat16)
    ids = rng.integers(0, V, (B, L))
    model = attnc.models.from_pretrained(hf)
    np.testing.assert_array_equal(model.state_dict()["wpe.weight"], hf.transformer.wpe.weight.float().detach().numpy())
    assert np.isfinite(model(ids)).all()
    path = saved(hf, tmp_path / "checkpoint")
    with pytest.raises(TypeError, match="bfloat16 weights; load the model with transformers"):
        attnc.models.from_pretrained(path)


def test_weights_that_do_not_fit_are_named(transformers, torch, tmp_path):
    from safetensors.numpy import load_file, save_file

    path = saved(bert(transformers, torch), tmp_path / "checkpoint")
    file = os.path.join(path, "model.safetensors")
    tensors = load_file(file)
    good = dict(tensors)
    del tensors["encoder.layer.1.attention.self.key.bias"]
    tensors["encoder.layer.0.attention.self.rotary"] = np.zeros(3, np.float32)
    save_file(tensors, file)
    with pytest.raises(ValueError, match=r"missing weights \['encoder.layer.1.attention.self.key.bias'\]"):
        attnc.models.from_pretrained(path)
    with pytest.raises(ValueError, match="unexpected.*encoder.layer.0.attention.self.rotary"):
        attnc.models.from_pretrained(path)
    good["encoder.layer.0.output.dense.weight"] = np.zeros((E, 5), np.float32)
    save_file(good, file)
    with pytest.raises(ValueError, match=r"encoder.layer.0.output.dense.weight has shape \(16, 5\)"):
        attnc.models.from_pretrained(path)


# ------------------------------------------------------- torch's own attention modules


def test_tanh_gelu_layer_matches_torch(torch, rng):
    """TransformerEncoderLayer with activation=GELU(approximate="tanh") (attnc's
    or torch's module, as torch takes it) runs the tanh GELU in C: torch's
    outputs and gradients."""
    tm = torch.nn.TransformerEncoderLayer(
        E, H, 24, dropout=0.0, activation=torch.nn.GELU(approximate="tanh"), batch_first=True, dtype=torch.float64
    ).eval()
    for act in (nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh")):
        layer = nn.TransformerEncoderLayer(E, H, 24, dropout=0.0, activation=act, dtype=np.float64).eval()
        layer.load_state_dict(tm.state_dict())
        x = rng.standard_normal((B, L, E)) * 3  # wide enough that tanh and erf GELU differ
        dy = rng.standard_normal((B, L, E))
        y, pullback = attnc.vjp(layer, x)
        tx = torch.tensor(x, requires_grad=True)
        ty = tm(tx)
        (ty * torch.from_numpy(dy)).sum().backward()
        close(y, as_numpy(ty), 1e-12, "output")
        g = pullback(dy)
        close(g["src"], as_numpy(tx.grad), 1e-12, "input gradient")
        close(g["linear1.weight"], as_numpy(tm.linear1.weight.grad), 1e-12, "linear1 gradient")
        tm.zero_grad()
    exact = nn.TransformerEncoderLayer(E, H, 24, dropout=0.0, activation="gelu", dtype=np.float64).eval()
    exact.load_state_dict(tm.state_dict())
    assert np.abs(exact(x) - y).max() > 1e-6  # the two GELUs differ here: the test tells them apart


def test_torch_model_built_on_nn_transformer_loads_and_its_attention_matches(torch, rng):
    """A torch model whose attention is nn.TransformerEncoder (nn.MultiheadAttention
    inside): its encoder's state dict, torch tensors as they come, loads into
    attnc.nn.TransformerEncoder, and attnc's per-layer attention weights are
    torch's MultiheadAttention weights (need_weights=True, per head)."""

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(V, E)
            layer = torch.nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, NL, enable_nested_tensor=False)
            self.head = torch.nn.Linear(E, 5)

    torch.manual_seed(2)
    tagger = _randomise(torch, Tagger())
    state = tagger.state_dict()
    prefix = "encoder."
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, seed=0), NL).eval()
    encoder.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
    ids = rng.integers(0, V, (B, L))
    padding = np.zeros((B, L), bool)
    padding[1, 5:] = True
    x = tagger.embed(torch.tensor(ids))
    out, weights = encoder(as_numpy(x), src_key_padding_mask=padding, need_weights=True)
    h = x
    for i, layer in enumerate(tagger.encoder.layers):
        _, w = layer.self_attn(h, h, h, key_padding_mask=torch.tensor(padding), average_attn_weights=False)
        close(weights[i], as_numpy(w), 1e-6, f"layer {i} weights")
        h = layer(h, src_key_padding_mask=torch.tensor(padding))
    close(out, as_numpy(tagger.encoder(x, src_key_padding_mask=torch.tensor(padding))), 1e-5, "encoder output")


def test_loaded_models_save_and_load(transformers, torch, tmp_path, rng):
    """attnc.save / attnc.load keep a loaded GPT-2 (its GELU(approximate="tanh")
    activation argument, the tied head) and BERT (no pooler) as they are."""
    ids, mask = ids_and_mask(rng)
    for hf in (gpt2(transformers, torch), bert(transformers, torch, "BertForMaskedLM")):
        model = attnc.models.from_pretrained(hf)
        attnc.save(tmp_path / "model.npz", model)
        again = attnc.load(tmp_path / "model.npz")
        assert list(again.state_dict()) == list(model.state_dict())
        np.testing.assert_array_equal(again(ids), model(ids))


# ---------------------------------------------------------------------------- the views of a real model's text

TEXT = "The cat sat on the mat ."


def word_tokenizer(transformers):
    """A GPT-2-style tokenizer built here (tokenizers' WordLevel over whitespace), no files, no network."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<unk>", "The", "cat", "sat", "on", "the", "mat", "."])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def bert_tokenizer(transformers, tmp_path):
    """BERT's WordPiece tokenizer from a vocabulary file written here: it lower-cases and adds [CLS] and [SEP]."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return transformers.BertTokenizer(str(tmp_path / "vocab.txt"))


@pytest.mark.parametrize("view", ["head_view", "model_view", "matrix_view"])
@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_the_views_show_a_checkpoints_heads_for_a_text(kind, view, transformers, torch, tmp_path):
    """view(model, text, tokenizer=tok): the weights transformers' own eager
    attention gives for the tokenizer's ids, labelled by its tokens."""
    import attnc.viz

    hf = gpt2(transformers, torch) if kind == "gpt2" else bert(transformers, torch)
    tok = word_tokenizer(transformers) if kind == "gpt2" else bert_tokenizer(transformers, tmp_path)
    ids = tok(TEXT)["input_ids"]
    tokens = tok.convert_ids_to_tokens(ids)
    assert tokens == (TEXT.split() if kind == "gpt2" else ["[CLS]", *TEXT.lower().split(), "[SEP]"])
    shown = getattr(attnc.viz, view)(attnc.models.from_pretrained(hf), TEXT, tokenizer=tok)
    expected = np.stack([as_numpy(w[0]) for w in hf(torch.tensor([ids]), output_attentions=True).attentions])
    assert shown.data.shape == (expected.size,)
    close(shown.data, expected.ravel(), 1e-5, f"{kind} {view}'s weights")
    (a,) = shown.spec["attentions"]
    assert a["rows"] == a["cols"] == tokens


def test_a_tokenizer_labels_ids_and_text_needs_one(transformers, torch):
    import attnc.viz

    model = attnc.models.from_pretrained(gpt2(transformers, torch))
    tok = word_tokenizer(transformers)
    ids = np.array([[2, 3, 1], [4, 5, 6]])
    a = attnc.viz.head_view(model, ids, tokenizer=tok, batch=1).spec["attentions"][0]
    assert a["cols"] == ["on", "the", "mat"]
    with pytest.raises(TypeError, match=r"input given as text needs its tokenizer: pass tokenizer="):
        attnc.viz.head_view(model, TEXT)
    with pytest.raises(ValueError, match="give decode or tokenizer, not both"):
        attnc.viz.model_view(model, TEXT, tokenizer=tok, decode=str)
    with pytest.raises(TypeError, match="tokenizer must have the transformers tokenizer interface"):
        attnc.viz.matrix_view(model, TEXT, tokenizer={"The": 1})
    with pytest.raises(ValueError, match="tokenizer names a model's input ids; with weights as arrays"):
        attnc.viz.head_view(np.full((1, 2, 2), 0.5), ["a", "b"], tokenizer=tok)


def test_torch_transformer_encoder_weights_go_into_the_views(torch, rng):
    """torch's nn.TransformerEncoder: its layers' nn.MultiheadAttention
    weights (average_attn_weights=False) as they come, a list of torch
    tensors, and the attnc encoder its state dict loads into, run by the
    view, both show torch's weights."""
    import attnc.viz

    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, batch_first=True)
    encoder = _randomise(torch, torch.nn.TransformerEncoder(layer, NL, enable_nested_tensor=False))
    x = torch.randn(2, L, E)
    weights, h = [], x
    for block in encoder.layers:
        weights.append(block.self_attn(h, h, h, need_weights=True, average_attn_weights=False)[1])  # (B, H, L, L)
        h = block(h)
    expected = np.stack([as_numpy(w[1]) for w in weights])
    from_torch = attnc.viz.head_view(weights, [f"t{i}" for i in range(L)], batch=1)
    np.testing.assert_array_equal(from_torch.data, expected.ravel())
    mine = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, seed=0), NL).eval()
    mine.load_state_dict(encoder.state_dict())
    close(attnc.viz.matrix_view(mine, as_numpy(x), batch=1).data, expected.ravel(), 1e-6, "the attnc encoder's view")
