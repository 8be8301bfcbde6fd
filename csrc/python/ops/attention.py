"""The attention family (csrc/ops/attention): scores, the masked softmax, soft,
hard and local attention, the fused scaled-dot-product attention.

Ranks: "2+" is (..., T, d), any leading batch dims (the query's, which every
other array of the call shares); "0+" the batch dims alone."""

# attnc_score_params: the score's kind, scalars and parameters, a dict
# `params` keyed by the C member names (built once per call, in _spec.Score).
PARAMS = struct(
    "attnc_score_params",
    enum("kind", "attnc_score_kind", 7),
    real("scale", 1.0),
    real("bandwidth", 1.0),
    real("beta_scalar", 1.0),
    arr("weight", ranks=2),
    arr("w_query", ranks=2),
    arr("w_key", ranks=2),
    arr("v", ranks=1),
    arr("beta", ranks="1+"),
    out("projections", ranks=1),
    flag("projections_ready"),
    name="params",
)
# attnc_score_grads: a dict sharing the parameters' names; the two scalar
# gradients come back as the call's result when wanted.
DPARAMS = struct(
    "attnc_score_grads",
    out("weight", ranks=2),
    out("w_query", ranks=2),
    out("w_key", ranks=2),
    out("v", ranks=1),
    out("beta", ranks="1+"),
    scalar_out("dscale", "scale", "want_scale"),
    scalar_out("dbandwidth", "bandwidth", "want_bandwidth"),
    name="dparams",
)
MASK = struct("attnc_mask", arr("mask", ranks="2+"), arr("key_lengths", ranks="0+"), flag("causal"))
HARD = struct("attnc_hard_options", enum("mode", "attnc_hard_mode", 3), real("temperature"), u64("seed"))
LOCAL = struct(
    "attnc_local_options",
    enum("mode", "attnc_local_mode", 2),
    real("window"),
    arr("positions", ranks="1+"),
    arr("w_p", ranks=2),
    arr("v_p", ranks=1),
)
# (..., H, L, E): any leading batch dims before the heads
SDPA = struct(
    "attnc_sdpa_options",
    arr("attn_mask", field="masks[0]", ranks="3+"),
    arr("key_padding_mask", field="masks[1]", ranks="3+"),
    flag("causal"),
    i64("causal_offset", 0),
    real("scale"),
    real("dropout_p", 0.0),
    u64("seed"),
    flag("average_heads"),
    arr("alibi_slopes", ranks=1),
    flag("window"),
    i64("window_left", -1),
    i64("window_right", -1),
    real("softcap", 0.0),
    arr("sinks", ranks=1),
    arr("query_segments", ranks="1+"),
    arr("key_segments", ranks="1+"),
    arr("prefix_lengths", ranks="0+"),
    arr("block_mask", ranks="3+"),
    i64("block_q", 0),
    i64("block_k", 0),
    enum("activation", "attnc_sdpa_activation", 2, 0),
    real("sigmoid_bias", 0.0),
    name="options",
)


def batched(role, *names):
    """(..., T, d) arrays: any leading batch dims."""
    return tuple(role(n, ranks="2+") for n in names)


OPS = [
    op("score_forward", "attnc_score_forward", *batched(out, "scores"), *batched(arr, "query", "keys"), PARAMS),
    op(
        "score_backward",
        "attnc_score_backward",
        *batched(out, "dquery", "dkeys"),
        DPARAMS,
        *batched(arr, "dscores", "query", "keys"),
        PARAMS,
    ),
    op("softmax_forward", "attnc_softmax_forward", *batched(out, "weights"), *batched(arr, "scores"), MASK),
    op("softmax_backward", "attnc_softmax_backward", *batched(out, "dscores"), *batched(arr, "dweights", "weights")),
    op(
        "attention_forward",
        "attnc_attention_forward",
        *batched(out, "context", "weights"),
        *batched(arr, "query", "keys", "values"),
        PARAMS,
        MASK,
    ),
    op(
        "attention_backward",
        "attnc_attention_backward",
        *batched(out, "dquery", "dkeys", "dvalues"),
        DPARAMS,
        *batched(arr, "dcontext", "dweights", "query", "keys", "values", "weights"),
        PARAMS,
    ),
    op(
        "hard_attention_forward",
        "attnc_hard_attention_forward",
        *batched(out, "context", "weights"),
        out("indices", ranks="1+"),
        *batched(arr, "query", "keys", "values"),
        PARAMS,
        MASK,
        HARD,
    ),
    op(
        "hard_attention_backward",
        "attnc_hard_attention_backward",
        *batched(out, "dquery", "dkeys", "dvalues"),
        DPARAMS,
        *batched(arr, "dcontext", "dweights", "query", "keys", "values"),
        arr("indices", ranks="1+"),
        PARAMS,
        MASK,
        HARD,
    ),
    # positions_out: the centres the forward returns (the options' positions are the given ones)
    op(
        "local_attention_forward",
        "attnc_local_attention_forward",
        *batched(out, "context", "weights"),
        out("positions_out", ranks="1+"),
        *batched(arr, "query", "keys", "values"),
        PARAMS,
        MASK,
        LOCAL,
    ),
    op(
        "local_attention_backward",
        "attnc_local_attention_backward",
        *batched(out, "dquery", "dkeys", "dvalues"),
        DPARAMS,
        out("dw_p", ranks=2),
        out("dv_p", ranks=1),
        *batched(arr, "dcontext", "dweights"),
        arr("dpositions", ranks="1+"),
        *batched(arr, "query", "keys", "values", "weights"),
        arr("positions_out", ranks="1+"),
        PARAMS,
        MASK,
        LOCAL,
    ),
    op(
        "sdpa_forward",
        "attnc_sdpa_forward",
        out("output", ranks="3+"),
        out("lse", ranks="2+"),
        out("weights", ranks="3+"),
        arr("query", ranks="3+"),
        arr("key", ranks="3+"),
        arr("value", ranks="3+"),
        SDPA,
    ),
    op(
        "sdpa_backward",
        "attnc_sdpa_backward",
        *(out(n, ranks="3+") for n in ("dquery", "dkey", "dvalue", "dmask")),
        out("dsinks", ranks=1),
        out("dalibi_slopes", ranks=1),
        *(arr(n, ranks="3+") for n in ("doutput", "dweights", "query", "key", "value", "output")),
        arr("lse", ranks="2+"),
        SDPA,
    ),
]
