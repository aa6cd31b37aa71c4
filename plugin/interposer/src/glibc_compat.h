/* The glibc the library asks for: the oldest an image may have.
 *
 * The library is preloaded into every process of a task, whatever image the
 * task runs, and a preloaded library that needs a symbol version the
 * image's glibc lacks stops the process before main. glibc 2.34 moved the
 * dl* and pthread_* functions into libc.so.6 under new versions
 * (dlopen@GLIBC_2.34, ...), so a library linked against a newer glibc would
 * need 2.34 and could not start on Ubuntu 20.04 (2.31), Debian 11 (2.31) or
 * UBI 8 (2.28). The pins below bind each such reference to the version the
 * function had before (libc.so.6 keeps them for old binaries; on an old
 * glibc they are libdl.so.2's and libpthread.so.0's, which the build links
 * with --no-as-needed so the loader loads them). The baseline is glibc
 * 2.17 (x86_64; aarch64's oldest version); TestLibraryLoadsOnOldGlibc
 * fails on any newer version required. fstat is not used: it became a
 * symbol in 2.33 (before, an inline over __fxstat); use lseek for a size.
 *
 * Included first by gpushare.h; a pin for a function a file does not call
 * costs nothing. */
#ifndef GS_GLIBC_COMPAT_H
#define GS_GLIBC_COMPAT_H

#include <features.h> /* __GLIBC__ */

#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
#if defined(__x86_64__)
#define GS_GLIBC_BASE "GLIBC_2.2.5"
#define GS_GLIBC_ROBUST "GLIBC_2.12" /* the robust mutex calls came in 2.12 */
#else
#define GS_GLIBC_BASE "GLIBC_2.17"
#define GS_GLIBC_ROBUST "GLIBC_2.17"
#endif
#define GS_PIN(fn, ver) __asm__(".symver " #fn "," #fn "@" ver)
GS_PIN(dladdr, GS_GLIBC_BASE);
GS_PIN(dlclose, GS_GLIBC_BASE);
GS_PIN(dlerror, GS_GLIBC_BASE);
GS_PIN(dlopen, GS_GLIBC_BASE);
GS_PIN(dlvsym, GS_GLIBC_BASE);
GS_PIN(pthread_once, GS_GLIBC_BASE);
GS_PIN(pthread_mutex_trylock, GS_GLIBC_BASE);
GS_PIN(pthread_mutexattr_init, GS_GLIBC_BASE);
GS_PIN(pthread_mutexattr_destroy, GS_GLIBC_BASE);
GS_PIN(pthread_mutexattr_setpshared, GS_GLIBC_BASE);
GS_PIN(pthread_mutexattr_setrobust, GS_GLIBC_ROBUST);
GS_PIN(pthread_mutex_consistent, GS_GLIBC_ROBUST);
#undef GS_PIN
#endif

#endif
