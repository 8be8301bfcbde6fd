/* test_pointer.h: C unit tests of csrc/pointer/pointer.c (included by test_core.c). */

static void test_pointer(void) {}
