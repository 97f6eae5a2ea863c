/* rpc_fuzz_req: the table of the methods under test (both services' unary
 * methods, paths from proto/shmap.proto) with a valid request template of
 * each, built against the running cluster, the guards that keep a fuzz case
 * from legitimately deleting what the invariants watch, and the designed
 * upload streams. */
#include "rpc_fuzz.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sm_checksum.h"
#include "sm_ir.h"
#include "sm_rpc_msg.h"
#include "sm_svc_job.h"

/* ---- the methods under test ---------------------------------------------------- */

#define ROW(w, name, rq, rp, g)                                                                    \
    {                                                                                              \
        (w) ? W_PATH(name) : C_PATH(name), w, &shmap__v1__##rq##__descriptor,                      \
            &shmap__v1__##rp##__descriptor, g, {NULL}, {0}, 0, {0}, 0                              \
    }

method methods[] = {
    ROW(0, "Negotiate", negotiate_request, negotiate_reply, G_NONE),
    ROW(0, "ListDevices", empty, list_devices_reply, G_NONE),
    ROW(0, "CreateMesh", create_mesh_request, mesh, G_NONE),
    ROW(0, "GetMesh", mesh, mesh, G_NONE),
    ROW(0, "ListMeshes", empty, list_meshes_reply, G_NONE),
    ROW(0, "CreateArray", create_array_request, create_array_reply, G_NONE),
    ROW(0, "Describe", array_ref, array_info, G_NONE),
    ROW(0, "ListArrays", empty, list_arrays_reply, G_NONE),
    ROW(0, "Delete", array_ref, empty, G_DELETE),
    ROW(0, "Reshard", reshard_request, array_info, G_NONE),
    ROW(0, "RegisterWorker", register_worker_request, register_worker_reply, G_NONE),
    ROW(0, "Heartbeat", heartbeat_request, heartbeat_reply, G_NONE),
    ROW(0, "CommitShards", commit_shards_request, upload_reply, G_NONE),
    ROW(0, "SubmitJob", submit_job_request, submit_job_reply, G_NONE),
    ROW(0, "WaitJob", job_ref, job_info, G_NONE),
    ROW(0, "GetJob", job_ref, job_info, G_NONE),
    ROW(0, "CancelJob", job_ref, job_info, G_NONE),
    ROW(0, "Save", save_request, save_reply, G_SAVE),
    ROW(0, "Load", load_request, array_info, G_NONE),
    ROW(1, "Negotiate", negotiate_request, negotiate_reply, G_NONE),
    ROW(1, "FreeArray", free_array_request, empty, G_FREE),
    ROW(1, "Assemble", assemble_request, assemble_reply, G_ASSEMBLE),
    ROW(1, "Stats", empty, worker_stats_reply, G_NONE),
    ROW(1, "RunJob", run_job_request, run_job_reply, G_RUNJOB),
    ROW(1, "CancelJob", job_ref, empty, G_NONE),
    ROW(1, "WriteCheckpoint", write_checkpoint_request, write_checkpoint_reply, G_WRITE_CKPT),
    ROW(1, "ReadManifest", read_manifest_request, read_manifest_reply, G_NONE),
};
const int nmethods = (int)(sizeof methods / sizeof methods[0]);

int is_kept(uint64_t id, const char *name)
{
    return (id && (id == cl.keep.v || id == cl.pending.v)) ||
           (!id && name && (!strcmp(name, "fz_keep") || !strcmp(name, "fz_pending")));
}

/* The directory checkpoints may be written to: the cluster's dir/ck. */
static void ckpt_root(char *buf, size_t len)
{
    snprintf(buf, len, "%s/ck/", cl.h->dir);
}

/* 1 if a checkpoint write into dir would land outside the suite's ckpt dir
 * (only absolute dirs are written; relative ones are refused). */
static int ckpt_outside(const char *dir)
{
    char root[320];
    ckpt_root(root, sizeof root);
    return dir && dir[0] == '/' && (strncmp(dir, root, strlen(root)) || strstr(dir, ".."));
}

/* 1 if b parses as m's request and would legitimately delete or overwrite
 * the watched arrays, or write files outside the suite's own dir. */
