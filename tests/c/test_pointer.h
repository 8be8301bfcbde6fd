/* test_pointer.h: C unit tests of csrc/models/pointer/pointer.c (included by
 * test_core.c): decoded sequences obey their constraint (greedy and beam,
 * ragged rows), and bad arguments are refused. */
#include "../../csrc/models/pointer/pointer.h"

enum { PB = 3, PN = 4, PD = 2, PH = 5 };

static void test_pointer(void) {
    double *x = randn(PB * PN * PD, 501), *keys = randn(PB * (PN + 1) * PH, 502), *h0 = randn(PB * PH, 503),
           *c0 = randn(PB * PH, 504), *wih = randn(4 * PH * PD, 505), *whh = randn(4 * PH * PH, 506),
           *bih = randn(4 * PH, 507), *bhh = randn(4 * PH, 508), *w2 = randn(PH * PH, 509), *v = randn(PH, 510),
           *start = randn(PD, 511);
    const int64_t sx[] = {PB, PN, PD}, sk[] = {PB, PN + 1, PH}, sh[] = {PB, PH}, s4d[] = {4 * PH, PD},
                  s4h[] = {4 * PH, PH}, s4[] = {4 * PH}, shh[] = {PH, PH}, s1[] = {PH}, sd[] = {PD}, sb[] = {PB},
                  so[] = {PB, PN + 1};
    attnc_pointer_params p = {view(wih, ATTNC_FLOAT64, 2, s4d), view(whh, ATTNC_FLOAT64, 2, s4h),
                              view(bih, ATTNC_FLOAT64, 1, s4),  view(bhh, ATTNC_FLOAT64, 1, s4),
                              view(w2, ATTNC_FLOAT64, 2, shh),  view(v, ATTNC_FLOAT64, 1, s1),
                              view(start, ATTNC_FLOAT64, 1, sd)};
    int64_t nlen[PB] = {4, 2, 3}, out[PB * (PN + 1)], lens[PB];
    double logits[PB * (PN + 1) * (PN + 1)];
    int64_t sg[3] = {PB, PN + 1, PN + 1};
    attnc_tensor tg = view(logits, ATTNC_FLOAT64, 3, sg), none = {0};
    attnc_tensor tx = view(x, ATTNC_FLOAT64, 3, sx), tk = view(keys, ATTNC_FLOAT64, 3, sk),
                 th = view(h0, ATTNC_FLOAT64, 2, sh), tc = view(c0, ATTNC_FLOAT64, 2, sh),
                 tn = view(nlen, ATTNC_INT64, 1, sb), to = view(out, ATTNC_INT64, 2, so),
                 tl = view(lens, ATTNC_INT64, 1, sb);
    for (int constraint = 0; constraint < 3; constraint++)
        for (int64_t beam = 1; beam <= 6; beam += 5) {
            attnc_status st = attnc_pointer_decode(&to, &tl, &tg, &tx, &tn, &tk, &th, &tc, &p,
                                                   (attnc_pointer_constraint)constraint, beam, 0.0);
            CHECK(st == ATTNC_OK, "pointer decode (constraint %d, beam %lld)", constraint, (long long)beam);
            for (int b = 0; b < PB; b++) {
                int seen[PN + 1] = {0}, ok = lens[b] >= 1 && out[b * (PN + 1) + lens[b] - 1] == 0;
                for (int64_t s = 0; s + 1 < lens[b]; s++) {
                    int64_t q = out[b * (PN + 1) + s];
                    ok = ok && q >= 1 && q <= nlen[b] && !seen[q];
                    if (q >= 1 && q <= PN) seen[q] = 1;
                }
                if (constraint != ATTNC_POINTER_HULL) ok = ok && lens[b] == nlen[b] + 1;
                /* the logits: finite at each choice, the greedy choice their maximum, 0 after the end */
                for (int64_t step = 0; step <= PN; step++) {
                    const double *row = logits + (b * (PN + 1) + step) * (PN + 1);
                    if (step >= lens[b]) {
                        for (int j = 0; j <= PN; j++) ok = ok && row[j] == 0;
                        continue;
                    }
                    int64_t q = out[b * (PN + 1) + step];
                    ok = ok && isfinite(row[q]);
                    for (int j = 0; j <= PN && beam == 1; j++) ok = ok && row[j] <= row[q];
                }
                CHECK(ok, "constraint %d, beam %lld, row %d: a valid sequence ending in the end token", constraint,
                      (long long)beam, b);
            }
        }
    nlen[1] = PN + 1;
    CHECK(attnc_pointer_decode(&to, &tl, &none, &tx, &tn, &tk, &th, &tc, &p, ATTNC_POINTER_PERMUTATION, 1, 0.0) ==
              ATTNC_ERR_VALUE,
          "input_lengths past n refused");
    nlen[1] = 2;
    CHECK(attnc_pointer_decode(&to, &tl, &none, &tx, &tn, &tk, &th, &tc, &p, ATTNC_POINTER_PERMUTATION, 0, 0.0) ==
              ATTNC_ERR_VALUE,
          "beam_size 0 refused");
    double *bufs[] = {x, keys, h0, c0, wih, whh, bih, bhh, w2, v, start};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}
