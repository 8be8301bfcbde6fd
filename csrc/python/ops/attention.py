"""The attention family (csrc/ops/attention): scores, the masked softmax, soft,
hard and local attention, the fused scaled-dot-product attention."""

# attnc_score_params: the score's kind, scalars and parameters, a dict
# `params` keyed by the C member names (built once per call, in _spec.Score).
PARAMS = struct("attnc_score_params",
                enum("kind", "attnc_score_kind", 7), real("scale", 1.0), real("bandwidth", 1.0),
                real("beta_scalar", 1.0), arr("weight"), arr("w_query"), arr("w_key"), arr("v"), arr("beta"),
                out("projections"), flag("projections_ready"), name="params")
# attnc_score_grads: a dict sharing the parameters' names; the two scalar
# gradients come back as the call's result when wanted.
DPARAMS = struct("attnc_score_grads",
                 out("weight"), out("w_query"), out("w_key"), out("v"), out("beta"),
                 scalar_out("dscale", "scale", "want_scale"),
                 scalar_out("dbandwidth", "bandwidth", "want_bandwidth"), name="dparams")
MASK = struct("attnc_mask", arr("mask"), arr("key_lengths"), flag("causal"))
HARD = struct("attnc_hard_options", enum("mode", "attnc_hard_mode", 3), real("temperature"), u64("seed"))
LOCAL = struct("attnc_local_options",
               enum("mode", "attnc_local_mode", 2), real("window"), arr("positions"), arr("w_p"), arr("v_p"))
SDPA = struct("attnc_sdpa_options",
              arr("attn_mask", field="masks[0]"), arr("key_padding_mask", field="masks[1]"), flag("causal"),
              i64("causal_offset", 0), real("scale"), real("dropout_p", 0.0), u64("seed"), flag("average_heads"),
              name="options")

OPS = [
    op("score_forward", "attnc_score_forward", out("scores"), arr("query"), arr("keys"), PARAMS),
    op("score_backward", "attnc_score_backward",
       out("dquery"), out("dkeys"), DPARAMS, arr("dscores"), arr("query"), arr("keys"), PARAMS),
    op("softmax_forward", "attnc_softmax_forward", out("weights"), arr("scores"), MASK),
    op("softmax_backward", "attnc_softmax_backward", out("dscores"), arr("dweights"), arr("weights")),
    op("attention_forward", "attnc_attention_forward",
       out("context"), out("weights"), arr("query"), arr("keys"), arr("values"), PARAMS, MASK),
    op("attention_backward", "attnc_attention_backward",
       out("dquery"), out("dkeys"), out("dvalues"), DPARAMS, arr("dcontext"), arr("dweights"), arr("query"),
       arr("keys"), arr("values"), arr("weights"), PARAMS),
    op("hard_attention_forward", "attnc_hard_attention_forward",
       out("context"), out("weights"), out("indices"), arr("query"), arr("keys"), arr("values"), PARAMS, MASK,
       HARD),
    op("hard_attention_backward", "attnc_hard_attention_backward",
       out("dquery"), out("dkeys"), out("dvalues"), DPARAMS, arr("dcontext"), arr("dweights"), arr("query"),
       arr("keys"), arr("values"), arr("indices"), PARAMS, MASK, HARD),
    # positions_out: the centres the forward returns (the options' positions are the given ones)
    op("local_attention_forward", "attnc_local_attention_forward",
       out("context"), out("weights"), out("positions_out"), arr("query"), arr("keys"), arr("values"), PARAMS,
       MASK, LOCAL),
    op("local_attention_backward", "attnc_local_attention_backward",
       out("dquery"), out("dkeys"), out("dvalues"), DPARAMS, out("dw_p"), out("dv_p"), arr("dcontext"),
       arr("dweights"), arr("dpositions"), arr("query"), arr("keys"), arr("values"), arr("weights"),
       arr("positions_out"), PARAMS, MASK, LOCAL),
    op("sdpa_forward", "attnc_sdpa_forward",
       out("output"), out("lse"), out("weights"), arr("query"), arr("key"), arr("value"), SDPA),
    op("sdpa_backward", "attnc_sdpa_backward",
       out("dquery"), out("dkey"), out("dvalue"), out("dmask"), arr("doutput"), arr("dweights"), arr("query"),
       arr("key"), arr("value"), arr("output"), arr("lse"), SDPA),
]
