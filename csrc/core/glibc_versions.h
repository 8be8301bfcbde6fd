/* glibc_versions.h: take the thread functions at the symbol versions every
 * x86-64 glibc has (GLIBC_2.2.5), not at the ones glibc 2.34 added.
 *
 * Why: a wheel runs on the glibc versions that define every symbol version
 * it binds (its manylinux tag says which). glibc 2.34 merged libpthread into
 * libc and gave pthread_create, pthread_join, pthread_mutex_trylock and
 * pthread_once new default versions; a build on glibc >= 2.34 binds those
 * and would load only on glibc >= 2.34. The old versions are the same
 * functions at the same addresses in libc (kept for old binaries), and on
 * glibc < 2.34 they are libpthread's, which the bundled OpenBLAS loads. So
 * the wheel serves glibc >= 2.28 (OpenBLAS's own floor), not >= 2.34.
 * Include after <pthread.h> in every file that calls these. */
#ifndef ATTNC_GLIBC_VERSIONS_H
#define ATTNC_GLIBC_VERSIONS_H
#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
__asm__(".symver pthread_create, pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join, pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_mutex_trylock, pthread_mutex_trylock@GLIBC_2.2.5");
__asm__(".symver pthread_once, pthread_once@GLIBC_2.2.5");
#endif
#endif
