"""The show-attend-tell captioner's decoder (csrc/models/captioner): teacher-forced
forward and backward through time, and decoding."""

INCLUDES = ("../models/captioner/captioner.h",)

# attnc_captioner_params' members, in order (gate_w, gate_b absent without the
# gate): the weight matrices are 2-d, the biases (*_b, b_*) 1-d
PARAMS = (
    "embedding",
    "init_h_w",
    "init_h_b",
    "init_c_w",
    "init_c_b",
    "att_feat_w",
    "att_feat_b",
    "att_hidden_w",
    "att_score_w",
    "gate_w",
    "gate_b",
    "w_ih",
    "w_hh",
    "b_ih",
    "b_hh",
    "out_h_w",
    "out_z_w",
    "out_w",
    "out_b",
)


def params(name, role):
    return struct(
        "attnc_captioner_params", *(role(n, ranks=1 if "b_" in n or n.endswith("_b") else 2) for n in PARAMS), name=name
    )


def config():
    return struct(
        "attnc_captioner_config",
        enum("mode", "attnc_caption_mode", 4),
        flag("gate"),
        u64("seed"),
        real("expect_prob", 0.0),
    )


OPS = [
    op(
        "captioner_saved_size",
        "attnc_captioner_saved_size",
        i64("B"),
        i64("T"),
        i64("L"),
        i64("F"),
        i64("E"),
        i64("H"),
        i64("A"),
        returns="int64",
    ),
    op(
        "captioner_forward",
        "attnc_captioner_forward",
        out("logits", ranks=3),
        out("alphas", ranks=3),
        out("samples", ranks=2),
        out("saved", ranks=1),
        arr("features", ranks=3),
        arr("tokens", ranks=2),
        params("params", arr),
        config(),
    ),
    op(
        "captioner_backward",
        "attnc_captioner_backward",
        params("grads", out),
        out("dfeatures", ranks=3),
        arr("dlogits", ranks=3),
        arr("dalphas", ranks=3),
        arr("dlogp", ranks=2),
        arr("saved", ranks=1),
        arr("features", ranks=3),
        arr("tokens", ranks=2),
        arr("samples", ranks=2),
        params("params", arr),
        config(),
    ),
    op(
        "captioner_generate",
        "attnc_captioner_generate",
        out("tokens", ranks=2),
        out("lengths", ranks=1),
        out("alphas", ranks=3),
        arr("features", ranks=3),
        params("params", arr),
        config(),
        i64("bos"),
        i64("eos"),
        i64("beam_size"),
        real("length_penalty"),
    ),
]
