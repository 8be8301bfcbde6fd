"""Attention pooling (csrc/ops/pooling)."""

OPS = [
    op("attention_pool_forward", "attnc_attention_pool_forward",
       out("output"), out("weights"), out("saved"), arr("input"), arr("weight"), arr("bias"), arr("v"), arr("mask")),
    op("attention_pool_backward", "attnc_attention_pool_backward",
       out("dinput"), out("dweight"), out("dbias"), out("dv"), arr("doutput"), arr("dweights"), arr("input"),
       arr("weight"), arr("v"), arr("weights"), arr("saved")),
]
