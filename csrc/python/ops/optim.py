"""The optimisers' fused updates (csrc/ops/optim): flat over the elements, any rank."""

OPS = [
    op(
        "adam_step",
        "attnc_adam_step",
        out("param"),
        arr("grad"),
        out("exp_avg"),
        out("exp_avg_sq"),
        struct(
            "attnc_adam_options",
            real("lr"),
            real("beta1"),
            real("beta2"),
            real("eps"),
            real("weight_decay"),
            flag("decoupled"),
            i64("step"),
        ),
    ),
]
