"""The long short-term memory-network (csrc/models/lstmn): whole-sequence forward and
backward."""

# attnc_lstmn_params' members and their ranks (bias absent: no bias)
PARAMS = {"weight_ih": 2, "weight_hh": 2, "bias": 1, "attn_h": 2, "attn_x": 2, "attn_tilde": 2, "attn_v": 1}


def params(name, role):
    return struct("attnc_lstmn_params", *(role(n, ranks=r) for n, r in PARAMS.items()), name=name)


OPS = [
    op("lstmn_saved_size", "attnc_lstmn_saved_size", i64("B"), i64("T"), i64("H"), i64("A"), returns="int64"),
    op(
        "lstmn_forward",
        "attnc_lstmn_forward",
        out("output", ranks=3),
        out("attention", ranks=3),
        out("saved", ranks=1),
        arr("input", ranks=3),
        arr("lengths", ranks=1),
        params("params", arr),
    ),
    op(
        "lstmn_backward",
        "attnc_lstmn_backward",
        params("grads", out),
        out("dinput", ranks=3),
        arr("doutput", ranks=3),
        arr("saved", ranks=1),
        arr("input", ranks=3),
        arr("lengths", ranks=1),
        params("params", arr),
    ),
]
