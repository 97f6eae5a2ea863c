/* ckpt: a worker's side of checkpoints (docs/service.md "Checkpoints"):
 * writing its shards of an array as .npy files into a checkpoint
 * directory (Worker.WriteCheckpoint), writing and reading the manifest, and
 * reading the stored shards a load needs (the file pieces of
 * Worker.Assemble).
 *
 * Every file is written to "NAME.tmp", fsynced, renamed to NAME, and the
 * directory fsynced, so a file under its final name is always whole. The
 * coordinator has the manifest written last: a directory without one is an
 * unfinished save.
 *
 * Reading a stored file checks it against the manifest's entry before any
 * byte of it is used: its size, its xxHash3-64 (of the whole file), its
 * .npy header (dtype, shape, C order). Any mismatch, a missing file, or an
 * unreadable or malformed manifest is SM_EDATALOSS with a sentence naming
 * the file.
 *
 * Threads: thread-safe; a call uses only its arguments and the store. */
#ifndef SM_WORKER_CKPT_H
#define SM_WORKER_CKPT_H

#include "handlers.h"

/* The manifest's file name inside a checkpoint directory. */
#define SM_CKPT_MANIFEST "manifest.json"

/* Worker.WriteCheckpoint: creates req->dir (and its parents) if missing;
 * refuses one that holds a manifest already (SM_EEXIST). Writes the shard
 * of req->array_id on each files[k].device to dir/files[k].file, filling
 * out[k].bytes and out[k].checksum (xxHash3-64 of the whole file), or, with
 * no files, req->manifest to dir/manifest.json. bf16 shards are
 * SM_EUNIMPLEMENTED (numpy has no such dtype). A file that cannot be
 * written is SM_EPERM (permissions, read-only), SM_ERESOURCE (no space) or
 * SM_EPRECONDITION (anything else), naming it; the temporary file being
 * written is then removed. */
sm_err sm_ckpt_write(sm_handlers *h, const sm_svc_ckpt_write_req *req, sm_svc_ckpt_file *out,
                     char *err, size_t errlen);

/* Worker.ReadManifest: *text (malloc'd, caller frees) is dir/manifest.json.
 * A directory that does not exist is SM_ENOTFOUND; one without a manifest,
 * or with an unreadable one, SM_EDATALOSS. */
sm_err sm_ckpt_manifest_read(const char *dir, char **text, char *err, size_t errlen);

/* 1 if a checkpoint file of req lands whole in new shard i (a piece that
 * is all of the file and all of the shard): the file is then read straight
 * into that shard, which need not be zeroed first. */
int sm_ckpt_shard_is_landing(const sm_svc_assemble_req *req, int i);

/* The file pieces of an assemble (pieces with src_file > 0): reads each
 * file of req->files that a piece names, once, checks it, and copies its
 * pieces into shards[i] (the new shard of req->shards[i], of the request's
 * dtype and shape). A file read whole into one new shard lands there
 * without a copy; other parts are read into scratch from pool (the
 * store's; NULL: none). */
sm_err sm_ckpt_load_pieces(sm_array_pool *pool, const sm_svc_assemble_req *req,
                           sm_store_shard **shards, char *err, size_t errlen);

#endif
