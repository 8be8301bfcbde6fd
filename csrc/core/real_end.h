/* real_end.h: undo real.h (see there). */
#undef REAL
#undef FN
#undef GEMM
#undef EXP
#undef EXPV
#undef TANHV
#undef LOG
#undef ERF
#undef TANH
#undef SQRT
#undef FABS
#undef ATTNC_F64
