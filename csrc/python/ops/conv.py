"""2-d convolution (csrc/ops/conv), torch's conv2d; conv1d is its H = 1 case."""

OPS = [
    op(
        "conv2d_forward",
        "attnc_conv2d_forward",
        out("output", ranks=4),
        arr("input", ranks=4),
        arr("weight", ranks=4),
        arr("bias", ranks=1),
        ints("stride", 2),
        ints("padding", 4),
        ints("dilation", 2),
        i64("groups", 1),
    ),
    op(
        "conv2d_backward",
        "attnc_conv2d_backward",
        out("dinput", ranks=4),
        out("dweight", ranks=4),
        out("dbias", ranks=1),
        arr("doutput", ranks=4),
        arr("input", ranks=4),
        arr("weight", ranks=4),
        ints("stride", 2),
        ints("padding", 4),
        ints("dilation", 2),
        i64("groups", 1),
    ),
]
