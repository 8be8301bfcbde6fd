/* hull.h: planar convex hulls, the targets of the Pointer Networks hull task
 * (Vinyals et al. 2015, sec. 4.2).
 *
 * Sizes: B instances of n points each. points (B, n, 2) FLOAT64, any strides,
 * every coordinate finite; hull (B, n) INT64 and sizes (B) INT64 are outputs
 * (C-contiguous).
 *
 * hull[b] holds instance b's vertices counter-clockwise, starting from the
 * lowest index among them, then -1 up to n; sizes[b] counts them. Vertices
 * are corners only: a point on an edge between two vertices is not one, and
 * a point given more than once stands for itself by its lowest index. All
 * points equal: one vertex; all on one line: its two ends.
 *
 * Andrew's monotone chain on each instance (sorted by x, then y, then index),
 * a turn kept only when strictly left (the sign of a float64 cross product).
 * Work is split over instances, so results do not depend on the thread
 * count. */
#ifndef ATTNC_HULL_H
#define ATTNC_HULL_H
#include "../../include/attnc.h"

attnc_status attnc_convex_hull(attnc_tensor *hull, attnc_tensor *sizes, const attnc_tensor *points);

#endif
