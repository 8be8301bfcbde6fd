"""Attention pooling (csrc/ops/pooling)."""

OPS = [
    op(
        "attention_pool_forward",
        "attnc_attention_pool_forward",
        out("output", ranks=2),
        out("weights", ranks=2),
        out("saved", ranks=3),
        arr("input", ranks=3),
        arr("weight", ranks=2),
        arr("bias", ranks=1),
        arr("v", ranks=1),
        arr("mask", ranks=2),
    ),
    op(
        "attention_pool_backward",
        "attnc_attention_pool_backward",
        out("dinput", ranks=3),
        out("dweight", ranks=2),
        out("dbias", ranks=1),
        out("dv", ranks=1),
        arr("doutput", ranks=2),
        arr("dweights", ranks=2),
        arr("input", ranks=3),
        arr("weight", ranks=2),
        arr("v", ranks=1),
        arr("weights", ranks=2),
        arr("saved", ranks=3),
    ),
]
