/* sm_copy: copies of whole arrays and long runs (kernels, collectives).
 * Internal to shmap: not an installed header (sm_copy_stream, in
 * sm_array.h, is public).
 *
 * glibc's memcpy turns to streaming stores only past its
 * x86_non_temporal_threshold, derived from the cache size the CPU
 * reports: 240 MiB on a 2-core virtual machine whose L3 holds 32 MiB, so
 * a larger-than-cache copy below that reads every target line first. */
#ifndef SM_COPY_H
#define SM_COPY_H

#include <stddef.h>

#define SM_COPY_STREAM_MIN ((size_t)4 << 20)

/* memcpy below SM_COPY_STREAM_MIN bytes, sm_copy_stream from there.
 * dst and src must not overlap. */
void sm_copy(void *dst, const void *src, size_t n);

/* The most bytes a run of copies made at once on this host (a
 * collective's outputs on all its devices) writes for which cached stores
 * beat streaming ones: measured on a 2-core virtual machine, 4 threads
 * copying 16 MiB each from the outputs of the step before (a chain of
 * collectives) took 2.7 ms with memcpy and 4.0 ms streamed, 24 MiB each
 * 6.7 and 5.9 ms: below this the next step finds its sources in cache. */
#define SM_COPY_HOT_MAX ((size_t)64 << 20)

/* 1 when copies writing total bytes at once on this host are better
 * streamed (sm_copy_stream): total above SM_COPY_HOT_MAX, or above twice
 * the last-level cache this CPU reports when that is smaller. */
int sm_copy_streams(size_t total);

/* sm_copy_stream when stream (from sm_copy_streams), else memcpy, for
 * every n: the pieces of a large run stream too. */
void sm_copy_as(void *dst, const void *src, size_t n, int stream);

#endif
