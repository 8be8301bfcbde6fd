"""Recurrent layers (csrc/ops/rnn): LSTM and GRU over whole sequences, forward
and backward through time."""

# attnc_rnn_weights, one dict per layer and direction (l D + d), and their ranks.
WEIGHTS = {"weight_ih": 2, "weight_hh": 2, "bias_ih": 1, "bias_hh": 1}
CONFIG = struct(
    "attnc_rnn_config",
    enum("mode", "attnc_rnn_mode", 2),
    i64("hidden_size", lo=1),
    i64("num_layers", lo=1, hi=64),
    flag("bidirectional"),
    real("dropout", 0.0, lo=0, hi=1),
    u64("seed"),
)

OPS = [
    op("rnn_saved_size", "attnc_rnn_saved_size", CONFIG, i64("B"), i64("T"), i64("input_size"), returns="int64"),
    op(
        "rnn_forward",
        "attnc_rnn_forward",
        out("output", ranks=3),
        out("h_n", ranks=3),
        out("c_n", ranks=3),
        out("saved", ranks=1),
        arr("input", ranks=3),
        arr("lengths", ranks=1),
        arr("h0", ranks=3),
        arr("c0", ranks=3),
        struct_list("weights", "attnc_rnn_weights", *(arr(w, ranks=r) for w, r in WEIGHTS.items())),
        CONFIG,
    ),
    op(
        "rnn_backward",
        "attnc_rnn_backward",
        out("dinput", ranks=3),
        out("dh0", ranks=3),
        out("dc0", ranks=3),
        struct_list("grads", "attnc_rnn_weights", *(out(w, ranks=r) for w, r in WEIGHTS.items())),
        arr("doutput", ranks=3),
        arr("dh_n", ranks=3),
        arr("dc_n", ranks=3),
        arr("saved", ranks=1),
        arr("input", ranks=3),
        arr("lengths", ranks=1),
        arr("h0", ranks=3),
        arr("c0", ranks=3),
        struct_list("weights", "attnc_rnn_weights", *(arr(w, ranks=r) for w, r in WEIGHTS.items())),
        CONFIG,
    ),
]
