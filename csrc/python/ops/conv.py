"""2-d convolution (csrc/ops/conv), torch's conv2d; conv1d is its H = 1 case."""

OPS = [
    op("conv2d_forward", "attnc_conv2d_forward",
       out("output"), arr("input"), arr("weight"), arr("bias"), ints("stride", 2), ints("padding", 4),
       ints("dilation", 2), i64("groups", 1)),
    op("conv2d_backward", "attnc_conv2d_backward",
       out("dinput"), out("dweight"), out("dbias"), arr("doutput"), arr("input"), arr("weight"), ints("stride", 2),
       ints("padding", 4), ints("dilation", 2), i64("groups", 1)),
]
