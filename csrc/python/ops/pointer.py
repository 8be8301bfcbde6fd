"""The pointer network's constrained greedy and beam-search decoding
(csrc/models/pointer/pointer.h; attnc.models.PointerNet.generate), and the check of
its lengths the model's training forward asks for."""

INCLUDES = ["../models/pointer/pointer.h"]

OPS = [
    op("pointer_decode", "attnc_pointer_decode",
       out("out"), out("counts"), out("logits"), arr("inputs"), arr("lengths"), arr("keys"), arr("h0"), arr("c0"),
       struct("attnc_pointer_params", arr("w_ih"), arr("w_hh"), arr("b_ih"), arr("b_hh"), arr("w2"), arr("v"),
              arr("start"), name="params"),
       enum("constraint", "attnc_pointer_constraint", 3), i64("beam_size", 1, lo=1), real("length_penalty", 0.0)),
    op("pointer_check_lengths", "attnc_pointer_check_lengths", arr("lengths"), i64("B", lo=0), i64("n", lo=0)),
]
