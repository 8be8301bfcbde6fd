/* test_seq2seq.h: C unit tests of csrc/seq2seq (included by test_core.c). */
static void test_seq2seq(void) {}
