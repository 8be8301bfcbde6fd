"""The gated activation tanh(input) * sigmoid(gate) (csrc/ops/nn/gated.c): elementwise, any rank."""

OPS = [
    op("gated_forward", "attnc_gated_forward", out("output"), arr("input"), arr("gate")),
    op(
        "gated_backward", "attnc_gated_backward", out("dinput"), out("dgate"), arr("doutput"), arr("input"), arr("gate")
    ),
]
