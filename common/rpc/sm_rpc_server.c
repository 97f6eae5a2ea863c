/* sm_rpc_server: one `next` completion queue and a pool of threads that
 * take turns at it (leader/followers). One thread at a time, the leader,
 * drains the queue and routes completions. When a new call arrives, the
 * leader runs its handler itself, on the thread that received the request,
 * and stays the leader: a short handler (most unary calls) wakes no other
 * thread at all. While its handler waits for one of its own stream's
 * receives or sends, the leader drains the queue itself until that
 * completion comes (routing the others, and queueing new calls for other
 * threads), so a stream's messages cost no thread switch either. It hands
 * the queue to an idle thread when its handler waits for anything else
 * (sm_rpc_may_block); and should a handler run longer than LEAD_AWAY_MS
 * without doing so, an idle thread that wakes every LEAD_AWAY_MS while the
 * server is busy takes the queue over. With no idle thread a new one is
 * started to lead; at the thread cap the call waits in a queue for the
 * next free thread while the leader keeps routing completions, which
 * blocking handlers wait for.
 *
 * Every call context is reference counted under its own mutex: one reference
 * per pending batch (tag) plus one for the handler while it runs. The context
 * is freed by whoever drops the last reference. The server counts live
 * contexts (armed requests included) and shuts the CQ down only once it is
 * stopping, the shutdown tag has arrived and no context is left (gRPC core requires the CQ drained
 * of every tag before grpc_completion_queue_destroy). */
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sm_log.h"
#include "sm_tenant.h"
#include "sm_rpc_internal.h"
#include "sm_rpc_proto.h"
#include "sm_time.h"

#define HEALTH_PATH "/grpc.health.v1.Health/Check"

/* How long the leader may run a handler before an idle thread takes the
 * queue over (a handler that blocks on something else than this server's
 * own waits leaves the queue undrained for that long at most), in ms. */
#define LEAD_AWAY_MS 2
/* After the leader last ran a handler, an idle thread keeps waking every
 * LEAD_AWAY_MS for this long (ms), to watch the next one. */
#define LEAD_WATCH_MS 200

typedef enum {
    TAG_NEW,      /* a requested (registered or generic) call arrived */
    TAG_RECV,     /* RECV_MESSAGE done */
    TAG_SEND,     /* SEND_MESSAGE done */
    TAG_FINISH,   /* SEND_STATUS_FROM_SERVER done */
    TAG_CLOSE,    /* RECV_CLOSE_ON_SERVER done */
    TAG_SHUTDOWN, /* grpc_server_shutdown_and_notify done */
} tag_kind;

typedef struct {
    sm_rpc_call *call; /* NULL for TAG_SHUTDOWN */
    tag_kind kind;
} tag;

typedef struct {
    char *path;
    char *service; /* "shmap.v1.Worker", for health */
    sm_rpc_kind kind;
    const ProtobufCMessageDescriptor *request;
    sm_rpc_handler handler;
    void *user;
    void *handle; /* grpc_server_register_method */
    int cluster_only;
    int grant;
    /* latency (sm_rpc_server_stats), updated with atomic adds */
    uint64_t calls, sum_ns, buckets[SM_RPC_LATENCY_NBUCKETS + 1];
} method;

const double sm_rpc_latency_bounds_s[SM_RPC_LATENCY_NBUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30};

static void method_observe(method *m, int64_t ns)
{
    double s = (double)ns * 1e-9;
    int b = 0;
    while (b < SM_RPC_LATENCY_NBUCKETS && s > sm_rpc_latency_bounds_s[b])
        b++;
    __atomic_add_fetch(&m->buckets[b], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&m->sum_ns, (uint64_t)(ns > 0 ? ns : 0), __ATOMIC_RELAXED);
    __atomic_add_fetch(&m->calls, 1, __ATOMIC_RELAXED);
}

struct sm_rpc_call {
    sm_rpc_server *srv;
    int method; /* index into srv->methods; -1: generic (unimplemented) */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array req_md;
    grpc_byte_buffer *payload; /* READ_INITIAL_BYTE_BUFFER methods */
    grpc_call_details details; /* generic only */
    grpc_byte_buffer *recv_bb;
    grpc_byte_buffer *finish_bb;
    int cancelled; /* written by RECV_CLOSE_ON_SERVER */
    tag tag_new, tag_recv, tag_send, tag_finish, tag_close;

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;
    int refs;
    int recv_pending, recv_ok;
    int send_pending, send_ok;
    int closed;
    int md_sent;                /* initial metadata sent */
    int payload_out;            /* the initial payload was handed out */
    int finished;               /* sm_rpc_finish was called */
    sm_rpc_call *next;          /* pool queue */
    char *peer;                 /* counted against srv->peers until destroyed; NULL: not */
    char tenant[SM_TENANT_MAX]; /* whose token it carries; "" the server's own */
    int authenticated;          /* 0: let through without a token for a grant */
};

struct sm_rpc_server {
    grpc_server *srv;
    grpc_completion_queue *cq;
    char *token;
    int (*authenticate)(void *user, const unsigned char *token, size_t len, char *tenant);
    void *authenticate_user;
    int has_grant_key;
    sm_grant_key grant_key;
    int all_cluster_only;
    int tls;                /* serves TLS: cluster_only methods check the peer's certificate */
    sm_rpc_peers *peers;    /* streams open per client; NULL: no limit */
    int max_client_streams; /* with peers */
    char *max_streams_name; /* names the limit in the refusal */
    int port;
    method *methods;
    int nmethods;
    int health; /* index of the built-in health method */
    int started;
    int stopped;
    tag tag_shutdown;

    pthread_mutex_t mu; /* guards the fields below */
    int stopping;
    int shutdown_done; /* the shutdown tag arrived */
    int cq_shut;       /* grpc_completion_queue_shutdown called */
    long live;         /* call contexts alive */

