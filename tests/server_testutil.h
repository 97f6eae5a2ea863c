/* Helpers shared by the coordinator's Check suites (tests/test_server_*.c):
 * CreateArray requests, and registries with workers already registered,
 * driven by a hand-held clock that starts at T0. Everything here is static
 * inline; helpers that assert do so with Check. */
#ifndef SM_SERVER_TESTUTIL_H
#define SM_SERVER_TESTUTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "registry.h"

/* The registry clock (ms) at the start of a test. */
#define T0 1000000

/* A CreateArray request for an f32 array of shape named name over the mesh
 * named mesh, with the spec parsed from text (NULL: P()), of kind, with a
 * deadline of deadline_ms (0: none); asserts the spec parses. Borrows the
 * strings. */
static inline sm_svc_create_array_req st_create_req(const char *name, const char *mesh,
                                                    const char *spec, sm_shape shape,
                                                    sm_put_kind kind, uint32_t deadline_ms)
{
    sm_svc_create_array_req req = {0};
    char err[256];
    req.name = name;
    req.dtype = SM_F32;
    req.has_shape = 1;
    req.shape = shape;
    req.sharding.mesh_name = mesh;
    if (spec)
        ck_assert_msg(sm_pspec_parse(spec, &req.sharding.spec, err, sizeof err) == SM_OK, "%s",
                      err);
    req.kind = kind;
    req.deadline_ms = deadline_ms;
    return req;
}

/* Registers a worker at now (ms), freeing what the registry hands back. */
static inline sm_err st_worker_add_at(sm_registry *r, const sm_svc_register_req *req, int64_t now,
                                      sm_svc_register_reply *rep, char *err, size_t errlen)
{
    sm_reg_free *f = NULL;
    int nf = 0;
    sm_err e = sm_registry_worker_add(r, req, NULL, now, rep, &f, &nf, err, errlen);
    free(f);
    return e;
}

/* st_worker_add_at T0. */
static inline sm_err st_worker_add(sm_registry *r, const sm_svc_register_req *req,
                                   sm_svc_register_reply *rep, char *err, size_t errlen)
{
    return st_worker_add_at(r, req, T0, rep, err, errlen);
}

/* A registry (lost after 60 s, heartbeats every 500 ms) keeping its state
 * in state_dir (NULL: none) with nworkers workers of ndev devices each,
 * worker k at 127.0.0.1:ports[k] (ports NULL: 9000+k), registered at now
 * (ms); asserts each is given id k+1, process index k and devices from
 * k*ndev. The caller frees it (sm_registry_free). */
static inline sm_registry *st_registry_at(int nworkers, int ndev, const int *ports, int64_t now,
                                          const char *state_dir)
{
    sm_registry *r;
    char err[256];
    ck_assert_int_eq(sm_registry_create(60000, 500, &r, err, sizeof err), SM_OK);
    if (state_dir)
        ck_assert_msg(sm_registry_open_state(r, state_dir, err, sizeof err) == SM_OK, "%s", err);
    for (int k = 0; k < nworkers; k++) {
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", ports ? ports[k] : 9000 + k);
        sm_svc_register_req req = {addr, ndev, -1, "host"};
        sm_svc_register_reply rep;
        ck_assert_msg(st_worker_add_at(r, &req, now, &rep, err, sizeof err) == SM_OK, "%s", err);
        ck_assert_int_eq(rep.worker_id.v, (uint32_t)k + 1);
        ck_assert_int_eq(rep.process_index, k);
        ck_assert_int_eq(rep.devices[0], k * ndev);
        ck_assert_int_eq(rep.heartbeat_ms, 500);
    }
    return r;
}

/* st_registry_at ports 9000+k and T0, without a state dir. */
static inline sm_registry *st_registry(int nworkers, int ndev)
{
    return st_registry_at(nworkers, ndev, NULL, T0, NULL);
}

#endif
