/* sm_hold: a count of buffers lent to someone who gives them back from
 * another thread (data sent without a copy, released by the network layer
 * when it lets go). The owner takes one reference per loan, and when it is
 * done waits a bounded time for every release; if some are still out, the
 * hold is left to the last release, which frees it.
 *
 *   sm_hold *h = sm_hold_create();
 *   sm_hold_take(h); send(data, sm_hold_release, h);   // per loan
 *   int out = sm_hold_end(h, 5000);                    // h is gone after
 *
 * Thread-safe; sm_hold_release may run on any thread, also after
 * sm_hold_end returned. */
#ifndef SM_HOLD_H
#define SM_HOLD_H

typedef struct sm_hold sm_hold;

/* A hold with nothing lent, or NULL when out of memory. */
sm_hold *sm_hold_create(void);
/* One more loan. */
void sm_hold_take(sm_hold *h);
/* A loan came back (a release callback: arg is the hold). */
void sm_hold_release(void *arg);
/* Waits at most wait_ms for every loan to come back, then gives up the
 * hold: frees it, or leaves it to the last release. Returns the number of
 * loans still out (0: all came back). NULL is ignored (returns 0). */
int sm_hold_end(sm_hold *h, int wait_ms);

#endif
