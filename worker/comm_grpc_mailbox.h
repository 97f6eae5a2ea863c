/* comm_grpc_mailbox: where the blocks of a job's collectives that other
 * workers push (Worker.Exchange) wait for the devices that need them.
 *
 * A *blob* is the bytes one device sends to one worker for one collective:
 * it is keyed by (seq, src_device, dst_device), unique within a job because
 * groups of one sequence number are disjoint and a device sends at most one
 * blob per collective to a given (worker, dst_device). A blob crosses the
 * wire as one or more CollMsg chunks (offsets in order, the last one with
 * the xxHash3-64 checksum of the whole blob); sm_mailbox_rx collects them.
 * The blob keeps the chunks as they came (pieces), without copying them
 * into one buffer: readers copy or combine straight from the pieces. A
 * reader that knows where a blob will go may offer that memory first
 * (sm_mailbox_expect): a blob that starts arriving after the offer is
 * written there straight from the network, as one piece.
 *
 * A mailbox holds complete blobs until their readers have released them:
 * the first sm_mailbox_take of a key says how many local devices will read
 * it; the last sm_mailbox_release frees it. Abort wakes every waiter with
 * the abort's code and sentence, frees nothing in use and drops later puts.
 *
 * Ownership: sm_mailbox_create's result is owned by the caller
 * (sm_mailbox_free, once no thread uses it; it frees every blob). A put
 * takes the blob's buffer. Threads: every sm_mailbox_* function is
 * thread-safe; an sm_mailbox_rx belongs to one stream (one thread). */
#ifndef SM_WORKER_COMM_GRPC_MAILBOX_H
#define SM_WORKER_COMM_GRPC_MAILBOX_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "sm_err.h"
#include "sm_svc_job.h"

/* Largest blob accepted (bytes). */
#define SM_MAILBOX_MAX_BLOB ((int64_t)8 << 30)
/* Most chunks a blob of len bytes may come in: SM_MAILBOX_MAX_PIECES plus
 * one per SM_MAILBOX_PIECE_BYTES, which bounds the bookkeeping of blobs
 * sent in tiny chunks (senders cut SM_SVC_CHUNK, and shorter chunks only
 * at the end of a segment). */
#define SM_MAILBOX_MAX_PIECES  1024
#define SM_MAILBOX_PIECE_BYTES 4096

typedef struct sm_mailbox sm_mailbox;

/* A run of a blob's bytes (one received chunk). */
typedef struct {
    void *data; /* owned by the blob */
    int64_t len;
} sm_mailbox_piece;

/* One complete blob, as handed out by take: the concatenation of its
 * pieces, len bytes in all. */
typedef struct sm_mailbox_blob {
    struct sm_mailbox_blob *next;
    uint32_t seq;
    int32_t src_device;
    int32_t dst_device;
    sm_mailbox_piece *pieces; /* owned, npieces of them (none when len is 0) */
    int npieces, cap;
    int64_t len;
    int readers;                    /* -1 until the first take */
    int direct;                     /* received into a destination offered by sm_mailbox_expect:
                                       one piece over it, not owned */
    struct sm_mailbox *reserved_in; /* the capped mailbox its bytes were counted in at
                                       its first chunk, until put or discarded */
} sm_mailbox_blob;

/* A budget of bytes that capped mailboxes (of jobs that have not started)
 * hold or are receiving together: owned by the job table that creates it
 * (sm_mailbox_budget_free, after every mailbox that borrows it), and
 * thread-safe. max_bytes 0: no limit. */
typedef struct sm_mailbox_budget sm_mailbox_budget;
sm_err sm_mailbox_budget_create(int64_t max_bytes, sm_mailbox_budget **out, char *err,
                                size_t errlen);
void sm_mailbox_budget_free(sm_mailbox_budget *b);
/* Bytes that the capped mailboxes counting in b hold or are receiving now. */
int64_t sm_mailbox_budget_used(sm_mailbox_budget *b);

/* max_bytes: most bytes held at once (0: unlimited) while the mailbox is
 * capped (for a job that has not started): a blob beyond it, or beyond
 * budget (borrowed, shared with other capped mailboxes; NULL: none), is
 * refused SM_ERESOURCE at its first chunk, before its bytes are received.
 * sm_mailbox_set_max(box, 0) uncaps it for good (the job started) and
 * takes its bytes out of the budget. */
sm_err sm_mailbox_create(sm_mailbox_budget *budget, int64_t max_bytes, sm_mailbox **out, char *err,
                         size_t errlen);
void sm_mailbox_free(sm_mailbox *b);

/* Adds a complete blob (takes b, which must come from sm_mailbox_rx). A key
 * already present is SM_EEXIST; after an abort the blob is dropped and SM_OK
 * returned. On error b is freed. */
sm_err sm_mailbox_put(sm_mailbox *box, sm_mailbox_blob *b, char *err, size_t errlen);
/* Frees a complete blob from sm_mailbox_rx that is not put (its job is
 * over), giving back what it reserved in box (rx's box; may be NULL). */
