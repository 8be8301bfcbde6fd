"""The pointer network's constrained greedy and beam-search decoding
(csrc/models/pointer/pointer.h; attnc.models.PointerNet.generate), and the check of
its lengths the model's training forward asks for."""

INCLUDES = ["../models/pointer/pointer.h"]

OPS = [
    op(
        "pointer_decode",
        "attnc_pointer_decode",
        out("out", ranks=2),
        out("counts", ranks=1),
        out("logits", ranks=3),
        arr("inputs", ranks=3),
        arr("lengths", ranks=1),
        arr("keys", ranks=3),
        arr("h0", ranks=2),
        arr("c0", ranks=2),
        struct(
            "attnc_pointer_params",
            arr("w_ih", ranks=2),
            arr("w_hh", ranks=2),
            arr("b_ih", ranks=1),
            arr("b_hh", ranks=1),
            arr("w2", ranks=2),
            arr("v", ranks=1),
            arr("start", ranks=1),
            name="params",
        ),
        enum("constraint", "attnc_pointer_constraint", 3),
        i64("beam_size", 1, lo=1),
        real("length_penalty", 0.0),
    ),
    op("pointer_check_lengths", "attnc_pointer_check_lengths", arr("lengths", ranks=1), i64("B", lo=0), i64("n", lo=0)),
]
