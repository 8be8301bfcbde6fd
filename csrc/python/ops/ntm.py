"""The Neural Turing Machine (csrc/models/ntm): its addressing and memory operations
(ntm.h) and the whole model's forward and backward through time (model.h)."""

INCLUDES = ("../models/ntm/ntm.h", "../models/ntm/model.h")

# attnc_ntm_address_args' members: the addressing pipeline's inputs
ADDRESS = ("key", "beta", "g", "s", "gamma", "w_prev", "memory")
# attnc_ntm_params' members (the feedforward controller has no w_hh, b_hh)
PARAMS = ("w_ih", "w_hh", "b_ih", "b_hh", "head_w", "head_b", "out_w", "out_b")
# attnc_ntm_state's members: the state before the first step
STATE = ("memory", "reads", "weights")


def tensors(ctype, members, role, name=None):
    return struct(ctype, *(role(n) for n in members), name=name)


def config():
    return struct("attnc_ntm_config", flag("lstm"), i64("read_heads"), i64("write_heads"),
                  real("clip"))


OPS = [
    op("ntm_content_forward", "attnc_ntm_content_forward", out("w"), arr("key"), arr("memory"), arr("beta")),
    op("ntm_content_backward", "attnc_ntm_content_backward",
       out("dkey"), out("dmemory"), out("dbeta"), arr("dw"), arr("key"), arr("memory"), arr("beta"), arr("w")),
    op("ntm_interpolate_forward", "attnc_ntm_interpolate_forward",
       out("w"), arr("w_content"), arr("w_prev"), arr("g")),
    op("ntm_interpolate_backward", "attnc_ntm_interpolate_backward",
       out("dw_content"), out("dw_prev"), out("dg"), arr("dw"), arr("w_content"), arr("w_prev"), arr("g")),
    op("ntm_shift_forward", "attnc_ntm_shift_forward", out("out"), arr("w"), arr("s")),
    op("ntm_shift_backward", "attnc_ntm_shift_backward", out("dw"), out("ds"), arr("dout"), arr("w"), arr("s")),
    op("ntm_sharpen_forward", "attnc_ntm_sharpen_forward", out("out"), arr("w"), arr("gamma")),
    op("ntm_sharpen_backward", "attnc_ntm_sharpen_backward",
       out("dw"), out("dgamma"), arr("dout"), arr("w"), arr("gamma"), arr("out")),
    op("ntm_read_forward", "attnc_ntm_read_forward", out("r"), arr("memory"), arr("w")),
    op("ntm_read_backward", "attnc_ntm_read_backward", out("dmemory"), out("dw"), arr("dr"), arr("memory"), arr("w")),
    op("ntm_write_forward", "attnc_ntm_write_forward",
       out("out"), arr("memory"), arr("w"), arr("erase"), arr("add")),
    op("ntm_write_backward", "attnc_ntm_write_backward",
       out("dmemory"), out("dw"), out("derase"), out("dadd"), arr("dout"), arr("memory"), arr("w"), arr("erase"),
       arr("add")),
    op("ntm_address_forward", "attnc_ntm_address_forward",
       out("w"), out("w_c"), out("w_g"), out("w_t"), tensors("attnc_ntm_address_args", ADDRESS, arr)),
    op("ntm_address_backward", "attnc_ntm_address_backward",
       tensors("attnc_ntm_address_args", ADDRESS, out, "grads"), arr("dw"), arr("dw_c"), arr("dw_g"), arr("dw_t"),
       tensors("attnc_ntm_address_args", ADDRESS, arr), arr("w"), arr("w_c"), arr("w_g"), arr("w_t")),
    op("ntm_saved_size", "attnc_ntm_saved_size",
       i64("B"), i64("T"), i64("I"), i64("C"), i64("N"), i64("M"), i64("P"), config(), returns="int64"),
    op("ntm_forward", "attnc_ntm_forward",
       out("logits"), out("weights"), out("memories"), out("saved"), arr("inputs"),
       tensors("attnc_ntm_state", STATE, arr, "init"), tensors("attnc_ntm_params", PARAMS, arr, "params"), config()),
    op("ntm_backward", "attnc_ntm_backward",
       tensors("attnc_ntm_params", PARAMS, out, "grads"), tensors("attnc_ntm_state", STATE, out, "dinit"),
       out("dinputs"), arr("dlogits"), arr("saved"), arr("inputs"), tensors("attnc_ntm_state", STATE, arr, "init"),
       tensors("attnc_ntm_params", PARAMS, arr, "params"), config()),
]
