/* test_ntm.h: C unit tests of csrc/ntm (included by test_core.c). */
static void test_ntm(void) {}
