/* reaper: the coordinator's periodic thread. About every period_ms it
 * fails pending arrays past their deadline and marks silent workers lost
 * (sm_registry_reap), then sends the resulting FreeArray requests; with
 * a state dir it also makes the database's checkpoints
 * (sm_registry_checkpoint).
 *
 * Ownership: sm_reaper_start returns a reaper owned by the caller, stopped
 * and freed by sm_reaper_stop. The registry is borrowed and must outlive
 * it. Thread-safety: start and stop from one thread (main). */
#ifndef SM_SERVER_REAPER_H
#define SM_SERVER_REAPER_H

#include "registry.h"

typedef struct sm_reaper sm_reaper;

sm_err sm_reaper_start(sm_registry *r, int64_t lost_after_ms, int period_ms, int call_deadline_ms,
                       sm_reaper **out, char *err, size_t errlen);
/* Wakes the thread, joins it and frees the reaper. NULL ok. */
void sm_reaper_stop(sm_reaper *rp);

#endif
