"""Linear attention and FAVOR+ (csrc/ops/linear): (B, H, L, E) queries,
(B, H, S, E) keys, (B, H, S, Ev) values."""

OPTIONS = struct(
    "attnc_linear_options",
    enum("feature_map", "attnc_feature_map", 2, default=0),
    arr("projection", ranks=2),
    arr("key_padding_mask", ranks=2),
    flag("causal"),
    real("eps", 1e-6, lo=0),
)
# a causal call's running sums, read and overwritten (recurrent decoding)
STATE = struct(
    "attnc_linear_state",
    out("state_kv", field="kv", ranks=4),
    out("state_k", field="k", ranks=3),
    out("state_max", field="max", ranks=2),
)
QKV = (arr("query", ranks=4), arr("key", ranks=4), arr("value", ranks=4))

OPS = [
    op("linear_attention_forward", "attnc_linear_attention_forward", out("out", ranks=4), STATE, *QKV, OPTIONS),
    op(
        "linear_attention_backward",
        "attnc_linear_attention_backward",
        out("dquery", ranks=4),
        out("dkey", ranks=4),
        out("dvalue", ranks=4),
        out("dprojection", ranks=2),
        arr("dout", ranks=4),
        *QKV,
        OPTIONS,
    ),
]
