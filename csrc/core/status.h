/* status.h: failing with a status and a message (per thread, never printed). */
#ifndef ATTNC_STATUS_H
#define ATTNC_STATUS_H
#include <stddef.h>
#include <string.h>

#include "../include/attnc.h"

#if defined(__GNUC__)
#define ATTNC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define ATTNC_PRINTF(f, a)
#endif

/* Record a printf-style message for the calling thread and return status. */
attnc_status attnc_fail(attnc_status status, const char *fmt, ...) ATTNC_PRINTF(2, 3);

/* Return ATTNC_ERR_NOMEM with a message naming what could not be allocated. */
attnc_status attnc_fail_nomem(const char *what, size_t bytes);

/* Return the status of expr from the calling function unless it is OK. */
#define TRY(expr)                                        \
    do {                                                 \
        attnc_status try_status_ = (expr);               \
        if (try_status_ != ATTNC_OK) return try_status_; \
    } while (0)

/* *out <- calloc(count, size), or fail with ATTNC_ERR_NOMEM naming what.
 * count == 0 gives a valid (NULL) pointer and OK. */
attnc_status attnc_calloc(void **out, size_t count, size_t size, const char *what);

/* memcpy and memset for buffers that may be empty: an empty buffer may be
 * NULL (attnc_calloc's), which memcpy and memset must not be given even
 * with a size of 0. */
static inline void attnc_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}
static inline void attnc_zero(void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}

#endif
