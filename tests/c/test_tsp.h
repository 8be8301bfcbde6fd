/* test_tsp.h: C unit tests of csrc/models/pointer/tsp.c (included by test_core.c):
 * Held-Karp against brute force over all tours (n = 1..8), the canonical
 * form, 2-opt and Or-opt tours (valid, never shorter than the optimum, Or-opt
 * never longer than 2-opt), Held-Karp at n = 20 never longer than Or-opt,
 * tour lengths against a plain loop, thread-count independence, and the
 * refusals. */
#include "../../csrc/models/pointer/tsp.h"

static double tsp_dist(const double *p, int64_t i, int64_t j) {
    double dx = p[2 * i] - p[2 * j], dy = p[2 * i + 1] - p[2 * j + 1];
    return sqrt(dx * dx + dy * dy);
}

static double tsp_closed(const double *p, const int64_t *t, int64_t n) {
    double s = 0;
    for (int64_t k = 0; k < n; k++) s += tsp_dist(p, t[k], t[(k + 1) % n]);
    return s;
}

/* Next permutation of a[0..m) in lexicographic order; 0 after the last. */
static int tsp_next_perm(int64_t *a, int64_t m) {
    int64_t i = m - 2;
    while (i >= 0 && a[i] >= a[i + 1]) i--;
    if (i < 0) return 0;
    int64_t j = m - 1;
    while (a[j] <= a[i]) j--;
    int64_t x = a[i];
    a[i] = a[j];
    a[j] = x;
    for (int64_t lo = i + 1, hi = m - 1; lo < hi; lo++, hi--) {
        x = a[lo];
        a[lo] = a[hi];
        a[hi] = x;
    }
    return 1;
}

/* The shortest closed tour of p (n cities) over all (n-1)! orders of 1..n-1. */
static double tsp_brute(const double *p, int64_t n) {
    int64_t t[16];
    for (int64_t i = 0; i < n; i++) t[i] = i;
    double best = tsp_closed(p, t, n);
    if (n >= 3)
        while (tsp_next_perm(t + 1, n - 1)) best = fmin(best, tsp_closed(p, t, n));
    return best;
}

static int tsp_is_perm(const int64_t *t, int64_t n) {
    int seen[64] = {0};
    for (int64_t k = 0; k < n; k++) {
        if (t[k] < 0 || t[k] >= n || seen[t[k]]) return 0;
        seen[t[k]] = 1;
    }
    return 1;
}

