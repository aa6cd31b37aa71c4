/* gpushare CUDA interposer: the reservation's limits file, read once at
 * load (what the plugin wrote: memory_bytes, compute_pct, class, ...). */
#define _GNU_SOURCE
#include "gpushare.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* gs_parse_u64 reads a whole decimal number (digits only) into *out; -1 when
 * s is empty, holds anything else, or overflows. Not strtoull: glibc 2.38's
 * headers redirect strtol and friends to __isoc23_* (GLIBC_2.38) under
 * _GNU_SOURCE, and the library must load on older glibc (glibc_compat.h;
 * TestLibraryLoadsOnOldGlibc). */
int gs_parse_u64(const char *s, unsigned long long *out)
{
    unsigned long long n = 0;
    if (!s || !*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (n > (~0ULL - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    *out = n;
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

int gs_limits_read(const char *path, struct gs_limits *out)
{
    memset(out, 0, sizeof *out);
    out->compute_pct = 100;
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[256];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        char *l = trim(line);
        if (*l == 0 || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            rc = -1;
            break;
        }
        *eq = 0;
        char *k = trim(l), *v = trim(eq + 1);
        unsigned long long n;
        if (strcmp(k, "memory_bytes") == 0) {
            if (gs_parse_u64(v, &n) < 0) {
                rc = -1;
                break;
            }
            out->have_memory = 1;
            out->memory_bytes = n;
        } else if (strcmp(k, "compute_pct") == 0) {
            if (gs_parse_u64(v, &n) < 0 || n < 1 || n > 100) {
                /* 0 would pace every launch for ever */
                fprintf(stderr, "gpushare: %s: compute_pct=%s: must be 1-100\n", path, v);
                rc = -1;
                break;
            }
            out->compute_pct = (int)n;
        } else if (strcmp(k, "unified_memory") == 0) {
            if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
                rc = -1;
                break;
            }
            out->unified = *v == '1';
        } else if (strcmp(k, "unified_extra_bytes") == 0) {
            if (gs_parse_u64(v, &n) < 0) {
                rc = -1;
                break;
            }
            out->unified_extra_bytes = n;
        } else if (strcmp(k, "context_bytes") == 0) {
            if (gs_parse_u64(v, &n) < 0) {
                rc = -1;
                break;
            }
            out->context_bytes = n;
        } else if (strcmp(k, "timeslice_id") == 0) {
            if (gs_parse_u64(v, &n) < 0) {
                rc = -1;
                break;
            }
            out->timeslice_id = n;
        } else if (strcmp(k, "whole_gpus") == 0) {
            if (gs_parse_u64(v, &n) < 0 || n > 1024) {
                rc = -1;
                break;
            }
            out->whole_gpus = (int)n;
        } else if (strcmp(k, "turn_ms") == 0) {
            if (gs_parse_u64(v, &n) < 0 || n > 10000) {
                fprintf(stderr, "gpushare: %s: turn_ms=%s: must be 0-10000\n", path, v);
                rc = -1;
                break;
            }
            out->turn_set = 1;
            out->turn_ms = n;
        } else if (strcmp(k, "class") == 0) {
            snprintf(out->klass, sizeof out->klass, "%s", v);
        }
        /* other keys: written by a newer plugin, ignored by this library */
    }
    fclose(f);
    return rc;
}