    pthread_mutex_t pool_mu; /* guards the pool */
    pthread_cond_t pool_cv;  /* idle threads wait here for the queue or a call */
    pthread_cond_t done_cv;  /* sm_rpc_server_stop waits here for cq_done */
    sm_rpc_call *q_head, *q_tail;
    pthread_t *threads;
    int nthreads, max_threads, idle, quit;
    int leader;        /* a thread holds the leader's role */
    uint64_t lead_gen; /* counts the times the role was taken */
    int away;          /* the leader runs a handler: nobody drains the CQ */
    int64_t away_ns;   /* since when (CLOCK_MONOTONIC) */
    int64_t active_ns; /* when the leader last went to run a handler */
    int timed;         /* idle threads in a timed wait (watching the leader) */
    int cq_done;       /* the CQ is shut down and drained: nobody leads again */
};

int sm_rpc_server_stats(sm_rpc_server *s, sm_rpc_method_stats *out, int max)
{
    for (int k = 0; k < s->nmethods && k < max; k++) {
        method *m = &s->methods[k];
        out[k].path = m->path;
        out[k].calls = __atomic_load_n(&m->calls, __ATOMIC_RELAXED);
        out[k].sum_s = (double)__atomic_load_n(&m->sum_ns, __ATOMIC_RELAXED) * 1e-9;
        for (int b = 0; b <= SM_RPC_LATENCY_NBUCKETS; b++)
            out[k].buckets[b] = __atomic_load_n(&m->buckets[b], __ATOMIC_RELAXED);
    }
    return s->nmethods;
}

/* Set while this thread, the leader, runs a handler (with the generation
 * of its role): yield_lead hands the queue over. */
static __thread sm_rpc_server *tls_away;
static __thread uint64_t tls_gen;
/* The deadline of the call whose handler runs on this thread (NULL: none). */
static __thread const gpr_timespec *tls_deadline;

static void server_release_locked(sm_rpc_server *s)
{
    if (s->stopping && s->shutdown_done && s->live == 0 && !s->cq_shut) {
        s->cq_shut = 1;
        grpc_completion_queue_shutdown(s->cq);
    }
}

/* ---- call contexts ----------------------------------------------------- */

static sm_rpc_call *call_new(sm_rpc_server *s, int m)
{
    sm_rpc_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->srv = s;
    c->method = m;
    grpc_metadata_array_init(&c->req_md);
    if (m < 0)
        grpc_call_details_init(&c->details);
    c->tag_new = (tag){c, TAG_NEW};
    c->tag_recv = (tag){c, TAG_RECV};
    c->tag_send = (tag){c, TAG_SEND};
    c->tag_finish = (tag){c, TAG_FINISH};
    c->tag_close = (tag){c, TAG_CLOSE};
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->refs = 1; /* the armed request */
    pthread_mutex_lock(&s->mu);
    s->live++;
    pthread_mutex_unlock(&s->mu);
    return c;
}

static void call_destroy(sm_rpc_call *c)
{
    sm_rpc_server *s = c->srv;
    if (c->call)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->req_md);
    if (c->method < 0)
        grpc_call_details_destroy(&c->details);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->recv_bb)
        grpc_byte_buffer_destroy(c->recv_bb);
    if (c->finish_bb)
        grpc_byte_buffer_destroy(c->finish_bb);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    if (c->peer) {
        sm_rpc_peers_give(s->peers, c->peer);
        free(c->peer);
    }
    free(c);
    pthread_mutex_lock(&s->mu);
    s->live--;
    server_release_locked(s);
    pthread_mutex_unlock(&s->mu);
}

static void call_ref(sm_rpc_call *c)
{
    pthread_mutex_lock(&c->mu);
    c->refs++;
    pthread_mutex_unlock(&c->mu);
}

static void call_unref(sm_rpc_call *c)
{
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left == 0)
        call_destroy(c);
}

/* Starts a batch holding one reference for it; drops it again on failure. */
static grpc_call_error call_start(sm_rpc_call *c, const grpc_op *ops, size_t n, tag *t)
{
    call_ref(c);
    grpc_call_error ge = grpc_call_start_batch(c->call, ops, n, t, NULL);
    if (ge != GRPC_CALL_OK) {
        SM_ERROR("rpc: grpc_call_start_batch failed (%d) on %s", (int)ge, sm_rpc_call_path(c));
        call_unref(c);
    }
    return ge;
}

/* Arms one request for method m (-1: generic). Failure is logged only: the
 * method then stops being served, which the server cannot repair. */
static void arm(sm_rpc_server *s, int m)
{
    sm_rpc_call *c = call_new(s, m);
    if (!c) {
        SM_ERROR("rpc: out of memory arming a request");
        return;
    }
    grpc_call_error ge;
    if (m < 0) {
        ge = grpc_server_request_call(s->srv, &c->call, &c->details, &c->req_md, s->cq, s->cq,
                                      &c->tag_new);
    } else {
        const method *me = &s->methods[m];
        int with_payload = me->kind == SM_RPC_UNARY || me->kind == SM_RPC_SERVER_STREAM;
        ge = grpc_server_request_registered_call(s->srv, me->handle, &c->call, &c->deadline,
                                                 &c->req_md, with_payload ? &c->payload : NULL,
                                                 s->cq, s->cq, &c->tag_new);
    }
    if (ge != GRPC_CALL_OK) {
        SM_ERROR("rpc: cannot arm a request (%d)", (int)ge);
        call_unref(c);
    }
}

const char *sm_rpc_call_path(const sm_rpc_call *c)
{
    return c->method >= 0 ? c->srv->methods[c->method].path : "(unknown)";
}

/* ---- handler pool ------------------------------------------------------ */

static void *thread_main(void *arg);
static void finish_status(sm_rpc_call *c, grpc_status_code code, const char *text, int with_close);

/* Starts one more pool thread (pool_mu held); 0 if at the cap or refused. */
static int spawn_locked(sm_rpc_server *s)
{
    if (s->nthreads >= s->max_threads ||
        pthread_create(&s->threads[s->nthreads], NULL, thread_main, s) != 0)
        return 0;
    s->nthreads++;
    return 1;
}

