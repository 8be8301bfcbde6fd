"""The long short-term memory-network (csrc/models/lstmn): whole-sequence forward and
backward."""

# attnc_lstmn_params' members (bias absent: no bias)
PARAMS = ("weight_ih", "weight_hh", "bias", "attn_h", "attn_x", "attn_tilde", "attn_v")


def params(name, role):
    return struct("attnc_lstmn_params", *(role(n) for n in PARAMS), name=name)


OPS = [
    op("lstmn_saved_size", "attnc_lstmn_saved_size", i64("B"), i64("T"), i64("H"), i64("A"), returns="int64"),
    op("lstmn_forward", "attnc_lstmn_forward",
       out("output"), out("attention"), out("saved"), arr("input"), arr("lengths"), params("params", arr)),
    op("lstmn_backward", "attnc_lstmn_backward",
       params("grads", out), out("dinput"), arr("doutput"), arr("saved"), arr("input"), arr("lengths"),
       params("params", arr)),
]
