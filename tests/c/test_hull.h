/* test_hull.h: C unit tests of csrc/models/pointer/hull.c (included by test_core.c):
 * on uniform points and on a small integer grid (repeats and collinear
 * points, every cross product exact), each hull must be a strictly convex
 * counter-clockwise polygon of input points with every point on or left of
 * every edge, start at its lowest index and name repeats by their lowest
 * index; a square by hand; the same hulls with 1 and 2 threads; refusals. */
#include "../../csrc/models/pointer/hull.h"

static double hull_cross(const double *p, int64_t o, int64_t a, int64_t c) {
    return (p[2 * a] - p[2 * o]) * (p[2 * c + 1] - p[2 * o + 1]) -
           (p[2 * a + 1] - p[2 * o + 1]) * (p[2 * c] - p[2 * o]);
}

/* Whether h (size m, then -1s up to n) is the hull of p (n points). */
static int hull_valid(const double *p, int64_t n, const int64_t *h, int64_t m) {
    if (m < 1 || m > n) return 0;
    for (int64_t k = m; k < n; k++)
        if (h[k] != -1) return 0;
    for (int64_t k = 0; k < m; k++) {
        if (h[k] < 0 || h[k] >= n || h[k] < h[0]) return 0;
        for (int64_t j = 0; j < h[k]; j++) /* the lowest index of a repeated point */
            if (p[2 * j] == p[2 * h[k]] && p[2 * j + 1] == p[2 * h[k] + 1]) return 0;
        for (int64_t j = 0; j < k; j++)
            if (h[j] == h[k]) return 0;
    }
    if (m == 1) { /* every point the same */
        for (int64_t i = 0; i < n; i++)
            if (p[2 * i] != p[2 * h[0]] || p[2 * i + 1] != p[2 * h[0] + 1]) return 0;
        return 1;
    }
    for (int64_t k = 0; k < m; k++) {
        int64_t a = h[k], b = h[(k + 1) % m], c = h[(k + 2) % m];
        if (m > 2 && hull_cross(p, a, b, c) <= 0) return 0; /* strictly convex */
        for (int64_t i = 0; i < n; i++)
            if (hull_cross(p, a, b, i) < 0) return 0; /* nothing outside */
    }
    if (m == 2) { /* a segment: every point on it, between its ends */
        double dx = p[2 * h[1]] - p[2 * h[0]], dy = p[2 * h[1] + 1] - p[2 * h[0] + 1];
        for (int64_t i = 0; i < n; i++) {
            double t = (p[2 * i] - p[2 * h[0]]) * dx + (p[2 * i + 1] - p[2 * h[0] + 1]) * dy;
            if (hull_cross(p, h[0], h[1], i) != 0 || t < 0 || t > dx * dx + dy * dy) return 0;
        }
    }
    return 1;
}

static void test_hull(void) {
    enum { HB = 64, HN = 24 };
    int64_t hull[HB * HN], hull2[HB * HN], sizes[HB], sizes2[HB];
    for (int grid = 0; grid < 2; grid++)
        for (int64_t n = 1; n <= HN; n += (n < 12 ? 1 : 6)) {
            double *p = randn((size_t)(HB * n * 2), 900 + (uint64_t)n);
            if (grid) /* coordinates in {0, .., 4} */
                for (int64_t i = 0; i < HB * n * 2; i++) p[i] = floor((p[i] + 1) * 2.5);
            const int64_t ps[3] = {HB, n, 2}, hs[2] = {HB, n}, ss[1] = {HB};
            attnc_tensor tp = view(p, ATTNC_FLOAT64, 3, ps), th = view(hull, ATTNC_INT64, 2, hs),
                         ts = view(sizes, ATTNC_INT64, 1, ss), th2 = view(hull2, ATTNC_INT64, 2, hs),
                         ts2 = view(sizes2, ATTNC_INT64, 1, ss);
            attnc_set_num_threads(1);
            CHECK(attnc_convex_hull(&th, &ts, &tp) == ATTNC_OK, "hull n=%d: %s", (int)n, attnc_last_error());
            attnc_set_num_threads(2);
            CHECK(attnc_convex_hull(&th2, &ts2, &tp) == ATTNC_OK, "hull n=%d: %s", (int)n, attnc_last_error());
            CHECK(memcmp(hull, hull2, sizeof(int64_t) * HB * n) == 0 && memcmp(sizes, sizes2, sizeof sizes) == 0,
                  "hull n=%d depends on the thread count", (int)n);
            for (int64_t b = 0; b < HB; b++)
                CHECK(hull_valid(p + b * n * 2, n, hull + b * n, sizes[b]), "hull n=%d grid=%d row %d wrong", (int)n,
                      grid, (int)b);
            free(p);
        }
    /* a square with points on its edges, one inside and a repeated corner */
    double sq[16] = {0.5, 0.5, 1, 0, 0.5, 0, 1, 1, 0, 1, 0, 0.5, 1, 1, 0, 0};
    const int64_t ps8[3] = {1, 8, 2}, hs8[2] = {1, 8}, ss1[1] = {1};
    attnc_tensor p8 = view(sq, ATTNC_FLOAT64, 3, ps8), h8 = view(hull, ATTNC_INT64, 2, hs8),
                 s1 = view(sizes, ATTNC_INT64, 1, ss1);
    CHECK(attnc_convex_hull(&h8, &s1, &p8) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(sizes[0] == 4 && hull[0] == 1 && hull[1] == 3 && hull[2] == 4 && hull[3] == 7 && hull[4] == -1,
          "square: %d vertices %d %d %d %d", (int)sizes[0], (int)hull[0], (int)hull[1], (int)hull[2], (int)hull[3]);
    /* refusals: a NaN, no points, float outputs, sizes of the wrong length */
    CHECK(attnc_convex_hull(&h8, &h8, &p8) == ATTNC_ERR_VALUE, "sizes of shape (1, 8) accepted");
    attnc_tensor hf = view(sq, ATTNC_FLOAT64, 2, hs8);
    CHECK(attnc_convex_hull(&hf, &s1, &p8) == ATTNC_ERR_TYPE, "float hull accepted");
    CHECK(strstr(attnc_last_error(), "hull") != NULL, "message: %s", attnc_last_error());
    const int64_t ps0[3] = {1, 0, 2}, hs0[2] = {1, 0};
    attnc_tensor p0 = view(sq, ATTNC_FLOAT64, 3, ps0), h0 = view(hull, ATTNC_INT64, 2, hs0);
    CHECK(attnc_convex_hull(&h0, &s1, &p0) == ATTNC_ERR_VALUE, "n = 0 accepted");
    sq[5] = NAN;
    CHECK(attnc_convex_hull(&h8, &s1, &p8) == ATTNC_ERR_VALUE, "NaN accepted");
    CHECK(strstr(attnc_last_error(), "points[0, 2, 1]") != NULL, "message: %s", attnc_last_error());
}
