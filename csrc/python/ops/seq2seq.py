"""The recurrent encoder-decoder's decoder (csrc/models/seq2seq): Bahdanau and Luong
attention, teacher-forced forward and backward through time, and decoding."""

# attnc_s2s_weights' members, in order (absent when the kind has no use for
# them), and their ranks
WEIGHTS = {
    "embedding": 2,
    "weight_ih": 2,
    "weight_hh": 2,
    "bias_ih": 1,
    "bias_hh": 1,
    "bridge_weight": 2,
    "bridge_bias": 1,
    "query_weight": 2,
    "key_weight": 2,
    "v": 1,
    "weight": 2,
    "bias": 1,
    "position_weight": 2,
    "position_v": 1,
    "combine": 2,
    "out_weight": 2,
    "out_bias": 1,
}


def weights(name, role, unchecked=()):
    """The weights' dict; `unchecked`: members the C function never reads (any rank)."""
    return struct(
        "attnc_s2s_weights", *(role(n, ranks=None if n in unchecked else r) for n, r in WEIGHTS.items()), name=name
    )


def config():
    return struct(
        "attnc_s2s_config",
        enum("attention", "attnc_s2s_attention", 8),
        real("window"),
        real("sampling", 0.0),
        u64("seed"),
        flag("input_feeding", True),
    )


OPS = [
    op(
        "s2s_saved_size",
        "attnc_s2s_saved_size",
        config(),
        weights("weights", arr, unchecked=WEIGHTS),
        i64("B"),
        i64("S"),
        i64("T"),
        returns="int64",
    ),
    op(
        "s2s_forward",
        "attnc_s2s_forward",
        out("features", ranks=3),
        out("alignments", ranks=3),
        out("fed", ranks=2),
        out("saved", ranks=1),
        arr("memory", ranks=3),
        arr("final", ranks=2),
        arr("lengths", ranks=1),
        arr("tgt_in", ranks=2),
        weights("weights", arr),
        config(),
    ),
    op(
        "s2s_backward",
        "attnc_s2s_backward",
        out("dmemory", ranks=3),
        out("dfinal", ranks=2),
        weights("grads", out, unchecked=("out_weight", "out_bias")),
        arr("dfeatures", ranks=3),
        arr("saved", ranks=1),
        arr("fed", ranks=2),
        arr("memory", ranks=3),
        arr("final", ranks=2),
        arr("lengths", ranks=1),
        weights("weights", arr),
        config(),
    ),
    op(
        "s2s_generate",
        "attnc_s2s_generate",
        out("tokens", ranks=2),
        out("out_lengths", ranks=1),
        out("alignments", ranks=3),
        arr("memory", ranks=3),
        arr("final", ranks=2),
        arr("lengths", ranks=1),
        weights("weights", arr),
        config(),
        i64("bos"),
        i64("eos"),
        i64("beam_size"),
        real("length_penalty"),
    ),
]
