/* ckpt: a checkpoint's manifest (docs/service.md "Checkpoints"), as the
 * coordinator writes it after a save and reads it before a load: the
 * array's dtype, shape, the sharding it was saved with, and one entry per
 * distinct shard (its .npy file, its box of the global array, the devices
 * that held it, its size, the xxHash3-64 of the whole file and of each of
 * its chunks).
 *
 * Pure: no registry, no network, no files. Thread-safety: none needed. */
#ifndef SM_SERVER_CKPT_H
#define SM_SERVER_CKPT_H

#include <stdint.h>

#include "sm_sharding.h"

#define SM_CKPT_FORMAT  "shmap-checkpoint"
#define SM_CKPT_VERSION 1
/* Longest shard file name. */
#define SM_CKPT_FILE_MAX 64
/* Most chunks a file is checked in (equal to SM_SVC_CKPT_CHUNKS). */
#define SM_CKPT_MAX_CHUNKS 64

typedef struct {
    char file[SM_CKPT_FILE_MAX]; /* a plain name inside the directory */
    sm_index index;              /* its box of the global array */
    int ndevices;                /* devices that held it when saved (for people) */
    int32_t *devices;            /* owned */
    int64_t bytes;               /* of the whole file */
    uint64_t checksum;           /* xxHash3-64 of the whole file */
    /* The file in chunks of chunk_bytes (the last may be shorter), nchunks
     * of them, with the xxHash3-64 of each (what a reader checks). */
    int64_t chunk_bytes;
    int nchunks;
    uint64_t chunk_sums[SM_CKPT_MAX_CHUNKS];
} sm_ckpt_shard;

typedef struct {
    sm_dtype dtype;
    sm_shape shape;
    sm_sharding sharding; /* as saved */
    int nshards;
    sm_ckpt_shard *shards; /* owned */
} sm_ckpt_manifest;

/* The file name of distinct shard k ("shard-00003.npy"). */
void sm_ckpt_file_name(int k, char *buf, size_t len);

/* The manifest as JSON text (malloc'd, caller frees), or NULL when out of
 * memory. */
char *sm_ckpt_manifest_format(const sm_ckpt_manifest *m);

/* Parses and validates a manifest: known format and version, a dtype, a
 * shape, and shards whose boxes lie inside the shape and tile it exactly
 * (every element in one shard), each with a plain file name, its size,
 * checksum, and chunk checksums that fit its size. The saved mesh and spec are
 * parsed back if present and well formed. Anything else is SM_EDATALOSS
 * with a sentence naming `path` (the manifest's, for messages). On SM_OK
 * *out is the caller's (sm_ckpt_manifest_free). */
sm_err sm_ckpt_manifest_parse(const char *text, const char *path, sm_ckpt_manifest *out, char *err,
                              size_t errlen);

/* Frees the shards and zeroes *m. NULL ok. */
void sm_ckpt_manifest_free(sm_ckpt_manifest *m);

#endif
