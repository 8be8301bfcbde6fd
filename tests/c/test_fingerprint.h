/* test_fingerprint.h: attnc_fingerprint (core/fingerprint.c) over strided
 * views (negative, zero and non-unit strides, a partial last stripe) against
 * the same values laid out contiguously, and one changed element.
 * Included by test_core.c. */
#include "../../csrc/core/fingerprint.h"

static void test_fingerprint(void) {
    enum { R = 5, C = 7 }; /* 35 doubles: four 32-byte stripes and a partial one */
    double a[R * C], t[C * R];
    for (int i = 0; i < R * C; i++) a[i] = 2 * attnc_uniform(5, 3, (uint64_t)i) - 1;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) t[j * R + i] = a[i * C + j];
    const int64_t shape[2] = {R, C}, dense[2] = {C * 8, 8}, transposed[2] = {8, R * 8};
    const int64_t reversed[2] = {-C * 8, -8};
    uint64_t h = attnc_fingerprint(a, 2, shape, dense, 8);
    CHECK(attnc_fingerprint(t, 2, shape, transposed, 8) == h, "fingerprint depends on the layout");
    double r[R * C];
    for (int i = 0; i < R * C; i++) r[i] = a[R * C - 1 - i];
    CHECK(attnc_fingerprint(r + R * C - 1, 2, shape, reversed, 8) == h, "fingerprint of negative strides");
    const int64_t row[2] = {R, C}, zero[2] = {0, 8};
    double b[R * C];
    for (int i = 0; i < R; i++) memcpy(b + i * C, a, C * sizeof *a);
    CHECK(attnc_fingerprint(a, 2, row, zero, 8) == attnc_fingerprint(b, 2, shape, dense, 8),
          "fingerprint of a zero stride");
    int same = 1;
    for (int i = 0; i < R * C; i++) {
        double c[R * C];
        memcpy(c, a, sizeof c);
        c[i] = -c[i];
        same &= attnc_fingerprint(c, 2, shape, dense, 8) != h;
    }
    CHECK(same, "a changed element left the fingerprint as it was");
    const int64_t no_rows[2] = {0, C}, no_cols[2] = {R, 0}, other[2] = {C, R};
    CHECK(attnc_fingerprint(NULL, 2, no_rows, dense, 8) != attnc_fingerprint(a, 2, no_cols, dense, 8) &&
              attnc_fingerprint(a, 2, other, transposed, 8) != h,
          "arrays of other shapes have one fingerprint");
}
