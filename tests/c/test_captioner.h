/* test_captioner.h: C unit tests of csrc/captioner (included by test_core.c). */
static void test_captioner(void) {}
