"""Rotary position embeddings (csrc/ops/nn/rotary.c): x (..., L, D), positions (..., L) float64."""

ROTARY_OPTIONS = (real("base", 10000.0), i64("rotary_dim"), flag("interleaved"))

OPS = [
    op(
        "rotary_forward",
        "attnc_rotary_forward",
        out("output", ranks="2+"),
        arr("input", ranks="2+"),
        arr("positions", ranks="1+"),
        *ROTARY_OPTIONS,
    ),
    op(
        "rotary_backward",
        "attnc_rotary_backward",
        out("dinput", ranks="2+"),
        arr("doutput", ranks="2+"),
        arr("positions", ranks="1+"),
        *ROTARY_OPTIONS,
    ),
]
