"""Transformer layers (csrc/ops/transformer): a layer's forward and backward, the
sizes of their buffers, and greedy / beam-search decoding over a stack."""

# attnc_layer_params' members by their C paths (attnc.nn.transformer maps them
# to torch's state_dict names): the dict of a layer's weights and of its gradients.
LAYER_PARAMS = (
    tuple(
        f"{m}.{t}"
        for m in ("self_attn", "cross_attn")
        for t in ("in_weight", "in_bias", "out_weight", "out_bias", "sinks")
    )
    + ("linear1_weight", "linear1_bias", "linear2_weight", "linear2_bias")
    + tuple(f"{n}.{t}" for n in ("norm_self", "norm_cross", "norm_ff") for t in ("weight", "bias"))
)


def layer_params(role):
    """A layer's weights (2-d) and biases and norms' parameters (1-d), by role."""
    return tuple(role(m, ranks=2 if m.endswith("weight") and not m.startswith("norm") else 1) for m in LAYER_PARAMS)


def layer_config(into=""):
    """attnc_layer_config's members as keyword arguments (into: the path of
    the struct member that holds them)."""
    return (
        i64("nhead", lo=1, field=into + "nhead"),
        enum("activation", "attnc_activation", 4, field=into + "activation"),
        real("eps", lo=0, field=into + "eps"),
        flag("norm_first", field=into + "norm_first"),
        real("dropout", 0.0, lo=0, hi=1, field=into + "dropout"),
        u64("seed", field=into + "seed"),
        i64("kv_heads", 0, lo=0, field=into + "kv_heads"),
        i64("rotary_dim", 0, lo=0, field=into + "rotary_dim"),
        real("rope_base", 10000.0, field=into + "rope_base"),
        flag("rope_interleaved", field=into + "rope_interleaved"),
        # the self-attention's options of today's models, as attnc_sdpa_options has them
        arr("alibi_slopes", field=into + "alibi_slopes", ranks=1),
        flag("window", field=into + "window"),
        i64("window_left", -1, lo=-1, field=into + "window_left"),
        i64("window_right", -1, lo=-1, field=into + "window_right"),
        real("softcap", 0.0, lo=0, field=into + "softcap"),
        # every attention's activation (attnc_sdpa_activation) and sigmoid's bias
        enum("attention", "attnc_sdpa_activation", 2, 0, field=into + "attention"),
        flag("sigmoid_bias_set", field=into + "sigmoid_bias_set"),
        real("sigmoid_bias", 0.0, field=into + "sigmoid_bias"),
    )


CONFIG = struct("attnc_layer_config", *layer_config())


def block_masks(prefix):
    """attnc_attn_masks' block masks as keywords named prefix + member."""
    return (
        arr(prefix + "query_segments", field="query_segments", ranks=2),
        arr(prefix + "key_segments", field="key_segments", ranks=2),
        arr(prefix + "prefix_lengths", field="prefix_lengths", ranks=1),
        arr(prefix + "block_mask", field="block_mask", ranks=4),
        i64(prefix + "block_q", 0, lo=0, field="block_q"),
        i64(prefix + "block_k", 0, lo=0, field="block_k"),
    )


# Which keys each query sees: a torch-style attention mask and key padding
# mask (as the kernels take them: broadcast to (B, H, L, S)), a causal
# flag and the block masks, in self- and in cross-attention.
SELF_MASKS = struct(
    "attnc_attn_masks",
    arr("attn_mask", field="masks[0]", ranks=4),
    arr("key_padding_mask", field="masks[1]", ranks=4),
    flag("is_causal", field="causal"),
    *block_masks("self_"),
)
CROSS_MASKS = struct(
    "attnc_attn_masks",
    arr("memory_mask", field="masks[0]", ranks=4),
    arr("memory_key_padding_mask", field="masks[1]", ranks=4),
    flag("memory_is_causal", field="causal"),
    *block_masks("cross_"),
)

OPS = [
    op(
        "layer_saved_size",
        "attnc_layer_saved_size",
        i64("B"),
        i64("L"),
        i64("S"),
        i64("E"),
        i64("F"),
        i64("H"),
        flag("decoder"),
        returns="int64",
    ),
    op(
        "layer_scratch_size",
        "attnc_layer_scratch_size",
        i64("B"),
        i64("L"),
        i64("S"),
        i64("E"),
        i64("F"),
        flag("decoder"),
        returns="int64",
    ),
    op(
        "layer_forward",
        "attnc_layer_forward",
        out("output", ranks=3),
        out("weights_self", ranks=4),
        out("weights_cross", ranks=4),
        out("saved", ranks=1),
        arr("input", ranks=3),
        arr("memory", ranks=3),
        struct("attnc_layer_params", *layer_params(arr), name="params"),
        CONFIG,
        SELF_MASKS,
        CROSS_MASKS,
    ),
    op(
        "layer_backward",
        "attnc_layer_backward",
        out("dinput", ranks=3),
        out("dmemory", ranks=3),
        out("dweights_self", ranks=4),
        struct("attnc_layer_params", *layer_params(out), name="grads"),
        out("scratch", ranks=1),
        arr("doutput", ranks=3),
        arr("saved", ranks=1),
        arr("input", ranks=3),
        arr("memory", ranks=3),
        struct("attnc_layer_params", *layer_params(arr), name="params"),
        CONFIG,
        SELF_MASKS,
        CROSS_MASKS,
    ),
    op(
        "decode",
        "attnc_decode",
        out("tokens", ranks=2),
        out("lengths", ranks=1),
        struct(
            "attnc_decoder",
            struct_list("layers", "attnc_layer_params", *layer_params(arr), field="layers", count="nlayers"),
            *layer_config("config."),
            arr("embedding", ranks=2),
            arr("positions", ranks=2),
            real("embed_scale", 1.0),
            arr("norm_weight", field="final_norm.weight", ranks=1),
            arr("norm_bias", field="final_norm.bias", ranks=1),
            arr("out_weight", ranks=2),
            arr("out_bias", ranks=1),
        ),
        arr("prompt", ranks=2),
        arr("memory", ranks=3),
        arr("memory_mask", ranks=2),
        struct(
            "attnc_decode_options",
            i64("max_new_tokens", lo=0),
            i64("eos", -1, lo=-1),
            i64("beam_size", 1, lo=1),
            real("length_penalty", 0.0),
        ),
    ),
]