static void test_tsp(void) {
    enum { TB = 3, TNMAX = 20 };
    int64_t tours[TB * TNMAX], tours2[TB * TNMAX], tours3[TB * TNMAX];
    double lengths[TB], lengths2[TB], lengths3[TB], check[TB];
    for (int64_t n = 1; n <= 8; n++) {
        double *p = randn((size_t)(TB * n * 2), 500 + (uint64_t)n);
        const int64_t ps[3] = {TB, n, 2}, ts[2] = {TB, n}, ls[1] = {TB};
        attnc_tensor tp = view(p, ATTNC_FLOAT64, 3, ps), tt = view(tours, ATTNC_INT64, 2, ts),
                     tl = view(lengths, ATTNC_FLOAT64, 1, ls), tt2 = view(tours2, ATTNC_INT64, 2, ts),
                     tl2 = view(lengths2, ATTNC_FLOAT64, 1, ls), tc = view(check, ATTNC_FLOAT64, 1, ls),
                     tt3 = view(tours3, ATTNC_INT64, 2, ts), tl3 = view(lengths3, ATTNC_FLOAT64, 1, ls);
        CHECK(attnc_tsp_held_karp(&tt, &tl, &tp) == ATTNC_OK, "held_karp n=%d: %s", (int)n, attnc_last_error());
        CHECK(attnc_tsp_two_opt(&tt2, &tl2, &tp) == ATTNC_OK, "two_opt n=%d: %s", (int)n, attnc_last_error());
        CHECK(attnc_tsp_or_opt(&tt3, &tl3, &tp) == ATTNC_OK, "or_opt n=%d: %s", (int)n, attnc_last_error());
        CHECK(attnc_tsp_tour_length(&tc, &tp, &tt) == ATTNC_OK, "tour_length n=%d: %s", (int)n, attnc_last_error());
        for (int64_t b = 0; b < TB; b++) {
            const double *pb = p + b * n * 2;
            const int64_t *t = tours + b * n, *t2 = tours2 + b * n;
            double opt = tsp_brute(pb, n);
            CHECK(tsp_is_perm(t, n) && t[0] == 0, "held_karp n=%d row %d: not a tour from 0", (int)n, (int)b);
            CHECK(n < 3 || t[1] < t[n - 1], "held_karp n=%d row %d: not canonical", (int)n, (int)b);
            CHECK(fabs(lengths[b] - opt) <= 1e-12 * (1 + opt), "held_karp n=%d row %d: %.17g vs %.17g", (int)n, (int)b,
                  lengths[b], opt);
            CHECK(lengths[b] == tsp_closed(pb, t, n) && check[b] == lengths[b],
                  "n=%d row %d: length not that of the tour", (int)n, (int)b);
            CHECK(tsp_is_perm(t2, n) && t2[0] == 0 && (n < 3 || t2[1] < t2[n - 1]),
                  "two_opt n=%d row %d: not a canonical tour", (int)n, (int)b);
            CHECK(lengths2[b] >= opt - 1e-12 && lengths2[b] <= 2 * opt + 1e-12 && lengths2[b] == tsp_closed(pb, t2, n),
                  "two_opt n=%d row %d: %g vs optimum %g", (int)n, (int)b, lengths2[b], opt);
            const int64_t *t3 = tours3 + b * n;
            CHECK(tsp_is_perm(t3, n) && t3[0] == 0 && (n < 3 || t3[1] < t3[n - 1]),
                  "or_opt n=%d row %d: not a canonical tour", (int)n, (int)b);
            CHECK(lengths3[b] >= opt - 1e-12 && lengths3[b] <= lengths2[b] && lengths3[b] == tsp_closed(pb, t3, n),
                  "or_opt n=%d row %d: %g vs optimum %g, 2-opt %g", (int)n, (int)b, lengths3[b], opt, lengths2[b]);
        }
        free(p);
    }
    /* 2-opt on a larger instance: a valid canonical tour, the same with 1 and 2 threads. */
    {
        const int64_t n = TNMAX;
        double *p = randn((size_t)(TB * n * 2), 77);
        const int64_t ps[3] = {TB, n, 2}, ts[2] = {TB, n}, ls[1] = {TB};
        attnc_tensor tp = view(p, ATTNC_FLOAT64, 3, ps), tt = view(tours, ATTNC_INT64, 2, ts),
                     tl = view(lengths, ATTNC_FLOAT64, 1, ls), tt2 = view(tours2, ATTNC_INT64, 2, ts),
                     tl2 = view(lengths2, ATTNC_FLOAT64, 1, ls);
        attnc_set_num_threads(1);
        CHECK(attnc_tsp_two_opt(&tt, &tl, &tp) == ATTNC_OK, "%s", attnc_last_error());
        attnc_set_num_threads(2);
        CHECK(attnc_tsp_two_opt(&tt2, &tl2, &tp) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(memcmp(tours, tours2, sizeof(int64_t) * TB * n) == 0 && memcmp(lengths, lengths2, sizeof lengths) == 0,
              "two_opt depends on the thread count");
        /* Or-opt: the same with 1 and 2 threads, never longer than 2-opt; Held-Karp at
         * n = 20 (the largest it takes) never longer than Or-opt, its length its tour's. */
        attnc_tensor tt3 = view(tours3, ATTNC_INT64, 2, ts), tl3 = view(lengths3, ATTNC_FLOAT64, 1, ls);
        CHECK(attnc_tsp_or_opt(&tt3, &tl3, &tp) == ATTNC_OK, "%s", attnc_last_error());
        attnc_set_num_threads(1);
        double lengths4[TB];
        int64_t tours4[TB * TNMAX];
        attnc_tensor tt4 = view(tours4, ATTNC_INT64, 2, ts), tl4 = view(lengths4, ATTNC_FLOAT64, 1, ls);
        CHECK(attnc_tsp_or_opt(&tt4, &tl4, &tp) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(memcmp(tours3, tours4, sizeof(int64_t) * TB * n) == 0 && memcmp(lengths3, lengths4, sizeof lengths3) == 0,
              "or_opt depends on the thread count");
        CHECK(attnc_tsp_held_karp(&tt4, &tl4, &tp) == ATTNC_OK, "held_karp n=20: %s", attnc_last_error());
        for (int64_t b = 0; b < TB; b++) {
            const int64_t *t4 = tours4 + b * n;
            CHECK(tsp_is_perm(t4, n) && t4[0] == 0 && t4[1] < t4[n - 1], "held_karp n=20 row %d: not canonical",
                  (int)b);
            CHECK(lengths3[b] <= lengths[b] && lengths4[b] <= lengths3[b] + 1e-12 &&
                      lengths4[b] == tsp_closed(p + b * n * 2, t4, n),
                  "n=20 row %d: Held-Karp %.17g, Or-opt %.17g, 2-opt %.17g", (int)b, lengths4[b], lengths3[b],
                  lengths[b]);
        }
        attnc_set_num_threads(2);
        for (int64_t b = 0; b < TB; b++)
            CHECK(tsp_is_perm(tours + b * n, n) && tours[b * n] == 0 && tours[b * n + 1] < tours[b * n + n - 1],
                  "two_opt n=20 row %d: not a canonical tour", (int)b);
        /* Held-Karp refuses n = 21 (and leaves a message naming the limit). */
        const int64_t ps21[3] = {1, 21, 2}, ts21[2] = {1, 21}, ls1[1] = {1};
        double *p21 = randn(42, 78);
        attnc_tensor tp21 = view(p21, ATTNC_FLOAT64, 3, ps21), t21 = view(tours, ATTNC_INT64, 2, ts21),
                     l21 = view(lengths, ATTNC_FLOAT64, 1, ls1);
        CHECK(attnc_tsp_held_karp(&t21, &l21, &tp21) == ATTNC_ERR_VALUE, "n = 21 accepted");
        CHECK(strstr(attnc_last_error(), "n = 21") != NULL, "message: %s", attnc_last_error());
        CHECK(attnc_tsp_or_opt(&t21, &l21, &tp21) == ATTNC_OK, "or_opt n = 21: %s", attnc_last_error());
        free(p21);
        const int64_t ps13[3] = {1, 13, 2}, ts13[2] = {1, 13};
        attnc_tensor p13 = view(p, ATTNC_FLOAT64, 3, ps13), t13 = view(tours, ATTNC_INT64, 2, ts13),
                     l13 = view(lengths, ATTNC_FLOAT64, 1, ls1);
        CHECK(attnc_tsp_two_opt(&t13, &l13, &p13) == ATTNC_OK, "two_opt n = 13: %s", attnc_last_error());
        /* tour_length refuses a row that is not a permutation, naming it. */
        const int64_t ps4[3] = {2, 4, 2}, ts4[2] = {2, 4}, ls2[1] = {2};
        int64_t bad[8] = {0, 1, 2, 3, 0, 1, 1, 3};
        attnc_tensor p4 = view(p, ATTNC_FLOAT64, 3, ps4), t4 = view(bad, ATTNC_INT64, 2, ts4),
                     l4 = view(lengths, ATTNC_FLOAT64, 1, ls2);
        CHECK(attnc_tsp_tour_length(&l4, &p4, &t4) == ATTNC_ERR_VALUE, "duplicate accepted");
        CHECK(strstr(attnc_last_error(), "tours[1]") != NULL, "message: %s", attnc_last_error());
        bad[6] = 4;
        CHECK(attnc_tsp_tour_length(&l4, &p4, &t4) == ATTNC_ERR_VALUE, "out of range accepted");
        bad[6] = 2;
        CHECK(attnc_tsp_tour_length(&l4, &p4, &t4) == ATTNC_OK, "%s", attnc_last_error());
        /* wrong dtype, wrong shape, a NaN coordinate, no cities */
        attnc_tensor wrong = view(lengths, ATTNC_FLOAT64, 2, ts4);
        CHECK(attnc_tsp_two_opt(&wrong, &l4, &p4) == ATTNC_ERR_TYPE, "float tours accepted");
        attnc_tensor t4b = view(tours, ATTNC_INT64, 2, ts4), l3 = view(lengths, ATTNC_FLOAT64, 1, ls1);
        CHECK(attnc_tsp_two_opt(&t4b, &l3, &p4) == ATTNC_ERR_VALUE, "lengths of shape (1) accepted");
        p[3] = NAN;
        CHECK(attnc_tsp_held_karp(&t4b, &l4, &p4) == ATTNC_ERR_VALUE, "NaN accepted");
        CHECK(strstr(attnc_last_error(), "finite") != NULL, "message: %s", attnc_last_error());
        const int64_t ps0[3] = {2, 0, 2}, ts0[2] = {2, 0};
        attnc_tensor p0 = view(p, ATTNC_FLOAT64, 3, ps0), t0 = view(tours, ATTNC_INT64, 2, ts0);
        CHECK(attnc_tsp_two_opt(&t0, &l4, &p0) == ATTNC_ERR_VALUE, "n = 0 accepted");
        free(p);
    }
}
