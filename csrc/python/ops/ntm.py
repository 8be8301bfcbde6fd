"""The Neural Turing Machine (csrc/models/ntm): its addressing and memory operations
(ntm.h) and the whole model's forward and backward through time (model.h)."""

INCLUDES = ("../models/ntm/ntm.h", "../models/ntm/model.h")

# The arrays' ranks by name: the addressing and memory operations' (B, heads, N)
# weightings, (B, N, M) memories and (B, heads, M) keys, erase and add vectors
# are 3-d, the per-head scalars (B, heads) 2-d; the model's parameters: weights
# 2-d, biases 1-d; its saved buffer flat; its per-step outputs 4-d.
RANKS = {
    "beta": 2,
    "g": 2,
    "gamma": 2,
    "w_ih": 2,
    "w_hh": 2,
    "b_ih": 1,
    "b_hh": 1,
    "head_w": 2,
    "head_b": 1,
    "out_w": 2,
    "out_b": 1,
    "saved": 1,
    "memories": 4,
}


def a(name, role=arr):
    """An array with its rank (a gradient's: its variable's, dbeta's beta's)."""
    return role(name, ranks=RANKS.get(name, RANKS.get(name[1:], 3)))


def o(name):
    return a(name, out)


# attnc_ntm_address_args' members: the addressing pipeline's inputs
ADDRESS = ("key", "beta", "g", "s", "gamma", "w_prev", "memory")
# attnc_ntm_params' members (the feedforward controller has no w_hh, b_hh)
PARAMS = ("w_ih", "w_hh", "b_ih", "b_hh", "head_w", "head_b", "out_w", "out_b")
# attnc_ntm_state's members: the state before the first step
STATE = ("memory", "reads", "weights")


def tensors(ctype, members, role, name=None):
    return struct(ctype, *(a(n, role) for n in members), name=name)


def config():
    return struct("attnc_ntm_config", flag("lstm"), i64("read_heads"), i64("write_heads"), real("clip"))


OPS = [
    op("ntm_content_forward", "attnc_ntm_content_forward", o("w"), a("key"), a("memory"), a("beta")),
    op(
        "ntm_content_backward",
        "attnc_ntm_content_backward",
        o("dkey"),
        o("dmemory"),
        o("dbeta"),
        a("dw"),
        a("key"),
        a("memory"),
        a("beta"),
        a("w"),
    ),
    op("ntm_interpolate_forward", "attnc_ntm_interpolate_forward", o("w"), a("w_content"), a("w_prev"), a("g")),
    op(
        "ntm_interpolate_backward",
        "attnc_ntm_interpolate_backward",
        o("dw_content"),
        o("dw_prev"),
        o("dg"),
        a("dw"),
        a("w_content"),
        a("w_prev"),
        a("g"),
    ),
    op("ntm_shift_forward", "attnc_ntm_shift_forward", o("out"), a("w"), a("s")),
    op("ntm_shift_backward", "attnc_ntm_shift_backward", o("dw"), o("ds"), a("dout"), a("w"), a("s")),
    op("ntm_sharpen_forward", "attnc_ntm_sharpen_forward", o("out"), a("w"), a("gamma")),
    op(
        "ntm_sharpen_backward",
        "attnc_ntm_sharpen_backward",
        o("dw"),
        o("dgamma"),
        a("dout"),
        a("w"),
        a("gamma"),
        a("out"),
    ),
    op("ntm_read_forward", "attnc_ntm_read_forward", o("r"), a("memory"), a("w")),
    op("ntm_read_backward", "attnc_ntm_read_backward", o("dmemory"), o("dw"), a("dr"), a("memory"), a("w")),
    op("ntm_write_forward", "attnc_ntm_write_forward", o("out"), a("memory"), a("w"), a("erase"), a("add")),
    op(
        "ntm_write_backward",
        "attnc_ntm_write_backward",
        o("dmemory"),
        o("dw"),
        o("derase"),
        o("dadd"),
        a("dout"),
        a("memory"),
        a("w"),
        a("erase"),
        a("add"),
    ),
    op(
        "ntm_address_forward",
        "attnc_ntm_address_forward",
        o("w"),
        o("w_c"),
        o("w_g"),
        o("w_t"),
        tensors("attnc_ntm_address_args", ADDRESS, arr),
    ),
    op(
        "ntm_address_backward",
        "attnc_ntm_address_backward",
        tensors("attnc_ntm_address_args", ADDRESS, out, "grads"),
        a("dw"),
        a("dw_c"),
        a("dw_g"),
        a("dw_t"),
        tensors("attnc_ntm_address_args", ADDRESS, arr),
        a("w"),
        a("w_c"),
        a("w_g"),
        a("w_t"),
    ),
    op(
        "ntm_saved_size",
        "attnc_ntm_saved_size",
        i64("B"),
        i64("T"),
        i64("I"),
        i64("C"),
        i64("N"),
        i64("M"),
        i64("P"),
        config(),
        returns="int64",
    ),
    op(
        "ntm_forward",
        "attnc_ntm_forward",
        o("logits"),
        out("weights", ranks=4),
        o("memories"),
        o("saved"),
        a("inputs"),
        tensors("attnc_ntm_state", STATE, arr, "init"),
        tensors("attnc_ntm_params", PARAMS, arr, "params"),
        config(),
    ),
    op(
        "ntm_backward",
        "attnc_ntm_backward",
        tensors("attnc_ntm_params", PARAMS, out, "grads"),
        tensors("attnc_ntm_state", STATE, out, "dinit"),
        o("dinputs"),
        a("dlogits"),
        a("saved"),
        a("inputs"),
        tensors("attnc_ntm_state", STATE, arr, "init"),
        tensors("attnc_ntm_params", PARAMS, arr, "params"),
        config(),
    ),
]
