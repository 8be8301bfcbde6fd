"""The recurrent encoder-decoder's decoder (csrc/models/seq2seq): Bahdanau and Luong
attention, teacher-forced forward and backward through time, and decoding."""

# attnc_s2s_weights' members, in order (absent when the kind has no use for them)
WEIGHTS = ("embedding", "weight_ih", "weight_hh", "bias_ih", "bias_hh", "bridge_weight", "bridge_bias",
           "query_weight", "key_weight", "v", "weight", "bias", "position_weight", "position_v", "combine",
           "out_weight", "out_bias")


def weights(name, role):
    return struct("attnc_s2s_weights", *(role(n) for n in WEIGHTS), name=name)


def config():
    return struct("attnc_s2s_config", enum("attention", "attnc_s2s_attention", 8), real("window"),
                  real("sampling", 0.0), u64("seed"))


OPS = [
    op("s2s_saved_size", "attnc_s2s_saved_size",
       config(), weights("weights", arr), i64("B"), i64("S"), i64("T"), returns="int64"),
    op("s2s_forward", "attnc_s2s_forward",
       out("features"), out("alignments"), out("fed"), out("saved"), arr("memory"), arr("final"), arr("lengths"),
       arr("tgt_in"), weights("weights", arr), config()),
    op("s2s_backward", "attnc_s2s_backward",
       out("dmemory"), out("dfinal"), weights("grads", out), arr("dfeatures"), arr("saved"), arr("fed"),
       arr("memory"), arr("final"), arr("lengths"), weights("weights", arr), config()),
    op("s2s_generate", "attnc_s2s_generate",
       out("tokens"), out("out_lengths"), out("alignments"), arr("memory"), arr("final"), arr("lengths"),
       weights("weights", arr), config(), i64("bos"), i64("eos"), i64("beam_size"),
       real("length_penalty")),
]