/* The caller's request id (SM_RPC_REQUEST_ID_KEY) becomes this thread's
 * while the handler runs; a call without one gets a new one. */
static void call_request_id(const sm_rpc_call *c)
{
    char rid[SM_LOG_RID_LEN] = "";
    for (size_t i = 0; i < c->req_md.count; i++) {
        if (grpc_slice_str_cmp(c->req_md.metadata[i].key, SM_RPC_REQUEST_ID_KEY) != 0)
            continue;
        const grpc_slice v = c->req_md.metadata[i].value;
        size_t n = GRPC_SLICE_LENGTH(v) < sizeof rid - 1 ? GRPC_SLICE_LENGTH(v) : sizeof rid - 1;
        const unsigned char *p = GRPC_SLICE_START_PTR(v);
        size_t k = 0;
        for (size_t j = 0; j < n; j++) /* only what a log line can carry as it is */
            if (isalnum(p[j]) || p[j] == '-' || p[j] == '_')
                rid[k++] = (char)p[j];
        rid[k] = 0;
    }
    if (!rid[0])
        sm_log_new_request_id(rid);
    sm_log_set_request_id(rid);
}

/* Runs c's handler on this thread (c's reference passes to it). */
static void run_call(sm_rpc_call *c)
{
    method *m = &c->srv->methods[c->method];
    int64_t t0 = sm_time_mono_ns();
    call_request_id(c);
    sm_tenant_set(c->tenant);
    tls_deadline = &c->deadline;
    m->handler(c, m->user);
    tls_deadline = NULL;
    sm_tenant_set(NULL);
    sm_log_set_request_id(NULL);
    method_observe(m, sm_time_mono_ns() - t0);
    pthread_mutex_lock(&c->mu);
    int finished = c->finished;
    pthread_mutex_unlock(&c->mu);
    if (!finished) {
        SM_WARN("rpc: handler for %s returned without a status", m->path);
        sm_rpc_finish(c, SM_EINTERNAL, "the handler returned without a status", NULL);
    }
    call_unref(c); /* the handler's reference */
}

typedef enum {
    NEW_HERE,    /* run it on this thread, still the leader */
    NEW_HANDED,  /* another thread leads now: run it on this one */
    NEW_DEFERRED /* queued for the next free thread, or refused */
} new_way;

/* Queues new call c for the next free pool thread (pool_mu held). */
static void queue_locked(sm_rpc_server *s, sm_rpc_call *c)
{
    c->next = NULL;
    if (s->q_tail)
        s->q_tail->next = c;
    else
        s->q_head = c;
    s->q_tail = c;
}

/* What the leader does with new call c. */
static new_way place_new(sm_rpc_server *s, sm_rpc_call *c)
{
    pthread_mutex_lock(&s->pool_mu);
    if (s->idle > 0) { /* one of them can take the queue over if need be */
        s->away = 1;
        s->away_ns = s->active_ns = sm_time_mono_ns();
        if (s->timed == 0) /* nobody watches yet: one idle thread starts to */
            pthread_cond_signal(&s->pool_cv);
        pthread_mutex_unlock(&s->pool_mu);
        return NEW_HERE;
    }
    if (spawn_locked(s)) { /* the new thread leads */
        s->leader = 0;
        pthread_mutex_unlock(&s->pool_mu);
        return NEW_HANDED;
    }
    if (s->nthreads == 0) { /* not even one thread: only an inline shutdown runs */
        pthread_mutex_unlock(&s->pool_mu);
        finish_status(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "no handler thread could be started", 0);
        call_unref(c);
        return NEW_DEFERRED;
    }
    queue_locked(s, c);
    pthread_mutex_unlock(&s->pool_mu);
    return NEW_DEFERRED;
}

/* Called before a handler blocks: if this thread is the leader running a
 * handler, an idle (or new) thread takes the queue over. */
static void yield_lead(void)
{
    sm_rpc_server *s = tls_away;
    if (!s)
        return;
    tls_away = NULL;
    pthread_mutex_lock(&s->pool_mu);
    if (s->away && s->lead_gen == tls_gen) {
        s->away = 0;
        s->leader = 0;
        if (s->idle > 0)
            pthread_cond_signal(&s->pool_cv);
        else if (!spawn_locked(s))
            SM_WARN("rpc: no thread to take the completion queue over from a blocking handler");
    }
    pthread_mutex_unlock(&s->pool_mu);
}

void sm_rpc_may_block(void)
{
    yield_lead();
}

int64_t sm_rpc_handler_left_ms(void)
{
    if (!tls_deadline)
        return -1;
    gpr_timespec d = gpr_convert_clock_type(*tls_deadline, GPR_CLOCK_MONOTONIC);
    if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_MONOTONIC)) >= 0)
        return -1;
    int64_t ms = gpr_time_to_millis(gpr_time_sub(d, gpr_now(GPR_CLOCK_MONOTONIC)));
    return ms > 0 ? ms : 0;
}

static sm_rpc_call *route(sm_rpc_server *s, grpc_event ev);

/* The handler of c waits until *pending (c's receive or send) is cleared.
 * Run by the leader, it drains the queue meanwhile (its own completion
 * comes to this thread: no switch per message); new calls go to the pool's
 * queue for other threads. 0 when this thread does not lead: the caller
 * hands the queue over and waits on c->cv. */
static int wait_leading(sm_rpc_call *c, const int *pending)
{
    sm_rpc_server *s = tls_away;
    if (!s)
        return 0;
    pthread_mutex_lock(&s->pool_mu);
    if (!s->away || s->lead_gen != tls_gen) { /* the role was taken over */
        pthread_mutex_unlock(&s->pool_mu);
        tls_away = NULL;
        return 0;
    }
    s->away = 0; /* draining: nobody needs to take over */
    pthread_mutex_unlock(&s->pool_mu);
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int done = !*pending;
        pthread_mutex_unlock(&c->mu);
        if (done)
            break;
        /* c lives, so the queue is not shut down before its completion */
        sm_rpc_call *n =
            route(s, grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL));
        if (!n)
            continue;
        pthread_mutex_lock(&s->pool_mu);
        queue_locked(s, n);
        if (s->idle > 0)
            pthread_cond_signal(&s->pool_cv);
        else
            spawn_locked(s); /* at the cap: the next free thread runs it */
        pthread_mutex_unlock(&s->pool_mu);
    }
    pthread_mutex_lock(&s->pool_mu);
    s->away = 1; /* back in the handler */
    s->away_ns = s->active_ns = sm_time_mono_ns();
    if (s->timed == 0 && s->idle > 0)
        pthread_cond_signal(&s->pool_cv);
    pthread_mutex_unlock(&s->pool_mu);
    return 1;
}