int touches_kept(const method *m, const uint8_t *b, size_t n)
{
    if (m->g == G_NONE)
        return 0;
    ProtobufCMessage *p = protobuf_c_message_unpack(m->req, NULL, n, b);
    int hit = 0;
    if (!p)
        return 0;
    if (m->g == G_DELETE) {
        Shmap__V1__ArrayRef *r = (Shmap__V1__ArrayRef *)p;
        hit = is_kept(r->id, r->name) || is_kept(0, r->name);
    } else if (m->g == G_FREE) {
        hit = is_kept(((Shmap__V1__FreeArrayRequest *)p)->array_id, NULL);
    } else if (m->g == G_ASSEMBLE) {
        Shmap__V1__AssembleRequest *r = (Shmap__V1__AssembleRequest *)p;
        hit = is_kept(r->array_id, NULL);
        /* Known, not fixed (see the report): the worker zero-fills a new
         * shard of any size below the host's memory before copying its
         * pieces (partial cover is allowed), e.g. 16 GiB for [65536,65536]
         * with one 8x8 piece. Such requests are not sent, so the suite
         * cannot exhaust a shared host; larger ones are (refused). */
        double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        for (size_t i = 0; i < r->n_shards; i++) {
            const Shmap__V1__AssembleShard *a = r->shards[i];
            double bytes = 8;
            for (size_t d = 0; a && a->shape && d < a->shape->n_dims; d++)
                bytes *= a->shape->dims[d] < 0 ? 0 : (double)a->shape->dims[d];
            hit |= bytes > (double)(256 << 20) && bytes <= 2 * phys;
        }
    } else if (m->g == G_SAVE) {
        hit = ckpt_outside(((Shmap__V1__SaveRequest *)p)->dir);
    } else if (m->g == G_WRITE_CKPT) {
        hit = ckpt_outside(((Shmap__V1__WriteCheckpointRequest *)p)->dir);
    } else if (m->g == G_RUNJOB) {
        Shmap__V1__RunJobRequest *r = (Shmap__V1__RunJobRequest *)p;
        for (size_t i = 0; i < r->n_output_arrays; i++)
            hit |= is_kept(r->output_arrays[i], NULL);
    }
    sm_rpc_msg_free(p);
    return hit;
}

static void set_template(method *m, const ProtobufCMessage *req)
{
    ck_assert_int_lt(m->nt, 4);
    m->tmpl[m->nt] = fuzz_pack(req, &m->ntmpl[m->nt]);
    m->nt++;
}

method *method_of(int worker, const char *name)
{
    char path[96];
    snprintf(path, sizeof path, "%s%s", worker ? W_PATH("") : C_PATH(""), name);
    for (int i = 0; i < nmethods; i++)
        if (!strcmp(methods[i].path, path))
            return &methods[i];
    ck_abort_msg("no method %s", path);
    return NULL;
}