void sm_mailbox_discard(sm_mailbox *box, sm_mailbox_blob *b);

/* Waits until the blob (seq, src_device, dst_device) is there, the mailbox is aborted or
 * the absolute CLOCK_MONOTONIC time deadline passes (SM_ETIMEOUT, nothing
 * written to err). readers: how many takes will release it (set by the
 * first take). On SM_OK *out is valid until sm_mailbox_release. */
sm_err sm_mailbox_take(sm_mailbox *box, uint32_t seq, int32_t src_device, int32_t dst_device,
                       int readers, const struct timespec *deadline, sm_mailbox_blob **out,
                       char *err, size_t errlen);
void sm_mailbox_release(sm_mailbox *box, sm_mailbox_blob *b);

/* Copies len bytes of b from byte offset off into dst; off + len must be
 * within b->len. */
void sm_mailbox_blob_copy(const sm_mailbox_blob *b, int64_t off, void *dst, int64_t len);
/* 1 if every piece but the last holds a multiple of align bytes, so that
 * no element of that size straddles two pieces. */
int sm_mailbox_blob_aligned(const sm_mailbox_blob *b, int64_t align);

/* Wakes every waiter with code and why (one sentence); the first abort
 * wins. */
void sm_mailbox_abort(sm_mailbox *box, sm_err code, const char *why);

/* Changes the most bytes held at once (0: unlimited). */
void sm_mailbox_set_max(sm_mailbox *box, int64_t max_bytes);
/* Bytes held now. */
int64_t sm_mailbox_bytes(sm_mailbox *box);

/* Offers buf (len bytes, borrowed) as where the blob (seq, src_device,
 * dst_device) goes: if its first chunk comes in after this, on a stream
 * whose sm_mailbox_rx names this mailbox, and it has len bytes, its chunks
 * are written straight into buf and take hands it out as direct (one piece
 * over buf). Otherwise it arrives as pieces as usual. SM_ENOMEM, or
 * SM_EEXIST if that blob was offered a destination already. */
sm_err sm_mailbox_expect(sm_mailbox *box, uint32_t seq, int32_t src_device, int32_t dst_device,
                         void *buf, int64_t len);
/* Withdraws the offer (if any): once this returns nothing writes into its
 * buf any more. Waits for a chunk being written; a stream part-way through
 * the blob then fails (SM_ECANCELLED). Call it before buf is reused or freed,
 * also after the blob was taken. */
void sm_mailbox_unexpect(sm_mailbox *box, uint32_t seq, int32_t src_device, int32_t dst_device);

/* Reassembly of the blobs of one Exchange stream, in order. */
typedef struct {
    sm_mailbox_blob *cur; /* blob being received, or NULL */
    sm_job_id job;
    int64_t got;
    struct sm_checksum *sum;
    /* the mailbox whose offered destinations a new blob may be received
     * into (borrowed; NULL: none), set by the caller before a blob's first
     * chunk */
    sm_mailbox *box;
    int busy; /* a chunk is being written into an offered destination */
} sm_mailbox_rx;

/* One message in three steps, so that its data can be written straight
 * from the network: place checks the header and says where the m->len
 * bytes of data go (*dst, NULL when len is 0); the caller writes them there
 * and calls copied for each run written, in order (it keeps the checksum);
 * then done. place checks that a new blob starts at offset 0 with a sane
 * total_bytes, that offsets follow on, that the bytes do not exceed the
 * total nor come in too many chunks (SM_EINVAL), that an offered
 * destination being received into was not withdrawn (SM_ECANCELLED); done
 * checks on the last message the byte count and checksum (SM_EDATALOSS).
 * On SM_OK with *done set, *job and *out are the finished blob (owned by
 * the caller: put it or free it with sm_mailbox_blob_free). After an error
 * the stream is over: call sm_mailbox_rx_end. */
sm_err sm_mailbox_rx_place(sm_mailbox_rx *rx, const sm_svc_coll_msg *m, void **dst, char *err,
                           size_t errlen);
void sm_mailbox_rx_copied(sm_mailbox_rx *rx, const void *p, size_t n);
sm_err sm_mailbox_rx_done(sm_mailbox_rx *rx, const sm_svc_coll_msg *m, sm_job_id *job,
                          sm_mailbox_blob **out, int *done, char *err, size_t errlen);
/* The three steps for a message whose data is in memory (m->data).
 * owned: NULL to copy m->data, or m->data itself when it is a malloc'd
 * buffer the feed takes as a piece (freed here on error; such a blob is
 * not received into an offered destination). */
sm_err sm_mailbox_rx_feed(sm_mailbox_rx *rx, const sm_svc_coll_msg *m, void *owned, sm_job_id *job,
                          sm_mailbox_blob **out, int *done, char *err, size_t errlen);
/* Frees a half-received blob and the checksum state. */
void sm_mailbox_rx_end(sm_mailbox_rx *rx);
void sm_mailbox_blob_free(sm_mailbox_blob *b);

#endif
