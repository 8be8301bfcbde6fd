/* status.c: the per-thread error message behind attnc_last_error(). */
#include "status.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static _Thread_local char last_error[512];

const char *attnc_last_error(void) { return last_error; }

attnc_status attnc_fail(attnc_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

attnc_status attnc_fail_nomem(const char *what, size_t bytes) {
    return attnc_fail(ATTNC_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
}

attnc_status attnc_calloc(void **out, size_t count, size_t size, const char *what) {
    *out = NULL;
    if (count == 0 || size == 0) return ATTNC_OK;
    if (count > SIZE_MAX / size) return attnc_fail_nomem(what, SIZE_MAX);
    *out = calloc(count, size);
    return *out ? ATTNC_OK : attnc_fail_nomem(what, count * size);
}
