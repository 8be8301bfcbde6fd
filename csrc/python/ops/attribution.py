"""Attention attribution (csrc/ops/attribution): rollout, flow, relevance."""

# weights and grads (N, B, H, L, L): the layers stacked by the Python side
FUSED = (enum("head_fusion", "attnc_head_fusion", 3, default=0), real("residual", 0.5, lo=0, hi=1))

OPS = [
    op("attention_rollout", "attnc_attention_rollout", out("rollout", ranks=3), arr("weights", ranks=5), *FUSED),
    op("attention_flow", "attnc_attention_flow", out("flow", ranks=3), arr("weights", ranks=5), *FUSED),
    op(
        "attention_relevance",
        "attnc_attention_relevance",
        out("relevance", ranks=3),
        arr("weights", ranks=5),
        arr("grads", ranks=5),
    ),
]