static sm_rpc_call *lead(sm_rpc_server *s, new_way *way);

/* Leads from generation gen on: runs the handlers of new calls here while
 * it stays the leader. Returns a call to run as a plain pool thread (the
 * role handed over), or NULL: *shut set when the CQ is shut down, else the
 * role was taken over while a handler ran here. */
static sm_rpc_call *lead_turn(sm_rpc_server *s, uint64_t gen, int *shut)
{
    *shut = 0;
    for (;;) {
        new_way way;
        sm_rpc_call *c = lead(s, &way);
        if (!c) {
            *shut = 1;
            return NULL;
        }
        if (way == NEW_HANDED)
            return c;
        tls_away = s;
        tls_gen = gen;
        run_call(c);
        tls_away = NULL;
        pthread_mutex_lock(&s->pool_mu);
        int still = s->away && s->lead_gen == gen;
        if (still)
            s->away = 0;
        pthread_mutex_unlock(&s->pool_mu);
        if (!still)
            return NULL;
    }
}

/* Idle (pool_mu held): waits for work; while the server is busy, wakes
 * every LEAD_AWAY_MS and takes the leader's role over from a leader that
 * has run a handler for longer than that. */
static void idle_wait(sm_rpc_server *s)
{
    s->idle++;
    int64_t now = sm_time_mono_ns(), away_max = (int64_t)LEAD_AWAY_MS * 1000000;
    if (s->away || now - s->active_ns < (int64_t)LEAD_WATCH_MS * 1000000) {
        int64_t until = (s->away ? s->away_ns : now) + away_max;
        struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
        s->timed++;
        pthread_cond_timedwait(&s->pool_cv, &s->pool_mu, &ts);
        s->timed--;
    } else {
        pthread_cond_wait(&s->pool_cv, &s->pool_mu);
    }
    s->idle--;
    if (s->leader && s->away && sm_time_mono_ns() - s->away_ns >= away_max) {
        s->away = 0; /* the role is free: the caller takes it */
        s->leader = 0;
    }
}

/* Every pool thread: leads when nobody does, else runs queued calls, else
 * waits. */
static void *thread_main(void *arg)
{
    sm_rpc_server *s = arg;
    pthread_mutex_lock(&s->pool_mu);
    for (;;) {
        sm_rpc_call *c = NULL;
        if (!s->leader && !s->cq_done) {
            s->leader = 1;
            uint64_t gen = ++s->lead_gen;
            pthread_mutex_unlock(&s->pool_mu);
            int shut;
            c = lead_turn(s, gen, &shut);
            pthread_mutex_lock(&s->pool_mu);
            if (shut) {
                s->leader = 0;
                s->cq_done = 1;
                pthread_cond_broadcast(&s->done_cv);
            }
            if (!c)
                continue;
        } else if (s->q_head) {
            c = s->q_head;
            s->q_head = c->next;
            if (!s->q_head)
                s->q_tail = NULL;
        } else if (s->quit) {
            break;
        } else {
            idle_wait(s);
            continue;
        }
        pthread_mutex_unlock(&s->pool_mu);
        run_call(c);
        pthread_mutex_lock(&s->pool_mu);
    }
    pthread_mutex_unlock(&s->pool_mu);
    return NULL;
}

/* ---- completion routing ------------------------------------------------ */

/* Whether the call carries the server's token, or (with tenants) one of a
 * tenant's, whose name goes to c->tenant. */
static int token_ok(const sm_rpc_server *s, sm_rpc_call *c)
{
    const grpc_metadata_array *md = &c->req_md;
    size_t tl = strlen(s->token);
    c->tenant[0] = 0;
    for (size_t i = 0; i < md->count; i++) {
        if (grpc_slice_str_cmp(md->metadata[i].key, SM_RPC_TOKEN_KEY) != 0)
            continue;
        const grpc_slice v = md->metadata[i].value;
        const unsigned char *p = GRPC_SLICE_START_PTR(v);
        unsigned diff = GRPC_SLICE_LENGTH(v) != tl; /* constant time in the token length */
        for (size_t k = 0; !diff && k < tl; k++)
            diff |= (unsigned)(p[k] ^ (unsigned char)s->token[k]);
        if (diff == 0)
            return 1;
        return s->authenticate &&
               s->authenticate(s->authenticate_user, p, GRPC_SLICE_LENGTH(v), c->tenant);
    }
    return 0;
}

/* Ends a call from the CQ thread with a status and no message. */
static void finish_status(sm_rpc_call *c, grpc_status_code code, const char *text, int with_close)
{
    grpc_slice d = grpc_slice_from_copied_string(text);
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = code;
    ops[1].data.send_status_from_server.status_details = &d;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &c->cancelled;
    pthread_mutex_lock(&c->mu);
    c->md_sent = 1;
    c->finished = 1;
    pthread_mutex_unlock(&c->mu);
    call_start(c, ops, with_close ? 3 : 2, &c->tag_finish);
    grpc_slice_unref(d);
}

/* Counts streaming call c against its client's limit: 1 if within it. */
static int peer_take(sm_rpc_server *s, sm_rpc_call *c)
{
    char *peer = grpc_call_get_peer(c->call);
    int ok = 0;
    if (peer && sm_rpc_peers_take(s->peers, peer)) {
        if ((c->peer = strdup(peer)))
            ok = 1;
        else
            sm_rpc_peers_give(s->peers, peer);
    }
    gpr_free(peer);
    return ok;
}

