/* tsp.h: planar travelling-salesman tours for the Pointer Networks datasets
 * (Vinyals et al. 2015): exact tours by Held-Karp dynamic programming, a
 * nearest-neighbour + 2-opt heuristic (with Or-opt moves or without), and
 * closed tour lengths.
 *
 * Sizes: B instances of n cities each. points (B, n, 2) FLOAT64, any strides,
 * every coordinate finite; tours (B, n) INT64 and lengths (B) FLOAT64 are
 * outputs (C-contiguous). Distances are Euclidean, sqrt(dx*dx + dy*dy).
 *
 * Every tour starts at city 0 and, for n >= 3, is in its canonical direction
 * tour[1] < tour[n-1]. A returned length is the closed length of the returned
 * tour, summed along it from city 0 (the same bits attnc_tsp_tour_length
 * gives). Work is split over instances (each solved on its own), so results do
 * not depend on the thread count. */
#ifndef ATTNC_TSP_H
#define ATTNC_TSP_H
#include "../../include/attnc.h"

/* Largest n attnc_tsp_held_karp accepts: its table has 2^(n-1) (n-1) entries,
 * a double and a byte each per worker (90 MB at n = 20), and an instance takes
 * about (n-1)^2 2^(n-3) steps (47 million at n = 20: a fraction of a second). */
#define ATTNC_TSP_HELD_KARP_MAX_N 20

/* Optimal closed tours, 1 <= n <= 20 (larger n fails with ATTNC_ERR_VALUE).
 * Ties are broken deterministically (the lowest city index wins at every
 * step of the recursion). */
attnc_status attnc_tsp_held_karp(attnc_tensor *tours, attnc_tensor *lengths, const attnc_tensor *points);

/* Heuristic tours, any n >= 1: the nearest-neighbour tour from city 0 (ties:
 * the lowest index), then first-improvement 2-opt moves (segment reversals,
 * scanned in a fixed order) until none shortens the tour by more than 1e-12. */
attnc_status attnc_tsp_two_opt(attnc_tensor *tours, attnc_tensor *lengths, const attnc_tensor *points);

/* Better heuristic tours, any n >= 1: attnc_tsp_two_opt's, then alternately
 * the first Or-opt move that shortens the tour by more than 1e-12 (a segment
 * of 1, 2 or 3 consecutive cities, not city 0, moved between two other
 * neighbours, forwards or reversed; scanned by segment length, then start,
 * then insertion edge, forwards before reversed) and 2-opt to convergence,
 * until no Or-opt move gains. */
attnc_status attnc_tsp_or_opt(attnc_tensor *tours, attnc_tensor *lengths, const attnc_tensor *points);

/* lengths (B) <- closed length of each tour (B, n) INT64 (any strides); every
 * tour must be a permutation of 0..n-1 (else ATTNC_ERR_VALUE naming the row). */
attnc_status attnc_tsp_tour_length(attnc_tensor *lengths, const attnc_tensor *points, const attnc_tensor *tours);

/* Check points (B, n, 2) FLOAT64, n >= 1, every coordinate finite (the errors
 * name "points"); dims <- (B, n, 2). Shared with hull.c. */
attnc_status attnc_check_planar_points(const attnc_tensor *points, int64_t dims[3]);

#endif
