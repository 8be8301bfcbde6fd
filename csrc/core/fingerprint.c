/* fingerprint.c: four independent lanes over 32-byte stripes, each stripe
 * word mixed into its lane by a multiply-rotate-multiply round (a bijection
 * of the lane for a given word, and of the word for a given lane: changing
 * one word always changes its lane), lanes merged the same way, then the
 * length and the last partial stripe, then an avalanche. */
#include "fingerprint.h"

#include <stdbool.h>
#include <string.h>

#define P1 UINT64_C(0x9E3779B185EBCA87)
#define P2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define P3 UINT64_C(0x165667B19E3779F9)

typedef struct {
    uint64_t lane[4];
    unsigned char tail[32]; /* bytes not yet forming a stripe */
    size_t fill;
    uint64_t total;
} digest;

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t mix(uint64_t acc, uint64_t word) { return rotl(acc + word * P2, 31) * P1; }

static void stripe(digest *d, const unsigned char *p) {
    for (int i = 0; i < 4; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, sizeof w);
        d->lane[i] = mix(d->lane[i], w);
    }
}

static void feed(digest *d, const unsigned char *p, size_t n) {
    d->total += n;
    if (d->fill) {
        size_t take = n < 32 - d->fill ? n : 32 - d->fill;
        memcpy(d->tail + d->fill, p, take);
        d->fill += take, p += take, n -= take;
        if (d->fill < 32) return;
        stripe(d, d->tail);
        d->fill = 0;
    }
    for (; n >= 32; p += 32, n -= 32) stripe(d, p);
    memcpy(d->tail, p, n);
    d->fill = n;
}

static uint64_t finish(digest *d) {
    uint64_t h = d->total * P3;
    for (int i = 0; i < 4; i++) h = mix(h ^ d->lane[i], P3);
    memset(d->tail + d->fill, 0, 32 - d->fill);
    for (size_t i = 0; i < d->fill; i += 8) {
        uint64_t w;
        memcpy(&w, d->tail + i, sizeof w);
        h = mix(h, w);
    }
    h ^= h >> 33, h *= P2, h ^= h >> 29, h *= P3, h ^= h >> 32;
    return h;
}

/* The elements of dims [dim, ndim) at p, in C order: whole rows at once when
 * the last dim is contiguous. */
static void feed_dims(digest *d, const unsigned char *p, int dim, int ndim, const int64_t *shape,
                      const int64_t *strides, size_t itemsize) {
    if (dim == ndim) {
        feed(d, p, itemsize);
    } else if (dim == ndim - 1 && strides[dim] == (int64_t)itemsize) {
        feed(d, p, (size_t)shape[dim] * itemsize);
    } else {
        for (int64_t i = 0; i < shape[dim]; i++)
            feed_dims(d, p + (ptrdiff_t)(i * strides[dim]), dim + 1, ndim, shape, strides, itemsize);
    }
}

uint64_t attnc_fingerprint(const void *data, int ndim, const int64_t *shape, const int64_t *strides, size_t itemsize) {
    digest d = {{P1 + P2, P2, 0, (uint64_t)0 - P1}, {0}, 0, 0};
    uint64_t size = itemsize;
    feed(&d, (const unsigned char *)&size, sizeof size);
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        uint64_t n = (uint64_t)shape[i];
        feed(&d, (const unsigned char *)&n, sizeof n);
        empty |= n == 0;
    }
    if (!empty) feed_dims(&d, data, 0, ndim, shape, strides, itemsize);
    return finish(&d);
}
