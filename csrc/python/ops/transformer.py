"""Transformer layers (csrc/ops/transformer): a layer's forward and backward, the
sizes of their buffers, and greedy / beam-search decoding over a stack."""

# attnc_layer_params' members by their C paths (attnc.nn.transformer maps them
# to torch's state_dict names): the dict of a layer's weights and of its gradients.
LAYER_PARAMS = tuple(f"{m}.{t}" for m in ("self_attn", "cross_attn")
                     for t in ("in_weight", "in_bias", "out_weight", "out_bias")) + \
    ("linear1_weight", "linear1_bias", "linear2_weight", "linear2_bias") + \
    tuple(f"{n}.{t}" for n in ("norm_self", "norm_cross", "norm_ff") for t in ("weight", "bias"))


def layer_config(into=""):
    """attnc_layer_config's members as keyword arguments (into: the path of
    the struct member that holds them)."""
    return (i64("nhead", lo=1, field=into + "nhead"),
            enum("activation", "attnc_activation", 4, field=into + "activation"),
            real("eps", lo=0, field=into + "eps"), flag("norm_first", field=into + "norm_first"),
            real("dropout", 0.0, lo=0, hi=1, field=into + "dropout"), u64("seed", field=into + "seed"))


CONFIG = struct("attnc_layer_config", *layer_config())
# Which keys each query sees: a torch-style attention mask and key padding
# mask (as the kernels take them) and a causal flag, in self- and in
# cross-attention.
SELF_MASKS = struct("attnc_attn_masks", arr("attn_mask", field="masks[0]"), arr("key_padding_mask", field="masks[1]"),
                    flag("is_causal", field="causal"))
CROSS_MASKS = struct("attnc_attn_masks", arr("memory_mask", field="masks[0]"),
                     arr("memory_key_padding_mask", field="masks[1]"), flag("memory_is_causal", field="causal"))

OPS = [
    op("layer_saved_size", "attnc_layer_saved_size",
       i64("B"), i64("L"), i64("S"), i64("E"), i64("F"), i64("H"), flag("decoder"), returns="int64"),
    op("layer_scratch_size", "attnc_layer_scratch_size",
       i64("B"), i64("L"), i64("S"), i64("E"), i64("F"), flag("decoder"), returns="int64"),
    op("layer_forward", "attnc_layer_forward",
       out("output"), out("weights_self"), out("weights_cross"), out("saved"), arr("input"), arr("memory"),
       struct("attnc_layer_params", *(arr(m) for m in LAYER_PARAMS), name="params"), CONFIG, SELF_MASKS,
       CROSS_MASKS),
    op("layer_backward", "attnc_layer_backward",
       out("dinput"), out("dmemory"), struct("attnc_layer_params", *(out(m) for m in LAYER_PARAMS), name="grads"),
       out("scratch"), arr("doutput"), arr("saved"), arr("input"), arr("memory"),
       struct("attnc_layer_params", *(arr(m) for m in LAYER_PARAMS), name="params"), CONFIG, SELF_MASKS,
       CROSS_MASKS),
    op("decode", "attnc_decode",
       out("tokens"), out("lengths"),
       struct("attnc_decoder",
              struct_list("layers", "attnc_layer_params", *(arr(m) for m in LAYER_PARAMS), field="layers",
                          count="nlayers"),
              *layer_config("config."), arr("embedding"), arr("positions"), real("embed_scale", 1.0),
              arr("norm_weight", field="final_norm.weight"), arr("norm_bias", field="final_norm.bias"),
              arr("out_weight"), arr("out_bias")),
       arr("prompt"), arr("memory"), arr("memory_mask"),
       struct("attnc_decode_options", i64("max_new_tokens", lo=0), i64("eos", -1, lo=-1), i64("beam_size", 1, lo=1),
              real("length_penalty", 0.0))),
]
