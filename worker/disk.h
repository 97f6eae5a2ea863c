/* disk: a worker's state dir (--state-dir). Holds its identity (the
 * worker id and global device ids the coordinator gave it, file
 * "identity") and a copy of every shard it stores, written in the
 * background by one thread: "shards/ARRAY-DEVICE.npy" (numpy format) and
 * beside it "ARRAY-DEVICE.sum" (the xxHash3-64 of the data, 16 hex
 * digits), each written to a temporary name and renamed, the .sum last. A
 * dropped shard's files are removed: their inodes are kept, emptied, in
 * "spare/" for later copies, where an idle writer also makes up to 128
 * files ahead of need (making a file can cost more CPU than the write).
 * Shard data is written with O_DIRECT where the filesystem has it, past a
 * 4 KiB .npy header. After a crash the worker restores the
 * shards whose data matches its .sum (sm_disk_restore) and offers them to
 * the coordinator when it registers again; files that do not match are
 * removed with a warning.
 *
 * bf16 shards have no numpy dtype and are not copied to disk.
 *
 * Threads: sm_disk_observer's calls come from any thread (under the
 * store's lock); the other functions from main. */
#ifndef SM_WORKER_DISK_H
#define SM_WORKER_DISK_H

#include <stdint.h>

#include "sm_err.h"
#include "store.h"

typedef struct sm_disk sm_disk;

/* Opens (creating) dir and dir/shards and starts the writer thread. *out
 * is freed with sm_disk_free. */
sm_err sm_disk_open(const char *dir, sm_disk **out, char *err, size_t errlen);
/* Writes what is queued, stops the thread and frees d. NULL ok. */
void sm_disk_free(sm_disk *d);

/* The identity stored by an earlier run: 1 and the fields filled, or 0 if
 * there is none (or it is unreadable, logged). */
int sm_disk_identity_load(sm_disk *d, uint32_t *worker_id, int *ndevices, int32_t *devices);
/* Stores the identity (temporary file and rename); failures are logged. */
void sm_disk_identity_save(sm_disk *d, uint32_t worker_id, int ndevices, const int32_t *devices);

/* Puts every good shard file of a device st owns into st (whose identity
 * is set); returns how many. Files of other devices, or whose data does
 * not match their checksum, are removed (logged). */
int sm_disk_restore(sm_disk *d, sm_store *st);

/* The store observer that queues copies and removals (user: the sm_disk). */
const sm_store_observer *sm_disk_observer(void);

/* Blocks until every copy queued so far is on disk (tests, shutdown). */
void sm_disk_flush(sm_disk *d);

/* The store spiller that reads spilled shards back from their copies
 * (user: the sm_disk; see sm_store_spill_to). */
const sm_store_spiller *sm_disk_spiller(void);

#endif