/* A new call arrived: checks it and returns it for a handler to run (with
 * its reference), or NULL when it was answered here. */
static sm_rpc_call *on_new(sm_rpc_server *s, sm_rpc_call *c, int success)
{
    if (!success) { /* server shutting down: the request was cancelled */
        call_unref(c);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (!stopping)
        arm(s, c->method);

    if (c->method < 0) {
        char *path = grpc_slice_to_c_string(c->details.method);
        char text[512];
        snprintf(text, sizeof text, "method %s is not implemented by this server", path);
        gpr_free(path);
        finish_status(c, GRPC_STATUS_UNIMPLEMENTED, text, 1);
        call_unref(c);
        return NULL;
    }

    grpc_op close_op;
    memset(&close_op, 0, sizeof close_op);
    close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close_op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (call_start(c, &close_op, 1, &c->tag_close) != GRPC_CALL_OK) {
        call_unref(c);
        return NULL;
    }
    if (stopping)
        grpc_call_cancel(c->call, NULL);

    /* Health stays open so probes without metadata (Kubernetes) work; a
     * grant method's handler checks the grant of a call without the token. */
    c->authenticated = !s->token || c->method == s->health || token_ok(s, c);
    if (!c->authenticated && !s->methods[c->method].grant) {
        finish_status(c, GRPC_STATUS_UNAUTHENTICATED,
                      "the call lacks the right " SM_RPC_TOKEN_KEY
                      " token; pass the server's token to the client",
                      0);
        call_unref(c);
        return NULL;
    }
    /* A tenant's token is never the cluster's own, certificate or not; on a
     * TLS server the cluster's credential is token and certificate. */
    int cluster_only = s->methods[c->method].cluster_only || (s->tls && s->all_cluster_only);
    int no_cert = s->tls && !sm_rpc_tls_peer_has_cert(c->call);
    if (cluster_only && c->method != s->health && (c->tenant[0] || no_cert)) {
        if (s->methods[c->method].grant && !c->tenant[0]) { /* its grants will say */
            c->authenticated = 0;
            return c;
        }
        char text[512];
        snprintf(text, sizeof text, "%s is for the cluster's own processes: the caller %s",
                 s->methods[c->method].path,
                 c->tenant[0] ? "carries a tenant's token, not the cluster's"
                              : "presented no client certificate signed by the cluster's CA");
        finish_status(c, GRPC_STATUS_PERMISSION_DENIED, text, 0);
        call_unref(c);
        return NULL;
    }
    if (s->peers && s->methods[c->method].kind != SM_RPC_UNARY && !peer_take(s, c)) {
        char *peer = grpc_call_get_peer(c->call);
        char text[512];
        snprintf(text, sizeof text,
                 "this client (%s) already has %d streams open (uploads, downloads), the most "
                 "one client may have at once (%s %d); wait for one to end",
                 peer ? peer : "?", s->max_client_streams, s->max_streams_name,
                 s->max_client_streams);
        gpr_free(peer);
        finish_status(c, GRPC_STATUS_RESOURCE_EXHAUSTED, text, 0);
        call_unref(c);
        return NULL;
    }
    return c;
}

static void on_op(sm_rpc_call *c, tag_kind kind, int success)
{
    pthread_mutex_lock(&c->mu);
    switch (kind) {
    case TAG_RECV:
        c->recv_pending = 0;
        c->recv_ok = success;
        break;
    case TAG_SEND:
        c->send_pending = 0;
        c->send_ok = success;
        break;
    case TAG_CLOSE:
        c->closed = 1;
        break;
    default: /* TAG_FINISH: nobody waits */
        break;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    call_unref(c);
}

/* Routes one event of the CQ: returns a new call for a handler to run (with
 * its reference), else NULL. */
static sm_rpc_call *route(sm_rpc_server *s, grpc_event ev)
{
    if (ev.type != GRPC_OP_COMPLETE)
        return NULL;
    tag *t = ev.tag;
    if (t->kind == TAG_SHUTDOWN) {
        pthread_mutex_lock(&s->mu);
        s->shutdown_done = 1;
        server_release_locked(s);
        pthread_mutex_unlock(&s->mu);
    } else if (t->kind == TAG_NEW) {
        return on_new(s, t->call, ev.success);
    } else {
        on_op(t->call, t->kind, ev.success);
    }
    return NULL;
}

/* Drains the CQ as the leader until a new call is to run on this thread
 * (returned, with how in *way) or the CQ is shut down (NULL). */
static sm_rpc_call *lead(sm_rpc_server *s, new_way *way)
{
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            return NULL;
        sm_rpc_call *c = route(s, ev);
        if (c && (*way = place_new(s, c)) != NEW_DEFERRED)
            return c;
    }
}

/* ---- the handler-side call API ----------------------------------------- */

static sm_err cancelled_err(sm_rpc_call *c, const char *what, char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_ECANCELLED,
                   "%s on %s failed: the call was cancelled (client gone, deadline passed or "
                   "server stopping)",
                   what, sm_rpc_call_path(c));
}

/* The next request as received: SM_OK with *bb (the caller destroys it), or
 * with *bb NULL at the end of the stream. */
/* Starts ops on c with tag t and waits until they complete: *pending, set
 * under c->mu by the caller, is cleared by their completion. Returns -1
 * when they cannot start (*pending cleared here), else their result *ok;
 * with got not NULL, the message they received (*msg) is taken into *got
 * at the same time. */
