"""Layers (csrc/ops/nn): linear, layer norm, embedding, cross-entropy, log-softmax,
the pointwise activations."""

# (N, C) rows (the Python side flattens leading dims), their per-row (N,) and per-column (C,) vectors
CE_OPTIONS = struct("attnc_cross_entropy_options", arr("weight", ranks=1), real("label_smoothing", 0.0, lo=0, hi=1),
                    i64("ignore_index", -100))

OPS = [
    op("linear_forward", "attnc_linear_forward",
       out("output", ranks=2), arr("input", ranks=2), arr("weight", ranks=2), arr("bias", ranks=1)),
    op("linear_backward", "attnc_linear_backward",
       out("dinput", ranks=2), out("dweight", ranks=2), out("dbias", ranks=1), arr("doutput", ranks=2),
       arr("input", ranks=2), arr("weight", ranks=2)),
    op("layer_norm_forward", "attnc_layer_norm_forward",
       out("output", ranks=2), out("mean", ranks=1), out("rstd", ranks=1), arr("input", ranks=2),
       arr("weight", ranks=1), arr("bias", ranks=1), real("eps", lo=0)),
    op("layer_norm_backward", "attnc_layer_norm_backward",
       out("dinput", ranks=2), out("dweight", ranks=1), out("dbias", ranks=1), arr("doutput", ranks=2),
       arr("input", ranks=2), arr("weight", ranks=1), arr("mean", ranks=1), arr("rstd", ranks=1)),
    op("embedding_forward", "attnc_embedding_forward",
       out("output", ranks=2), arr("input", ranks=1), arr("weight", ranks=2), real("scale", 1.0),
       real("max_norm", float("inf")), real("norm_type", 2.0)),
    op("embedding_backward", "attnc_embedding_backward",
       out("dweight", ranks=2), arr("doutput", ranks=2), arr("input", ranks=1), real("scale", 1.0),
       i64("padding_idx", -1)),
    op("cross_entropy_forward", "attnc_cross_entropy_forward",
       out("losses", ranks=1), out("logsumexp", ranks=1), arr("input", ranks=2), arr("target", ranks=(1, 2)),
       CE_OPTIONS),
    op("cross_entropy_backward", "attnc_cross_entropy_backward",
       out("dinput", ranks=2), out("dtarget", ranks=2), out("dweight", ranks=1), arr("dlosses", ranks=1),
       arr("input", ranks=2), arr("target", ranks=(1, 2)), arr("logsumexp", ranks=1), CE_OPTIONS),
    op("log_softmax_forward", "attnc_log_softmax_forward", out("output", ranks=2), arr("input", ranks=2)),
    op("log_softmax_backward", "attnc_log_softmax_backward",
       out("dinput", ranks=2), arr("doutput", ranks=2), arr("output", ranks=2)),
    # y = dropout(act(x)), csrc/ops/nn/pointwise.c without its residual; elementwise: any rank
    op("activation_forward", "attnc_pointwise_forward",
       out("output"), arr("input"), absent(), enum("activation", "attnc_activation", 4), real("p", 0.0, lo=0, hi=1),
       u64("seed"), u64("stream")),
    op("activation_backward", "attnc_pointwise_backward",
       out("dinput"), arr("doutput"), arr("input"), enum("activation", "attnc_activation", 4),
       real("p", 0.0, lo=0, hi=1), u64("seed"), u64("stream")),
]
