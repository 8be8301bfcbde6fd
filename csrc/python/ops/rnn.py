"""Recurrent layers (csrc/ops/rnn): LSTM and GRU over whole sequences, forward
and backward through time."""

# attnc_rnn_weights, one dict per layer and direction (l D + d).
WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
CONFIG = struct("attnc_rnn_config", enum("mode", "attnc_rnn_mode", 2), i64("hidden_size", lo=1),
                i64("num_layers", lo=1, hi=64), flag("bidirectional"), real("dropout", 0.0, lo=0, hi=1), u64("seed"))

OPS = [
    op("rnn_saved_size", "attnc_rnn_saved_size", CONFIG, i64("B"), i64("T"), i64("input_size"), returns="int64"),
    op("rnn_forward", "attnc_rnn_forward",
       out("output"), out("h_n"), out("c_n"), out("saved"), arr("input"), arr("lengths"), arr("h0"), arr("c0"),
       struct_list("weights", "attnc_rnn_weights", *(arr(w) for w in WEIGHTS)), CONFIG),
    op("rnn_backward", "attnc_rnn_backward",
       out("dinput"), out("dh0"), out("dc0"), struct_list("grads", "attnc_rnn_weights", *(out(w) for w in WEIGHTS)),
       arr("doutput"), arr("dh_n"), arr("dc_n"), arr("saved"), arr("input"), arr("lengths"), arr("h0"), arr("c0"),
       struct_list("weights", "attnc_rnn_weights", *(arr(w) for w in WEIGHTS)), CONFIG),
]
