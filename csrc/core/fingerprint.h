/* fingerprint.h: a 64-bit digest of an array's bytes, so that a change can be
 * noticed without keeping a copy (attnc.vjp's check that what a pullback
 * reads is what its forward saw). Not cryptographic: a change made without
 * knowledge of the digest goes unnoticed with probability about 2^-64. */
#ifndef ATTNC_FINGERPRINT_H
#define ATTNC_FINGERPRINT_H
#include <stddef.h>
#include <stdint.h>

/* The digest of the shape, the item size and the elements (itemsize bytes
 * each, read in C order) of the ndim-dimensional array at data with the
 * given shape and strides (in bytes): the same values give the same digest
 * whatever the strides. */
uint64_t attnc_fingerprint(const void *data, int ndim, const int64_t *shape, const int64_t *strides, size_t itemsize);

#endif
