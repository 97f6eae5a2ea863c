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

#endif
