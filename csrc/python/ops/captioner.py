"""The show-attend-tell captioner's decoder (csrc/models/captioner): teacher-forced
forward and backward through time, and decoding."""

INCLUDES = ("../models/captioner/captioner.h",)

# attnc_captioner_params' members, in order (gate_w, gate_b absent without the gate)
PARAMS = ("embedding", "init_h_w", "init_h_b", "init_c_w", "init_c_b", "att_feat_w", "att_feat_b", "att_hidden_w",
          "att_score_w", "gate_w", "gate_b", "w_ih", "w_hh", "b_ih", "b_hh", "out_h_w", "out_z_w", "out_w", "out_b")


def params(name, role):
    return struct("attnc_captioner_params", *(role(n) for n in PARAMS), name=name)


def config():
    return struct("attnc_captioner_config", enum("mode", "attnc_caption_mode", 4), flag("gate"), u64("seed"),
                  real("expect_prob", 0.0))


OPS = [
    op("captioner_saved_size", "attnc_captioner_saved_size",
       i64("B"), i64("T"), i64("L"), i64("F"), i64("E"), i64("H"), i64("A"), returns="int64"),
    op("captioner_forward", "attnc_captioner_forward",
       out("logits"), out("alphas"), out("samples"), out("saved"), arr("features"), arr("tokens"),
       params("params", arr), config()),
    op("captioner_backward", "attnc_captioner_backward",
       params("grads", out), out("dfeatures"), arr("dlogits"), arr("dalphas"), arr("dlogp"), arr("saved"),
       arr("features"), arr("tokens"), arr("samples"), params("params", arr), config()),
    op("captioner_generate", "attnc_captioner_generate",
       out("tokens"), out("lengths"), out("alphas"), arr("features"), params("params", arr), config(), i64("bos"),
       i64("eos"), i64("beam_size"), real("length_penalty")),
]