/* The Program message of text (malloc'd; sm_rpc_msg_free). */
static Shmap__V1__Program *program_of(const char *text)
{
    sm_program *p = NULL;
    uint8_t *b = NULL;
    size_t n = 0;
    char err[512];
    ck_assert_msg(sm_program_parse(text, "fz.shmap", &p, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_msg(sm_svc_program_encode(p, &b, &n, err, sizeof err) == SM_OK, "%s", err);
    sm_program_free(p);
    Shmap__V1__Program *m = (Shmap__V1__Program *)protobuf_c_message_unpack(
        &shmap__v1__program__descriptor, NULL, n, b);
    free(b);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* The Program message of file name in $SM_TEST_DATA (sm_rpc_msg_free). */
static Shmap__V1__Program *program_of_file(const char *name)
{
    const char *dir = getenv("SM_TEST_DATA");
    char path[1024], text[8192];
    ck_assert_msg(dir && *dir, "SM_TEST_DATA is not set");
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    return program_of(text);
}

/* Valid requests of every method, from which mutations start. */
void build_templates(void)
{
    char *ij[] = {"i", "j"}, *i_[] = {"i"}, *j_[] = {"j"};
    int64_t sizes[] = {2, 4}, dims[] = {16, 32}, d8[] = {8, 8}, zero2[] = {0, 0};
    Shmap__V1__Empty empty = SHMAP__V1__EMPTY__INIT;
    for (int i = 0; i < nmethods; i++)
        if (methods[i].req == &shmap__v1__empty__descriptor)
            set_template(&methods[i], &empty.base);

    Shmap__V1__NegotiateRequest neg = SHMAP__V1__NEGOTIATE_REQUEST__INIT;
    neg.min_version = 1;
    neg.max_version = 1;
    neg.client = "fuzz";
    set_template(method_of(0, "Negotiate"), &neg.base);
    set_template(method_of(1, "Negotiate"), &neg.base);

    Shmap__V1__Mesh mesh = SHMAP__V1__MESH__INIT;
    mesh.name = "fzm";
    mesh.n_axis_names = 2;
    mesh.axis_names = ij;
    mesh.n_axis_sizes = 2;
    mesh.axis_sizes = sizes;
    Shmap__V1__CreateMeshRequest cm = SHMAP__V1__CREATE_MESH_REQUEST__INIT;
    cm.mesh = &mesh;
    set_template(method_of(0, "CreateMesh"), &cm.base);
    Shmap__V1__Mesh mref = SHMAP__V1__MESH__INIT;
    mref.name = "m";
    set_template(method_of(0, "GetMesh"), &mref.base);

    Shmap__V1__Shape shape = SHMAP__V1__SHAPE__INIT;
    shape.n_dims = 2;
    shape.dims = dims;
    Shmap__V1__SpecEntry e0 = SHMAP__V1__SPEC_ENTRY__INIT, e1 = SHMAP__V1__SPEC_ENTRY__INIT;
    e0.n_axes = 1;
    e0.axes = i_;
    e1.n_axes = 1;
    e1.axes = j_;
    Shmap__V1__SpecEntry *entries[] = {&e0, &e1};
    Shmap__V1__PartitionSpec spec = SHMAP__V1__PARTITION_SPEC__INIT;
    spec.n_entries = 2;
    spec.entries = entries;
    Shmap__V1__Sharding sh = SHMAP__V1__SHARDING__INIT;
    sh.mesh = &mref;
    sh.spec = &spec;
    Shmap__V1__CreateArrayRequest ca = SHMAP__V1__CREATE_ARRAY_REQUEST__INIT;
    ca.name = "fz_c";
    ca.dtype = SHMAP__V1__DTYPE__F32;
    ca.shape = &shape;
    ca.sharding = &sh;
    ca.deadline_ms = 1000;
    set_template(method_of(0, "CreateArray"), &ca.base);
    int64_t local[] = {8, 32};
    Shmap__V1__Shape lshape = SHMAP__V1__SHAPE__INIT;
    lshape.n_dims = 2;
    lshape.dims = local;
    ca.name = "fz_local";
    ca.shape = NULL;
    ca.kind = SHMAP__V1__PUT_KIND__PUT_LOCAL;
    ca.local_shape = &lshape;
    set_template(method_of(0, "CreateArray"), &ca.base);
    ca.name = "";
    ca.shape = &shape;
    ca.kind = SHMAP__V1__PUT_KIND__PUT_SHARDS;
    ca.local_shape = NULL;
    set_template(method_of(0, "CreateArray"), &ca.base);

    Shmap__V1__ArrayRef keep = SHMAP__V1__ARRAY_REF__INIT;
    keep.id = cl.keep.v;
    set_template(method_of(0, "Describe"), &keep.base);
    Shmap__V1__ArrayRef none = SHMAP__V1__ARRAY_REF__INIT;
    none.id = 4242424;
    set_template(method_of(0, "Delete"), &none.base);

    Shmap__V1__ReshardRequest rs = SHMAP__V1__RESHARD_REQUEST__INIT;
    rs.array = &keep;
    rs.sharding = &sh;
    spec.n_entries = 1; /* P('i') */
    rs.deadline_ms = 2000;
    set_template(method_of(0, "Reshard"), &rs.base);
    Shmap__V1__Mesh inl = mesh; /* its axes, no name, devices in reverse */
    int32_t rev[8];
    for (int k = 0; k < 8; k++)
        rev[k] = mesh_devs[7 - k];
    inl.name = (char *)protobuf_c_empty_string;
    inl.n_devices = 8;
    inl.devices = rev;
    Shmap__V1__Sharding sh2 = SHMAP__V1__SHARDING__INIT;
    sh2.mesh = &inl;
    sh2.spec = &spec;
    rs.sharding = &sh2;
    set_template(method_of(0, "Reshard"), &rs.base);
    spec.n_entries = 2;

    /* checkpoints: the kept array saved into the suite's dir and loaded */
    char ck_save[320], ck_write[320];
    ckpt_root(ck_save, sizeof ck_save);
    ckpt_root(ck_write, sizeof ck_write);
    strcat(ck_save, "saved");
    strcat(ck_write, "written");
    Shmap__V1__SaveRequest sv = SHMAP__V1__SAVE_REQUEST__INIT;
    sv.array = &keep;
    sv.dir = ck_save;
    set_template(method_of(0, "Save"), &sv.base);
    Shmap__V1__LoadRequest ld = SHMAP__V1__LOAD_REQUEST__INIT;
    ld.dir = ck_save;
    ld.sharding = &sh; /* mesh m, P('i') */
    spec.n_entries = 1;
    set_template(method_of(0, "Load"), &ld.base);
    spec.n_entries = 2;
    Shmap__V1__ReadManifestRequest rm = SHMAP__V1__READ_MANIFEST_REQUEST__INIT;
    rm.dir = ck_save;
    set_template(method_of(1, "ReadManifest"), &rm.base);
    Shmap__V1__CheckpointFile cf = SHMAP__V1__CHECKPOINT_FILE__INIT;
    cf.file = "a.npy";
    cf.device = cl.wdev[0][0];
    Shmap__V1__CheckpointFile *cfs[] = {&cf};
    Shmap__V1__WriteCheckpointRequest wc = SHMAP__V1__WRITE_CHECKPOINT_REQUEST__INIT;
    wc.array_id = cl.keep.v;
    wc.dir = ck_write;
    wc.n_files = 1;
    wc.files = cfs;
    set_template(method_of(1, "WriteCheckpoint"), &wc.base);

    Shmap__V1__RegisterWorkerRequest rw = SHMAP__V1__REGISTER_WORKER_REQUEST__INIT;
    rw.address = "127.0.0.1:1";
    rw.ndevices = 4;
    rw.process_index = -1;
    rw.host = "fuzz";
    set_template(method_of(0, "RegisterWorker"), &rw.base);
    int64_t bytes4[4] = {0};
    Shmap__V1__HeartbeatRequest hb = SHMAP__V1__HEARTBEAT_REQUEST__INIT;
    hb.worker_id = 999999;
    hb.n_device_bytes = 4;
    hb.device_bytes = bytes4;
    set_template(method_of(0, "Heartbeat"), &hb.base);
    /* CommitShards: one target, and several (of an array that is not there) */
    int32_t cdev[2] = {0, 1}, cdev2[2] = {2, 3};
    Shmap__V1__CommitShardsRequest cs = SHMAP__V1__COMMIT_SHARDS_REQUEST__INIT;
    cs.array_id = 424242;
    cs.n_devices = 2;
    cs.devices = cdev;
    cs.checksum = 7;
    cs.bytes = 64;
    set_template(method_of(0, "CommitShards"), &cs.base);
    Shmap__V1__CommitTarget ct[2] = {SHMAP__V1__COMMIT_TARGET__INIT,
                                     SHMAP__V1__COMMIT_TARGET__INIT};
    Shmap__V1__CommitTarget *ctp[2] = {&ct[0], &ct[1]};
    ct[0].n_devices = ct[1].n_devices = 2;
    ct[0].devices = cdev;
    ct[1].devices = cdev2;
    ct[0].bytes = ct[1].bytes = 64;
    ct[1].checksum = 9;
    cs.n_devices = 0;
    cs.devices = NULL;
    cs.checksum = 0;
    cs.bytes = 0;
    cs.n_targets = 2;
    cs.targets = ctp;
    set_template(method_of(0, "CommitShards"), &cs.base);

    Shmap__V1__Program *prog =
        program_of("mesh i=2 j=4\n"
                   "shard_map fz(a: f32[16,32] @ P('i','j')) -> P('i', None):\n"
                   "    return psum(a, 'j')\n");
    Shmap__V1__ArrayRef *args[] = {&keep};
    Shmap__V1__SubmitJobRequest sj = SHMAP__V1__SUBMIT_JOB_REQUEST__INIT;
    sj.program = prog;
    sj.n_args = 1;
    sj.args = args;
    sj.deadline_ms = 3000;
    set_template(method_of(0, "SubmitJob"), &sj.base);
    sm_rpc_msg_free(&prog->base);
    /* every collective and many shape ops (tests/data/fuzz_*.shmap) */
    static const char *const files[] = {"fuzz_colls.shmap", "fuzz_shapes.shmap"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        prog = program_of_file(files[f]);
        sj.program = prog;
        set_template(method_of(0, "SubmitJob"), &sj.base);
        sm_rpc_msg_free(&prog->base);
    }
    /* a light job submitted with a wait: it runs on the handler's thread */
    prog = program_of("mesh i=2 j=4\n"
                      "shard_map light(a: f32[16,32] @ P('i','j')) -> P('i', 'j'):\n"
                      "    return a * 2 + 1\n");
    sj.program = prog;
    sj.wait_ms = 200;
    set_template(method_of(0, "SubmitJob"), &sj.base);
    sm_rpc_msg_free(&prog->base);

    Shmap__V1__JobRef jr = SHMAP__V1__JOB_REF__INIT;
    jr.job_id = 4242;
    jr.wait_ms = 50;
    set_template(method_of(0, "WaitJob"), &jr.base);
    jr.wait_ms = 0;
    set_template(method_of(0, "GetJob"), &jr.base);
    set_template(method_of(0, "CancelJob"), &jr.base);
    set_template(method_of(1, "CancelJob"), &jr.base);

    Shmap__V1__FreeArrayRequest fr = SHMAP__V1__FREE_ARRAY_REQUEST__INIT;
    fr.array_id = 4242424;
    fr.n_devices = 1;
    fr.devices = &cl.wdev[0][0];
    set_template(method_of(1, "FreeArray"), &fr.base);

    Shmap__V1__Shape s8 = SHMAP__V1__SHAPE__INIT;
    Shmap__V1__Box box = SHMAP__V1__BOX__INIT;
    Shmap__V1__AssemblePiece pc = SHMAP__V1__ASSEMBLE_PIECE__INIT, *pcs[] = {&pc};
    Shmap__V1__AssembleShard as = SHMAP__V1__ASSEMBLE_SHARD__INIT, *ass[] = {&as};
    Shmap__V1__AssembleRequest ar = SHMAP__V1__ASSEMBLE_REQUEST__INIT;
    s8.n_dims = box.n_start = box.n_stop = pc.n_dst_offset = 2;
    s8.dims = box.stop = d8;
    box.start = pc.dst_offset = zero2;
    pc.src_array = cl.keep.v;
    pc.src_box = &box;
    as.device = pc.src_device = cl.wdev[0][0];
    as.shape = &s8;
    as.n_pieces = ar.n_shards = 1;
    as.pieces = pcs;
    ar.array_id = 4242425;
    ar.dtype = SHMAP__V1__DTYPE__F32;
    ar.shards = ass;
    set_template(method_of(1, "Assemble"), &ar.base);
    pc.src_address = cl.waddr[1]; /* pulled from the peer */
    pc.src_device = cl.wdev[1][0];
    ar.array_id = 4242427;
    set_template(method_of(1, "Assemble"), &ar.base);

    prog = program_of("mesh i=2 j=4\n"
                      "shard_map fz(a: f32[16,32] @ P('i','j')) -> P('i','j'):\n"
                      "    return a\n");
    int32_t *old_devs = prog->mesh->devices;
    size_t old_n = prog->mesh->n_devices;
    prog->mesh->devices = mesh_devs;
    prog->mesh->n_devices = 8;
    uint64_t in[] = {cl.keep.v}, out[] = {4242426};
    Shmap__V1__PeerDevices p0 = SHMAP__V1__PEER_DEVICES__INIT, p1 = SHMAP__V1__PEER_DEVICES__INIT;
    p0.address = cl.waddr[0];
    p0.n_devices = 4;
    p0.devices = cl.wdev[0];
    p1.address = cl.waddr[1];
    p1.n_devices = 4;
    p1.devices = cl.wdev[1];
    Shmap__V1__PeerDevices *peers[] = {&p0, &p1};
    Shmap__V1__RunJobRequest rj = SHMAP__V1__RUN_JOB_REQUEST__INIT;
    rj.job_id = 4242;
    rj.program = prog;
    rj.n_input_arrays = 1;
    rj.input_arrays = in;
    rj.n_output_arrays = 1;
    rj.output_arrays = out;
    rj.n_peers = 2;
    rj.peers = peers;
    rj.deadline_ms = 2000;
    set_template(method_of(1, "RunJob"), &rj.base);
    prog->mesh->devices = old_devs;
    prog->mesh->n_devices = old_n;
    sm_rpc_msg_free(&prog->base);
}

/* N random byte strings (0..512 bytes) to every method of one service. */

const char *const up_names[UP_NCASES] = {"no header",
                                         "header twice",
                                         "offset backwards",
                                         "offsets overlap",
                                         "offset past end",
                                         "negative offset",
                                         "total_bytes 2^62",
                                         "negative total_bytes",
                                         "data after last",
                                         "data after a full last",
                                         "wrong checksum",
                                         "100 tiny, bad sum",
                                         "100 tiny, short",
                                         "more than total",
                                         "no last message",
                                         "empty stream",
                                         "9-dim shard shape",
                                         "2^62 dims",
                                         "negative dims",
                                         "bad dtype",
                                         "no devices",
                                         "duplicate devices",
                                         "unknown device",
                                         "300 devices",
                                         "wrong shard shape",
                                         "targets: a bad second",
                                         "targets: bad middle sum",
                                         "targets: a device twice",
                                         "targets: two arrays",
                                         "targets: no last"};

void upload_case(fuzz_seq *s, up_case c, uint64_t id, const int32_t *devs, int ndevs,
                 const uint8_t *data, size_t nb)
{
    int64_t dims[64];
    int32_t many[300];
    for (int i = 0; i < 64; i++)
        dims[i] = 1;
    dims[0] = 16;
    dims[1] = 32;
    Shmap__V1__Shape shape = SHMAP__V1__SHAPE__INIT;
    shape.n_dims = 2;
    shape.dims = dims;
    Shmap__V1__UploadHeader h = SHMAP__V1__UPLOAD_HEADER__INIT;
    h.array_id = id;
    h.n_devices = (size_t)ndevs;
    h.devices = (int32_t *)devs;
    h.shape = &shape;
    h.dtype = SHMAP__V1__DTYPE__F32;
    h.total_bytes = (int64_t)nb;
    uint64_t sum = sm_checksum_oneshot(data, nb);
    Shmap__V1__UploadMsg m = SHMAP__V1__UPLOAD_MSG__INIT;
    size_t half = nb / 2;
#define MSG(HDR, OFF, FROM, LEN, LST, CK)                                                          \
    do {                                                                                           \
        m.header = (HDR);                                                                          \
        m.offset = (OFF);                                                                          \
        m.data.data = (uint8_t *)data + (FROM);                                                    \
        m.data.len = (LEN);                                                                        \
        m.last = (LST);                                                                            \
        m.checksum = (CK);                                                                         \
        fuzz_seq_add(s, &m.base);                                                                  \
    } while (0)
    switch (c) {
    case UP_NO_HEADER:
        MSG(NULL, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_HEADER_TWICE:
        MSG(&h, 0, 0, half, 0, 0);
        MSG(&h, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_OFF_BACKWARDS:
        MSG(&h, 0, 0, half, 0, 0);
        MSG(NULL, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_OFF_OVERLAP:
        MSG(&h, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)half / 2, half / 2, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_OFF_PAST_END:
        MSG(&h, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)nb * 4, half, nb - half, 1, sum);
        return;
    case UP_OFF_NEGATIVE:
        MSG(&h, -(int64_t)half, 0, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_TOTAL_HUGE:
        h.total_bytes = (int64_t)1 << 62;
        MSG(&h, 0, 0, half, 0, 0);
        MSG(NULL, (int64_t)half, half, nb - half, 1, sum);
        return;
    case UP_TOTAL_NEGATIVE:
        h.total_bytes = -2048;
        MSG(&h, 0, 0, nb, 1, sum);
        return;
    case UP_DATA_AFTER_LAST:
        MSG(&h, 0, 0, half, 1, sm_checksum_oneshot(data, half));
        MSG(NULL, (int64_t)half, half, nb - half, 0, 0);
        return;
    case UP_AFTER_FULL_LAST: /* complete and correct, then one more */
        MSG(&h, 0, 0, nb, 1, sum);
        MSG(NULL, (int64_t)nb, 0, 4, 0, 0);
        return;
    case UP_BAD_CHECKSUM:
        MSG(&h, 0, 0, nb, 1, sum ^ 0x100);
        return;
    case UP_TINY_BAD_SUM:
    case UP_TINY_SHORT: {
        size_t step = c == UP_TINY_SHORT ? 20 : nb / 100 + 1, off = 0;
        MSG(&h, 0, 0, 0, 0, 0);
        for (int i = 0; i < 100 && off < nb; i++) {
            size_t n = off + step > nb ? nb - off : step;
            int last = i == 99 || off + n == nb;
            MSG(NULL, (int64_t)off, off, n, last, c == UP_TINY_SHORT ? sum : sum + 1);
            off += n;
        }
        return;
    }
    case UP_MORE_THAN_TOTAL:
        MSG(&h, 0, 0, nb, 0, 0);
        MSG(NULL, (int64_t)nb, 0, nb, 1, sum);
        return;
    case UP_NO_LAST:
        MSG(&h, 0, 0, nb, 0, 0);
        return;
    case UP_EMPTY:
        return;
    case UP_SHAPE_9D:
        shape.n_dims = 9 + (size_t)(id % 50);
        break;
    case UP_SHAPE_HUGE:
        dims[0] = (int64_t)1 << 62;
        dims[1] = (int64_t)1 << 62;
        break;
    case UP_SHAPE_NEGATIVE:
        dims[0] = -16;
        dims[1] = -32;
        break;
    case UP_BAD_DTYPE:
        h.dtype = (Shmap__V1__DType)(id % 2 ? 0 : 100);
        break;
    case UP_NO_DEVICES:
        h.n_devices = 0;
        break;
    case UP_DUP_DEVICES: {
        int32_t d[2] = {devs[0], devs[0]};
        h.devices = d;
        h.n_devices = 2;
        MSG(&h, 0, 0, nb, 1, sum);
        return;
    }
    case UP_UNKNOWN_DEVICE: {
        int32_t d[2] = {devs[0], 999};
        h.devices = d;
        h.n_devices = 2;
        MSG(&h, 0, 0, nb, 1, sum);
        return;
    }
    case UP_MANY_DEVICES:
        for (int i = 0; i < 300; i++)
            many[i] = devs[i % ndevs];
        h.devices = many;
        h.n_devices = 300;
        break;
    case UP_WRONG_SHAPE: /* neither the array's nor that of total_bytes */
        dims[0] = 16;
        dims[1] = 16;
        break;
    case UP_BATCH_BAD_SECOND:
    case UP_BATCH_MID_SUM:
    case UP_BATCH_SAME_DEVICE:
    case UP_BATCH_OTHER_ARRAY:
    case UP_BATCH_NO_LAST: { /* three one-device targets in one stream */
        int32_t d[3] = {devs[0], devs[1 % ndevs], devs[2 % ndevs]};
        Shmap__V1__UploadHeader hk[3];
        for (int k = 0; k < 3; k++) {
            hk[k] = h;
            hk[k].n_devices = 1;
            hk[k].devices = &d[k];
        }
        if (c == UP_BATCH_BAD_SECOND)
            hk[1].total_bytes = (int64_t)nb - 4;
        if (c == UP_BATCH_SAME_DEVICE)
            hk[2].devices = &d[0];
        if (c == UP_BATCH_OTHER_ARRAY)
            hk[1].array_id = id + 1;
        for (int k = 0; k < 3; k++) {
            if (c == UP_BATCH_NO_LAST && k == 2) {
                MSG(&hk[k], 0, 0, half, 0, 0);
                break;
            }
            MSG(&hk[k], 0, 0, nb, 1, c == UP_BATCH_MID_SUM && k == 1 ? sum ^ 1 : sum);
        }
        return;
    }
    default:
        break;
    }
    MSG(&h, 0, 0, nb, 1, sum);
#undef MSG
}

void templates_free(void)
{
    for (int i = 0; i < nmethods; i++)
        for (int t = 0; t < methods[i].nt; t++)
            free(methods[i].tmpl[t]);
}