static int call_op_wait(sm_rpc_call *c, const grpc_op *ops, size_t n, tag *t, int *pending,
                        const int *ok, grpc_byte_buffer **msg, grpc_byte_buffer **got)
{
    if (call_start(c, ops, n, t) != GRPC_CALL_OK) {
        pthread_mutex_lock(&c->mu);
        *pending = 0;
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    if (!wait_leading(c, pending))
        yield_lead();
    pthread_mutex_lock(&c->mu);
    while (*pending)
        pthread_cond_wait(&c->cv, &c->mu);
    int r = *ok;
    if (got) {
        *got = *msg;
        *msg = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

static sm_err recv_bb(sm_rpc_call *c, grpc_byte_buffer **out, char *err, size_t errlen)
{
    const method *m = &c->srv->methods[c->method];
    *out = NULL;
    if (m->kind == SM_RPC_UNARY || m->kind == SM_RPC_SERVER_STREAM) {
        if (c->payload_out)
            return SM_OK; /* the one request was already returned */
        c->payload_out = 1;
        if (!c->payload) {
            if (sm_rpc_call_cancelled(c))
                return cancelled_err(c, "receive", err, errlen);
            return sm_fail(err, errlen, SM_EINVAL, "the call to %s carried no request message",
                           m->path);
        }
        *out = c->payload;
        c->payload = NULL;
        return SM_OK;
    }

    pthread_mutex_lock(&c->mu);
    if (c->recv_pending || c->finished) {
        pthread_mutex_unlock(&c->mu);
        return sm_fail(err, errlen, SM_EPRECONDITION, "receive on %s while %s", m->path,
                       c->finished ? "finished" : "another receive is pending");
    }
    c->recv_pending = 1;
    pthread_mutex_unlock(&c->mu);

    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_bb;
    grpc_byte_buffer *bb = NULL;
    int ok = call_op_wait(c, &op, 1, &c->tag_recv, &c->recv_pending, &c->recv_ok, &c->recv_bb, &bb);
    if (ok < 0)
        return sm_fail(err, errlen, SM_EINTERNAL, "cannot start a receive on %s", m->path);

    if (!ok) {
        if (bb)
            grpc_byte_buffer_destroy(bb);
        return cancelled_err(c, "receive", err, errlen);
    }
    if (!bb) {
        /* A cancelled call also ends the message stream with NULL; its close
         * completion (cancelled = 1) comes first in practice, so check it. */
        if (sm_rpc_call_cancelled(c))
            return cancelled_err(c, "receive", err, errlen);
        return SM_OK; /* half-closed: end of stream */
    }
    *out = bb;
    return SM_OK;
}

sm_err sm_rpc_recv(sm_rpc_call *c, ProtobufCMessage **msg, char *err, size_t errlen)
{
    grpc_byte_buffer *bb;
    *msg = NULL;
    sm_err e = recv_bb(c, &bb, err, errlen);
    if (e || !bb)
        return e;
    e = sm_rpc_unpack(bb, c->srv->methods[c->method].request, "request", msg, err, errlen);
    grpc_byte_buffer_destroy(bb);
    return e;
}

sm_err sm_rpc_recv_data(sm_rpc_call *c, uint32_t field, const sm_rpc_sink *sink,
                        ProtobufCMessage **msg, size_t *len, char *err, size_t errlen)
{
    grpc_byte_buffer *bb;
    *msg = NULL;
    *len = 0;
    sm_err e = recv_bb(c, &bb, err, errlen);
    if (e || !bb)
        return e;
    e = sm_rpc_unpack_data(bb, c->srv->methods[c->method].request, field, sink, "request", msg, len,
                           err, errlen);
    grpc_byte_buffer_destroy(bb);
    return e;
}

static sm_err send_check(sm_rpc_call *c, char *err, size_t errlen)
{
    const method *m = &c->srv->methods[c->method];
    if (m->kind != SM_RPC_SERVER_STREAM && m->kind != SM_RPC_BIDI)
        return sm_fail(err, errlen, SM_EPRECONDITION,
                       "send on %s, which is not server-streaming; reply with sm_rpc_finish",
                       m->path);
    return SM_OK;
}

/* Sends bb (taken: destroyed here) and waits until gRPC took it. */
static sm_err send_bb(sm_rpc_call *c, grpc_byte_buffer *bb, char *err, size_t errlen)
{
    const method *m = &c->srv->methods[c->method];

    pthread_mutex_lock(&c->mu);
    if (c->send_pending || c->finished) {
        pthread_mutex_unlock(&c->mu);
        grpc_byte_buffer_destroy(bb);
        return sm_fail(err, errlen, SM_EPRECONDITION, "send on %s while %s", m->path,
                       c->finished ? "finished" : "another send is pending");
    }
    c->send_pending = 1;
    int with_md = !c->md_sent;
    c->md_sent = 1;
    pthread_mutex_unlock(&c->mu);

    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (with_md)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    int ok = call_op_wait(c, ops, n, &c->tag_send, &c->send_pending, &c->send_ok, NULL, NULL);
    grpc_byte_buffer_destroy(bb);
    if (ok < 0)
        return sm_fail(err, errlen, SM_EINTERNAL, "cannot start a send on %s", m->path);
    return ok ? SM_OK : cancelled_err(c, "send", err, errlen);
}

sm_err sm_rpc_send(sm_rpc_call *c, const ProtobufCMessage *msg, char *err, size_t errlen)
{
    grpc_byte_buffer *bb;
    sm_err e = send_check(c, err, errlen);
    if (e || (e = sm_rpc_pack(msg, "reply", &bb, err, errlen)))
        return e;
    return send_bb(c, bb, err, errlen);
}

sm_err sm_rpc_send_data(sm_rpc_call *c, const ProtobufCMessage *msg, uint32_t field,
                        const void *data, size_t len, sm_rpc_release_fn release, void *arg,
                        char *err, size_t errlen)
{
    grpc_byte_buffer *bb;
    sm_err e = send_check(c, err, errlen);
    if (e) {
        if (release)
            release(arg);
        return e;
    }
    if ((e = sm_rpc_pack_data(msg, field, data, len, release, arg, "reply", &bb, err, errlen)))
        return e;
    return send_bb(c, bb, err, errlen);
}

sm_err sm_rpc_finish(sm_rpc_call *c, sm_err code, const char *msg, const ProtobufCMessage *reply)
{
    char perr[256];
    sm_err ret = SM_OK;
    grpc_byte_buffer *bb = NULL;
    if (code == SM_OK && reply) {
        ret = sm_rpc_pack(reply, "reply", &bb, perr, sizeof perr);
        if (ret) { /* the client gets the packing error instead */
            code = ret;
            msg = perr;
        }
    }

    pthread_mutex_lock(&c->mu);
    if (c->finished) {
        pthread_mutex_unlock(&c->mu);
        if (bb)
            grpc_byte_buffer_destroy(bb);
        return SM_EPRECONDITION;
    }
    c->finished = 1;
    int with_md = !c->md_sent;
    c->md_sent = 1;
    c->finish_bb = bb; /* destroyed with the call */
    pthread_mutex_unlock(&c->mu);

    grpc_slice d = grpc_slice_from_copied_string(code == SM_OK ? ""
                                                 : msg         ? msg
                                                               : sm_strerror(code));
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (with_md)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (bb) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)sm_rpc_status_from_err(code);
    ops[n++].data.send_status_from_server.status_details = code == SM_OK ? NULL : &d;
    if (call_start(c, ops, n, &c->tag_finish) != GRPC_CALL_OK && ret == SM_OK)
        ret = SM_EINTERNAL;
    grpc_slice_unref(d);
    return ret;
}

int sm_rpc_call_authenticated(const sm_rpc_call *c)
{
    return c->authenticated;
}

const unsigned char *sm_rpc_call_token(const sm_rpc_call *c, size_t *len)
{
    for (size_t i = 0; i < c->req_md.count; i++)
        if (!grpc_slice_str_cmp(c->req_md.metadata[i].key, SM_RPC_TOKEN_KEY)) {
            *len = GRPC_SLICE_LENGTH(c->req_md.metadata[i].value);
            return GRPC_SLICE_START_PTR(c->req_md.metadata[i].value);
        }
    *len = 0;
    return (const unsigned char *)"";
}

const sm_grant_key *sm_rpc_call_grant_key(const sm_rpc_call *c)
{
    return c->srv->has_grant_key ? &c->srv->grant_key : NULL;
}

int sm_rpc_call_cancelled(sm_rpc_call *c)
{
    pthread_mutex_lock(&c->mu);
    int r = c->closed && c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return r;
}

int sm_rpc_call_wait_cancelled(sm_rpc_call *c, int timeout_ms)
{
    struct timespec end = sm_time_after_ms(CLOCK_REALTIME, timeout_ms);
    yield_lead();
    pthread_mutex_lock(&c->mu);
    while (!c->closed && pthread_cond_timedwait(&c->cv, &c->mu, &end) == 0)
        ;
    int r = c->closed && c->cancelled;
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* ---- health ---------------------------------------------------------- */

static void health_check(sm_rpc_call *call, void *user)
{
    sm_rpc_server *s = user;
    ProtobufCMessage *m;
    char err[256];
    sm_err e = sm_rpc_recv(call, &m, err, sizeof err);
    if (e) {
        sm_rpc_finish(call, e, err, NULL);
        return;
    }
    const Grpc__Health__V1__HealthCheckRequest *req = (void *)m;
    const char *svc = req->service ? req->service : "";
    int known = svc[0] == '\0';
    for (int i = 0; i < s->nmethods && !known; i++)
        known = strcmp(s->methods[i].service, svc) == 0;
    if (!known) {
        snprintf(err, sizeof err, "service '%s' is not served here", svc);
        sm_rpc_msg_free(m);
        sm_rpc_finish(call, SM_ENOTFOUND, err, NULL);
        return;
    }
    sm_rpc_msg_free(m);
    Grpc__Health__V1__HealthCheckResponse rep = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    rep.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    sm_rpc_finish(call, SM_OK, NULL, &rep.base);
}

/* ---- server lifecycle -------------------------------------------------- */

sm_err sm_rpc_server_create(const sm_rpc_server_opts *opts, sm_rpc_server **out, char *err,
                            size_t errlen)
{
    *out = NULL;
    sm_rpc_server *s = calloc(1, sizeof *s);
    if (!s)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a server");
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    sm_time_cond_init(&s->pool_cv);
    pthread_cond_init(&s->done_cv, NULL);
    s->tag_shutdown = (tag){NULL, TAG_SHUTDOWN};
    /* the handlers, and one more thread that drains the CQ meanwhile */
    s->max_threads =
        (opts->max_handlers > 0 ? opts->max_handlers : SM_RPC_DEFAULT_MAX_HANDLERS) + 1;
    s->threads = calloc((size_t)s->max_threads, sizeof *s->threads);
    if (opts->token && opts->token[0])
        s->token = strdup(opts->token);
    s->authenticate = opts->authenticate;
    s->authenticate_user = opts->authenticate_user;
    s->all_cluster_only = opts->all_cluster_only;
    if (opts->grant_key) {
        s->has_grant_key = 1;
        s->grant_key = *opts->grant_key;
    }
    if (!s->threads || (opts->token && opts->token[0] && !s->token)) {
        sm_rpc_server_free(s);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a server");
    }

    grpc_arg args[4];
    size_t n;
    sm_rpc_fill_args(args, &n);
    if (opts->max_message_bytes > 0)
        for (size_t k = 0; k < n; k++)
            if (!strcmp(args[k].key, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH))
                args[k].value.integer = opts->max_message_bytes;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_ALLOW_REUSEPORT; /* two servers must never share a port */
    args[n++].value.integer = 0;
    grpc_channel_args ca = {n, args};
    s->srv = grpc_server_create(&ca, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->srv, s->cq, NULL);
    if (opts->tls && !sm_rpc_tls_has_cert(opts->tls)) {
        sm_rpc_server_free(s);
        return sm_fail(err, errlen, SM_EINVAL,
                       "a TLS server on '%s' needs a certificate and its key", opts->addr);
    }
    s->tls = opts->tls != NULL;
    if (opts->max_client_streams > 0) {
        s->max_client_streams = opts->max_client_streams;
        s->peers = sm_rpc_peers_create(opts->max_client_streams);
        s->max_streams_name = strdup(opts->max_client_streams_name ? opts->max_client_streams_name
                                                                   : "the server's limit");
        if (!s->peers || !s->max_streams_name) {
            sm_rpc_server_free(s);
            return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a server");
        }
    }
    grpc_server_credentials *creds =
        sm_rpc_tls_server_creds(opts->tls, opts->tls && opts->require_client_cert);
    s->port = grpc_server_add_http2_port(s->srv, opts->addr, creds);
    grpc_server_credentials_release(creds);
    if (s->port == 0) {
        sm_rpc_server_free(s);
        return sm_fail(err, errlen, SM_EUNAVAILABLE,
                       "cannot listen on '%s' (address in use or not valid%s)", opts->addr,
                       opts->tls ? ", or gRPC refused the TLS certificate" : "");
    }
    sm_rpc_method health = {HEALTH_PATH, SM_RPC_UNARY,
                            &grpc__health__v1__health_check_request__descriptor, health_check, s};
    s->health = s->nmethods;
    sm_err e = sm_rpc_server_add(s, &health, err, errlen);
    if (e) {
        sm_rpc_server_free(s);
        return e;
    }
    *out = s;
    return SM_OK;
}

sm_err sm_rpc_server_add(sm_rpc_server *s, const sm_rpc_method *m, char *err, size_t errlen)
{
    if (s->started)
        return sm_fail(err, errlen, SM_EPRECONDITION, "method %s added after the server started",
                       m->path);
    const char *slash = m->path ? strrchr(m->path, '/') : NULL;
    if (!m->path || m->path[0] != '/' || slash == m->path || !slash[1] || !m->request ||
        !m->handler || (unsigned)m->kind > SM_RPC_BIDI)
        return sm_fail(err, errlen, SM_EINVAL,
                       "method row '%s' is not valid (need \"/pkg.Service/Method\", a request "
                       "type, a handler and a kind)",
                       m->path ? m->path : "(null)");
    for (int i = 0; i < s->nmethods; i++)
        if (strcmp(s->methods[i].path, m->path) == 0)
            return sm_fail(err, errlen, SM_EEXIST, "method %s is already registered", m->path);
    method *nm = realloc(s->methods, (size_t)(s->nmethods + 1) * sizeof *nm);
    if (!nm)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot register method %s", m->path);
    s->methods = nm;
    method *row = &nm[s->nmethods];
    memset(row, 0, sizeof *row);
    row->path = strdup(m->path);
    row->service = strndup(m->path + 1, (size_t)(slash - m->path - 1));
    if (!row->path || !row->service) {
        free(row->path);
        free(row->service);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot register method %s", m->path);
    }
    row->kind = m->kind;
    row->request = m->request;
    row->handler = m->handler;
    row->user = m->user;
    row->cluster_only = m->cluster_only;
    row->grant = m->grant;
    int with_payload = m->kind == SM_RPC_UNARY || m->kind == SM_RPC_SERVER_STREAM;
    row->handle = grpc_server_register_method(
        s->srv, row->path, NULL,
        with_payload ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER : GRPC_SRM_PAYLOAD_NONE, 0);
    if (!row->handle) {
        free(row->path);
        free(row->service);
        return sm_fail(err, errlen, SM_EINTERNAL, "gRPC refused to register method %s", m->path);
    }
    s->nmethods++;
    return SM_OK;
}

sm_err sm_rpc_server_start(sm_rpc_server *s, char *err, size_t errlen)
{
    if (s->started)
        return sm_fail(err, errlen, SM_EPRECONDITION, "the server was already started");
    grpc_server_start(s->srv);
    s->started = 1;
    for (int i = 0; i < s->nmethods; i++)
        arm(s, i);
    arm(s, -1);
    pthread_mutex_lock(&s->pool_mu);
    int ok = spawn_locked(s);
    pthread_mutex_unlock(&s->pool_mu);
    if (!ok) {
        /* Without a thread nothing can be drained: shut down inline (every
         * call that arrives is refused; the stopping server cancels it). */
        s->stopped = 1;
        grpc_server_shutdown_and_notify(s->srv, s->cq, &s->tag_shutdown);
        grpc_server_cancel_all_calls(s->srv);
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&s->pool_mu);
        s->max_threads = 0; /* no thread later either: hand_over refuses */
        pthread_mutex_unlock(&s->pool_mu);
        new_way way;
        while (lead(s, &way))
            ;
        return sm_fail(err, errlen, SM_ERESOURCE, "cannot start a server thread");
    }
    return SM_OK;
}

int sm_rpc_server_port(const sm_rpc_server *s)
{
    return s->port;
}

void sm_rpc_server_stop(sm_rpc_server *s)
{
    if (!s->started || s->stopped)
        return;
    s->stopped = 1;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    grpc_server_shutdown_and_notify(s->srv, s->cq, &s->tag_shutdown);
    grpc_server_cancel_all_calls(s->srv);

    pthread_mutex_lock(&s->pool_mu);
    while (!s->cq_done) /* the CQ shuts down once every call is released */
        pthread_cond_wait(&s->done_cv, &s->pool_mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->pool_cv);
    pthread_mutex_unlock(&s->pool_mu);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    s->nthreads = 0;
}

void sm_rpc_server_free(sm_rpc_server *s)
{
    if (!s)
        return;
    sm_rpc_server_stop(s);
    if (s->srv) {
        if (!s->started) {
            /* Never started: shutdown still has to be notified before destroy. */
            grpc_server_shutdown_and_notify(s->srv, s->cq, &s->tag_shutdown);
            grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            grpc_completion_queue_shutdown(s->cq);
            while (
                grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
                GRPC_QUEUE_SHUTDOWN)
                ;
        }
        grpc_server_destroy(s->srv);
        grpc_completion_queue_destroy(s->cq);
    }
    for (int i = 0; i < s->nmethods; i++) {
        free(s->methods[i].path);
        free(s->methods[i].service);
    }
    free(s->methods);
    free(s->threads);
    free(s->token);
    sm_rpc_peers_free(s->peers);
    free(s->max_streams_name);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->pool_mu);
    pthread_cond_destroy(&s->pool_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
}
