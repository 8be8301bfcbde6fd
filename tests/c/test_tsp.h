/* test_tsp.h: C unit tests of csrc/pointer/tsp.c (included by test_core.c). */

static void test_tsp(void) {}
