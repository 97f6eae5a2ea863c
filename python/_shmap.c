/* _shmap: the CPython extension under the `shmap` Python package — a thin
 * layer over libshmap (client/lib/shmap.h, shmap_job.h) and the C core's
 * sharding math and program parser. Everything a user sees is in the pure
 * Python package (python/shmap); this module only converts:
 *
 *   Client(target, token=None, timeout_ms=0, progress=None, tls_ca=None, tls_cert=None,
 *          tls_key=None)               a connection (sm_client_connect)
 *     .devices() .put(buf, dtype, shape, mesh, spec, name) .get_into(info, buf)
 *     .describe(ref) .list() .reshard(ref, mesh, spec, name) .replicate(ref, n) .delete(ref)
 *     .save(ref, dir) .load(dir, mesh, spec, name)
 *     .get_shard(ref, device) .put_shards(...) .put_local(...) .mesh_create(...)
 *     .alloc(nbytes) -> SharedBuffer   memory of sm_client_alloc, freed with the object
 *     .submit(text, file, entry, args, out_names, check_vma) .wait(job, ms)
 *     .cancel(job) .run(...)
 *   sharding_info(mesh, spec, shape)  offline: shard shape, per-device index
 *                                     map, replica ids, type string, diagram
 *   program_check(text, file, entry, check_vma)   parse + verify + describe
 *   op_table()                        (name, signature) of every op
 *
 * A mesh crosses as (names, sizes, devices or None, auto_axes); a spec as the text of a
 * PartitionSpec ("P('i', None)"); an array reference as an id (int) or a
 * name (str); array data through the buffer protocol, without a copy: put
 * reads the caller's buffer, get_into writes into it. Errors raise
 * _shmap.Error(code_name, sentence); the package maps them to its classes.
 * The GIL is released around every call that talks to the service. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <string.h>

#include "shmap.h"
#include "shmap_job.h"
#include "sm_ir.h"
#include "sm_lower.h"
#include "sm_rpc.h"
#include "sm_strbuf.h"

#define ERRLEN 2048

static PyObject *sm_py_error; /* _shmap.Error */

static PyObject *raise_err(sm_err e, const char *msg)
{
    /* a sentence that quotes a caller's bytes may hold invalid UTF-8 */
    PyObject *args = Py_BuildValue("(sN)", sm_err_name(e),
                                   PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace"));
    if (args) {
        PyErr_SetObject(sm_py_error, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* ---- conversions ---- */

static int to_shape(PyObject *o, sm_shape *s)
{
    PyObject *seq = PySequence_Fast(o, "a shape must be a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > SM_MAX_RANK) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "rank %zd is above %d", n, SM_MAX_RANK);
        return -1;
    }
    s->rank = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        s->dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (s->dims[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *from_shape(const sm_shape *s)
{
    PyObject *t = PyTuple_New(s->rank);
    for (int i = 0; t && i < s->rank; i++)
        PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(s->dims[i]));
    return t;
}

/* (names, sizes, devices or None[, auto_axes]) -> mesh; *default_order when
 * devices is None. auto_axes: bit a set when axis a is Auto. */
static int to_mesh(PyObject *o, sm_mesh *m, int *default_order)
{
    PyObject *names, *sizes, *devs;
    unsigned int auto_axes = 0;
    if (!PyArg_ParseTuple(o, "OOO|I", &names, &sizes, &devs, &auto_axes))
        return -1;
    const char *np[SM_MAX_AXES];
    int64_t sz[SM_MAX_AXES];
    int32_t dv[SM_MAX_DEVICES];
    Py_ssize_t n = PySequence_Size(names);
    if (n < 1 || n > SM_MAX_AXES || PySequence_Size(sizes) != n) {
        PyErr_SetString(PyExc_ValueError, "a mesh needs 1 to 8 axis names, one size each");
        return -1;
    }
    PyObject *keep[SM_MAX_AXES] = {0};
    int rc = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        keep[i] = PySequence_GetItem(names, i);
        PyObject *s = PySequence_GetItem(sizes, i);
        np[i] = keep[i] ? PyUnicode_AsUTF8(keep[i]) : NULL;
        sz[i] = s ? PyLong_AsLongLong(s) : -1;
        Py_XDECREF(s);
        if (!np[i] || PyErr_Occurred())
            goto out;
    }
    int nd = 0;
    if (devs != Py_None) {
        Py_ssize_t k = PySequence_Size(devs);
        if (k < 0 || k > SM_MAX_DEVICES) {
            PyErr_SetString(PyExc_ValueError, "too many devices");
            goto out;
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *d = PySequence_GetItem(devs, i);
            dv[i] = d ? (int32_t)PyLong_AsLong(d) : -1;
            Py_XDECREF(d);
            if (PyErr_Occurred())
                goto out;
        }
        nd = (int)k;
    }
    *default_order = devs == Py_None;
    char err[ERRLEN];
    int64_t total = 1;
    for (Py_ssize_t i = 0; i < n; i++)
        total *= sz[i] > 0 ? sz[i] : 1;
    sm_err e = sm_mesh_init(m, (int)n, np, sz, devs == Py_None ? NULL : dv,
                            devs == Py_None ? (int)total : nd, err, sizeof err);
    if (!e && !(e = sm_mesh_types_check(m, auto_axes, "the mesh's axis types", err, sizeof err)))
        m->auto_axes = auto_axes;
    if (e) {
        raise_err(e, err);
        goto out;
    }
    rc = 0;
out:
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(keep[i]);
    return rc;
}

static PyObject *from_mesh(const sm_mesh *m)
{
    PyObject *names = PyTuple_New(m->naxes), *sizes = PyTuple_New(m->naxes),
             *devs = PyTuple_New(m->ndevices);
    if (!names || !sizes || !devs) {
        Py_XDECREF(names);
        Py_XDECREF(sizes);
        Py_XDECREF(devs);
        return NULL;
    }
    for (int a = 0; a < m->naxes; a++) {
        PyTuple_SET_ITEM(names, a, PyUnicode_FromString(m->names[a]));
        PyTuple_SET_ITEM(sizes, a, PyLong_FromLongLong(m->sizes[a]));
    }
    for (int d = 0; d < m->ndevices; d++)
        PyTuple_SET_ITEM(devs, d, PyLong_FromLong(m->devices[d]));
    return Py_BuildValue("(NNNI)", names, sizes, devs, (unsigned int)m->auto_axes);
}

static int to_spec(const char *text, sm_pspec *p)
{
    char err[ERRLEN];
    sm_err e = sm_pspec_parse(text, p, err, sizeof err);
    if (e) {
        raise_err(e, err);
        return -1;
    }
    return 0;
}

static int to_dtype(const char *name, sm_dtype *t)
{
    if (sm_dtype_parse(name, t)) {
        PyErr_Format(PyExc_ValueError, "unknown dtype '%s'", name);
        return -1;
    }
    return 0;
}

static int to_ref(PyObject *o, sm_array_ref *r)
{
    memset(r, 0, sizeof *r);
    if (PyLong_Check(o)) {
        r->id.v = PyLong_AsUnsignedLongLong(o);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (PyUnicode_Check(o)) {
        r->name = PyUnicode_AsUTF8(o);
        return r->name ? 0 : -1;
    }
    PyErr_SetString(PyExc_TypeError, "an array reference is an id (int) or a name (str)");
    return -1;
}

/* to_ref as a PyArg_ParseTuple converter ("O&"): 1, or 0 with the error
 * raised. */
static int ref_arg(PyObject *o, void *r)
{
    return to_ref(o, r) ? 0 : 1;
}

static PyObject *from_index(const sm_index *ix)
{
    PyObject *t = PyTuple_New(ix->rank);
    for (int d = 0; t && d < ix->rank; d++)
        PyTuple_SET_ITEM(
            t, d, Py_BuildValue("(LL)", (long long)ix->r[d].start, (long long)ix->r[d].stop));
    return t;
}

static PyObject *from_info(const sm_array_info *a)
{
    char spec[512];
    PyObject *shards = PyList_New(a->nshards);
    for (int k = 0; shards && k < a->nshards; k++) {
        const sm_shard_info *s = &a->shards[k];
        PyList_SET_ITEM(shards, k,
                        Py_BuildValue("{s:i,s:N,s:I,s:s,s:i,s:O,s:O}", "device", (int)s->device,
                                      "index", from_index(&s->index), "worker", s->worker_id.v,
                                      "address", s->worker_address, "replica_id", s->replica_id,
                                      "present", s->present ? Py_True : Py_False, "spilled",
                                      s->spilled ? Py_True : Py_False));
    }
    PyObject *copies = PyList_New(a->ncopies);
    for (int k = 0; copies && k < a->ncopies; k++) {
        const sm_shard_info *s = &a->copies[k];
        PyList_SET_ITEM(copies, k,
                        Py_BuildValue("{s:i,s:N,s:I,s:s,s:O}", "device", (int)s->device, "index",
                                      from_index(&s->index), "worker", s->worker_id.v, "address",
                                      s->worker_address, "present",
                                      s->present ? Py_True : Py_False));
    }
    return Py_BuildValue(
        "{s:K,s:s,s:s,s:N,s:N,s:s,s:s,s:s,s:N,s:s,s:L,s:N,s:K,s:N}", "id",
        (unsigned long long)a->id.v, "name", a->name, "dtype", sm_dtype_name(a->dtype), "shape",
        from_shape(&a->shape), "shard_shape", from_shape(&a->shard_shape), "type", a->type, "state",
        sm_array_state_name(a->state), "error", a->error, "mesh", from_mesh(&a->sharding.mesh),
        "spec", sm_pspec_format(&a->sharding.spec, spec, sizeof spec), "bytes", (long long)a->bytes,
        "shards", shards, "mesh_id", (unsigned long long)a->mesh_id.v, "copies", copies);
}

/* What a call that answers an sm_array_info returns: the info as a dict
 * (info freed), or NULL with the call's error e raised. */
static PyObject *info_reply(sm_err e, const char *err, sm_array_info *info)
{
    if (e)
        return raise_err(e, err);
    PyObject *res = from_info(info);
    sm_array_info_free(info);
    return res;
}

/* ---- Client ---- */

typedef struct {
    PyObject_HEAD sm_client *c;
    PyObject *progress; /* callable(done, total) or NULL */
    Py_ssize_t nbufs;   /* SharedBuffers alive: c is closed after the last */
    int closed;         /* close() was called */
} Client;

/* libshmap's progress callback, from whichever thread moves the bytes. */
static void Client_progress(void *user, int64_t done, int64_t total)
{
    Client *self = user;
    if (!self->progress)
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(self->progress, "LL", (long long)done, (long long)total);
    if (!r)
        PyErr_Clear(); /* a failing progress display never fails a transfer */
    Py_XDECREF(r);
    PyGILState_Release(g);
}

static int Client_init(Client *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"target", "token",    "timeout_ms", "progress",
                          "tls_ca", "tls_cert", "tls_key",    NULL};
    const char *target, *token = NULL, *tls_ca = NULL, *tls_cert = NULL, *tls_key = NULL;
    long long timeout_ms = 0;
    PyObject *progress = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zLOzzz", kws, &target, &token, &timeout_ms,
                                     &progress, &tls_ca, &tls_cert, &tls_key))
        return -1;
    if (progress && progress != Py_None) {
        Py_INCREF(progress);
        self->progress = progress;
    }
    sm_client_opts o = {.token = token,
                        .timeout_ms = timeout_ms,
                        .tls_ca = tls_ca,
                        .tls_cert = tls_cert,
                        .tls_key = tls_key,
                        .stage_mb = SM_CLIENT_STAGE_MB_DEFAULT};
    if (self->progress) {
        o.progress = Client_progress;
        o.progress_user = self;
    }
    char err[ERRLEN];
    sm_rpc_malloc_tune(); /* the package configures its process as shmapctl's main does */
    sm_err e = sm_client_opts_from_env(&o, err, sizeof err); /* SHMAP_RELAY, SHMAP_CLIENT_*_MB */
    if (e) {
        raise_err(e, err);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS e = sm_client_connect(target, &o, &self->c, err, sizeof err);
    Py_END_ALLOW_THREADS if (e)
    {
        raise_err(e, err);
        return -1;
    }
    return 0;
}

static void Client_dealloc(Client *self)
{
    if (self->c)
        sm_client_close(self->c);
    Py_XDECREF(self->progress);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Client_ok(Client *self)
{
    if (!self->c || self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "the client is closed");
        return 0;
    }
    return 1;
}

/* Closes c once closed and no SharedBuffer is left (their memory is c's). */
static void Client_release(Client *self)
{
    if (self->c && self->closed && self->nbufs == 0) {
        sm_client_close(self->c);
        self->c = NULL;
    }
}

static PyObject *Client_close(Client *self, PyObject *unused)
{
    self->closed = 1;
    Client_release(self);
    Py_RETURN_NONE;
}

/* ---- SharedBuffer ---- */

/* A buffer of sm_client_alloc: memory in a shared-memory segment of the
 * client (zero-filled), exported through the buffer protocol (writable),
 * freed with this object; a numpy array over it keeps it alive as its
 * base. Holds its Client, which closes the connection only after its
 * last buffer is gone. */
typedef struct {
    PyObject_HEAD Client *client; /* strong reference */
    void *p;
    Py_ssize_t len;
} SharedBuffer;

static void SharedBuffer_dealloc(SharedBuffer *self)
{
    Client *cl = self->client;
    if (cl) {
        sm_client_free(cl->c, self->p);
        cl->nbufs--;
        Client_release(cl);
        Py_DECREF(cl);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int SharedBuffer_getbuffer(SharedBuffer *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->len, 0, flags);
}

static PyBufferProcs SharedBuffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)SharedBuffer_getbuffer,
};

static PyTypeObject SharedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_shmap.SharedBuffer",
    .tp_basicsize = sizeof(SharedBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of sm_client_alloc: a shared-memory segment of its client.",
    .tp_dealloc = (destructor)SharedBuffer_dealloc,
    .tp_as_buffer = &SharedBuffer_as_buffer,
};

/* alloc(nbytes) -> SharedBuffer */
static PyObject *Client_alloc(Client *self, PyObject *args)
{
    Py_ssize_t n;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "n", &n))
        return NULL;
    if (n < 0)
        return PyErr_Format(PyExc_ValueError, "cannot allocate %zd bytes", n);
    SharedBuffer *b = PyObject_New(SharedBuffer, &SharedBufferType);
    if (!b)
        return NULL;
    b->client = NULL;
    b->p = NULL;
    b->len = n;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_alloc(self->c, (size_t)n, &b->p, err, sizeof err);
    Py_END_ALLOW_THREADS if (e)
    {
        Py_DECREF(b);
        return raise_err(e, err);
    }
    Py_INCREF(self);
    b->client = self;
    self->nbufs++;
    return (PyObject *)b;
}

static PyObject *Client_devices(Client *self, PyObject *unused)
{
    if (!Client_ok(self))
        return NULL;
    sm_worker_info *w = NULL;
    int n = 0;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_devices(self->c, &w, &n, err, sizeof err);
    Py_END_ALLOW_THREADS if (e) return raise_err(e, err);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *devs = PyTuple_New(w[i].ndevices);
        for (int d = 0; devs && d < w[i].ndevices; d++)
            PyTuple_SET_ITEM(devs, d, PyLong_FromLong(w[i].devices[d]));
        PyList_SET_ITEM(l, i,
                        Py_BuildValue("{s:I,s:s,s:i,s:O,s:N}", "worker", w[i].id.v, "address",
                                      w[i].address, "process", w[i].process_index, "alive",
                                      w[i].alive ? Py_True : Py_False, "devices", devs));
    }
    free(w);
    return l;
}

static PyObject *Client_mesh_create(Client *self, PyObject *args)
{
    PyObject *mo;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "O", &mo))
        return NULL;
    sm_mesh m;
    int def;
    if (to_mesh(mo, &m, &def))
        return NULL;
    sm_mesh_info mi;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_mesh_create(self->c, &m, def, NULL, &mi, err, sizeof err);
    Py_END_ALLOW_THREADS if (e) return raise_err(e, err);
    return from_mesh(&mi.mesh);
}

/* The sharding of a put or reshard: a mesh tuple and a spec text. */
static int to_sharding(PyObject *mo, const char *spec, sm_mesh *m, sm_sharding_ref *sh)
{
    int def;
    memset(sh, 0, sizeof *sh);
    if (to_mesh(mo, m, &def) || to_spec(spec, &sh->spec))
        return -1;
    sh->mesh = m;
    sh->default_order = def;
    return 0;
}

static PyObject *Client_put(Client *self, PyObject *args)
{
    Py_buffer buf;
    const char *dtype, *spec, *name;
    PyObject *shape, *mo;
    if (!Client_ok(self) ||
        !PyArg_ParseTuple(args, "y*sOOsz", &buf, &dtype, &shape, &mo, &spec, &name))
        return NULL;
    PyObject *res = NULL;
    sm_dtype t;
    sm_shape s;
    sm_mesh m;
    sm_sharding_ref sh;
    if (to_dtype(dtype, &t) || to_shape(shape, &s) || to_sharding(mo, spec, &m, &sh))
        goto out;
    int64_t n = 1;
    for (int d = 0; d < s.rank; d++)
        n *= s.dims[d];
    if (n * (int64_t)sm_dtype_size(t) != (int64_t)buf.len) {
        PyErr_Format(PyExc_ValueError, "the buffer has %zd bytes, the array %lld", buf.len,
                     (long long)(n * (int64_t)sm_dtype_size(t)));
        goto out;
    }
    sm_array_info info;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e =
        sm_client_put(self->c, t, &s, buf.buf, &sh, name, &info, err, sizeof err);
    Py_END_ALLOW_THREADS res = info_reply(e, err, &info);
out:
    PyBuffer_Release(&buf);
    return res;
}

static PyObject *Client_describe(Client *self, PyObject *args)
{
    sm_array_ref r;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "O&", ref_arg, &r))
        return NULL;
    sm_array_info info;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_describe(self->c, r, &info, err, sizeof err);
    Py_END_ALLOW_THREADS return info_reply(e, err, &info);
}

/* get_into(ref, buffer): the whole array, written into the caller's buffer. */
static PyObject *Client_get_into(Client *self, PyObject *args)
{
    Py_buffer buf;
    sm_array_ref r;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "O&w*", ref_arg, &r, &buf))
        return NULL;
    PyObject *res = NULL;
    sm_array_info info;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_describe(self->c, r, &info, err, sizeof err);
    if (!e) {
        e = sm_client_get_into(self->c, &info, buf.buf, (size_t)buf.len, err, sizeof err);
        sm_array_info_free(&info);
    }
    Py_END_ALLOW_THREADS if (e)
    {
        raise_err(e, err);
        goto out;
    }
    res = Py_None;
    Py_INCREF(res);
out:
    PyBuffer_Release(&buf);
    return res;
}

static PyObject *array_to_bytes(sm_array *a)
{
    PyObject *b = PyBytes_FromStringAndSize(a->data, (Py_ssize_t)a->nbytes);
    PyObject *res =
        b ? Py_BuildValue("(NsN)", b, sm_dtype_name(a->dtype), from_shape(&a->shape)) : NULL;
    sm_array_free(a);
    return res;
}

static PyObject *Client_get_shard(Client *self, PyObject *args)
{
    int dev;
    sm_array_ref r;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "O&i", ref_arg, &r, &dev))
        return NULL;
    sm_array *a = NULL;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_get_shard(self->c, r, dev, &a, err, sizeof err);
    Py_END_ALLOW_THREADS if (e) return raise_err(e, err);
    return array_to_bytes(a);
}

static PyObject *Client_list(Client *self, PyObject *unused)
{
    if (!Client_ok(self))
        return NULL;
    sm_array_info *l = NULL;
    int n = 0;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_list(self->c, &l, &n, err, sizeof err);
    Py_END_ALLOW_THREADS if (e) return raise_err(e, err);
    PyObject *res = PyList_New(n);
    for (int i = 0; res && i < n; i++)
        PyList_SET_ITEM(res, i, from_info(&l[i]));
    sm_array_info_list_free(l, n);
    return res;
}

static PyObject *Client_reshard(Client *self, PyObject *args)
{
    PyObject *mo;
    const char *spec, *name;
    sm_array_ref r;
    sm_mesh m;
    sm_sharding_ref sh;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "O&Osz", ref_arg, &r, &mo, &spec, &name) ||
        to_sharding(mo, spec, &m, &sh))
        return NULL;
    sm_array_info info;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_reshard(self->c, r, &sh, name, &info, err, sizeof err);
    Py_END_ALLOW_THREADS return info_reply(e, err, &info);
}

static PyObject *Client_replicate(Client *self, PyObject *args)
{
    int replicas;
    sm_array_ref r;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "O&i", ref_arg, &r, &replicas))
        return NULL;
    sm_array_info info;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_replicate(self->c, r, replicas, &info, err, sizeof err);
    Py_END_ALLOW_THREADS return info_reply(e, err, &info);
}

static PyObject *Client_save(Client *self, PyObject *args)
{
    const char *dir;
    sm_array_ref r;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "O&s", ref_arg, &r, &dir))
        return NULL;
    char err[ERRLEN];
    int64_t bytes = 0;
    int files = 0;
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_save(self->c, r, dir, &bytes, &files, err, sizeof err);
    Py_END_ALLOW_THREADS if (e) return raise_err(e, err);
    return Py_BuildValue("(iL)", files, (long long)bytes);
}

static PyObject *Client_load(Client *self, PyObject *args)
{
    PyObject *mo;
    const char *dir, *spec, *name;
    sm_mesh m;
    sm_sharding_ref sh;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "sOsz", &dir, &mo, &spec, &name) ||
        to_sharding(mo, spec, &m, &sh))
        return NULL;
    sm_array_info info;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_load(self->c, dir, &sh, name, &info, err, sizeof err);
    Py_END_ALLOW_THREADS return info_reply(e, err, &info);
}

static PyObject *Client_delete(Client *self, PyObject *args)
{
    sm_array_ref r;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "O&", ref_arg, &r))
        return NULL;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_client_delete(self->c, r, err, sizeof err);
    Py_END_ALLOW_THREADS if (e) return raise_err(e, err);
    Py_RETURN_NONE;
}

/* put_shards(dtype, global_shape, mesh, spec, name, [(device, buffer, shape)...]) */
static PyObject *Client_put_shards(Client *self, PyObject *args)
{
    const char *dtype, *spec, *name;
    PyObject *shape, *mo, *list;
    if (!Client_ok(self) ||
        !PyArg_ParseTuple(args, "sOOszO", &dtype, &shape, &mo, &spec, &name, &list))
        return NULL;
    sm_dtype t;
    sm_shape g;
    sm_mesh m;
    sm_sharding_ref sh;
    if (to_dtype(dtype, &t) || to_shape(shape, &g) || to_sharding(mo, spec, &m, &sh))
        return NULL;
    Py_ssize_t n = PySequence_Size(list);
    if (n < 0 || n > SM_MAX_DEVICES)
        return PyErr_Format(PyExc_ValueError, "bad shard list");
    int32_t devs[SM_MAX_DEVICES];
    sm_array *arrs[SM_MAX_DEVICES] = {0};
    PyObject *res = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_GetItem(list, i);
        int dev;
        Py_buffer b;
        PyObject *sshape;
        sm_shape ss;
        char err[ERRLEN];
        if (!it || !PyArg_ParseTuple(it, "iy*O", &dev, &b, &sshape)) {
            Py_XDECREF(it);
            goto out;
        }
        Py_DECREF(it);
        devs[i] = dev;
        if (to_shape(sshape, &ss) || sm_array_create_uninit(t, &ss, &arrs[i], err, sizeof err) ||
            (int64_t)b.len != arrs[i]->nbytes) {
            PyBuffer_Release(&b);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "shard %zd: its bytes do not match its shape", i);
            goto out;
        }
        memcpy(arrs[i]->data, b.buf, (size_t)b.len);
        PyBuffer_Release(&b);
    }
    sm_array_info info;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e =
        sm_client_put_shards(self->c, t, &g, &sh, name, (int)n, devs, (const sm_array *const *)arrs,
                             &info, err, sizeof err);
    Py_END_ALLOW_THREADS res = info_reply(e, err, &info);
out:
    for (Py_ssize_t i = 0; i < n; i++)
        sm_array_free(arrs[i]);
    return res;
}

/* put_local(process, buffer, dtype, local_shape, mesh, spec, name, global_shape|None) */
static PyObject *Client_put_local(Client *self, PyObject *args)
{
    int process;
    Py_buffer b;
    const char *dtype, *spec, *name;
    PyObject *lshape, *mo, *gshape;
    if (!Client_ok(self) || !PyArg_ParseTuple(args, "iy*sOOssO", &process, &b, &dtype, &lshape, &mo,
                                              &spec, &name, &gshape))
        return NULL;
    PyObject *res = NULL;
    sm_dtype t;
    sm_shape ls, gs;
    sm_mesh m;
    sm_sharding_ref sh;
    sm_array *local = NULL;
    char err[ERRLEN];
    if (to_dtype(dtype, &t) || to_shape(lshape, &ls) ||
        (gshape != Py_None && to_shape(gshape, &gs)) || to_sharding(mo, spec, &m, &sh))
        goto out;
    if (sm_array_create_uninit(t, &ls, &local, err, sizeof err) || local->nbytes != b.len) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "the local data's bytes do not match its shape");
        goto out;
    }
    memcpy(local->data, b.buf, (size_t)b.len);
    sm_array_info info;
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e =
        sm_client_put_local(self->c, process, local, &sh, name, gshape == Py_None ? NULL : &gs, 0,
                            &info, err, sizeof err);
    Py_END_ALLOW_THREADS res = info_reply(e, err, &info);
out:
    sm_array_free(local);
    PyBuffer_Release(&b);
    return res;
}

/* ---- programs and jobs ---- */

/* Parses and verifies text; *out owned by the caller. */
static sm_program *parse_program(const char *text, const char *file, const char *entry,
                                 int check_vma)
{
    char err[ERRLEN];
    sm_program *p = NULL;
    sm_err e = sm_program_parse_entry(text, file, entry, &p, err, sizeof err);
    if (!e)
        e = sm_program_verify(p, check_vma, err, sizeof err);
    if (e) {
        sm_program_free(p);
        raise_err(e, err);
        return NULL;
    }
    return p;
}

static PyObject *job_info(const sm_job_info *j)
{
    PyObject *outs = PyList_New(j->noutputs);
    for (int k = 0; outs && k < j->noutputs; k++)
        PyList_SET_ITEM(outs, k, from_info(&j->outputs[k]));
    return Py_BuildValue("{s:K,s:s,s:s,s:N,s:L,s:L}", "job", (unsigned long long)j->id.v, "state",
                         sm_job_state_name(j->state), "error", j->error, "outputs", outs,
                         "queued_us", (long long)j->queued_us, "run_us", (long long)j->run_us);
}

/* The job's arguments and output names from Python lists, into *refs and
 * *outn allocated here (freed by the caller, also on failure). */
static int job_args(PyObject *args, PyObject *names, int nreturns, sm_array_ref **refs,
                    const char ***outn, int *nargs)
{
    Py_ssize_t n = PySequence_Size(args), m = PySequence_Size(names);
    if (n < 0 || m < 0 || n > INT_MAX / 2)
        return -1;
    size_t no = (size_t)(m > nreturns ? m : nreturns); /* the library reads nreturns names */
    *refs = PyMem_Calloc((size_t)(n ? n : 1), sizeof **refs);
    *outn = PyMem_Calloc(no ? no : 1, sizeof **outn);
    if (!*refs || !*outn) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_GetItem(args, i);
        int bad = !o || to_ref(o, &(*refs)[i]);
        Py_XDECREF(o); /* names stay alive in the caller's list */
        if (bad)
            return -1;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *o = PySequence_GetItem(names, i);
        (*outn)[i] = o && o != Py_None ? PyUnicode_AsUTF8(o) : NULL;
        Py_XDECREF(o);
        if (PyErr_Occurred())
            return -1;
    }
    *nargs = (int)n;
    return 0;
}

/* submit(text, file, entry, args, out_names, check_vma) -> job id */
static PyObject *Client_submit(Client *self, PyObject *a)
{
    const char *text, *file, *entry;
    PyObject *args, *names;
    int check_vma;
    if (!Client_ok(self) ||
        !PyArg_ParseTuple(a, "szzOOp", &text, &file, &entry, &args, &names, &check_vma))
        return NULL;
    sm_array_ref *refs = NULL;
    const char **outn = NULL;
    PyObject *res = NULL;
    int n;
    sm_program *p = NULL;
    if (!(p = parse_program(text, file, entry, check_vma)) ||
        job_args(args, names, sm_program_nreturns(p), &refs, &outn, &n))
        goto out;
    sm_job_id id = {0};
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e =
        sm_job_submit(self->c, p, n, refs, outn, check_vma, 0, &id, err, sizeof err);
    Py_END_ALLOW_THREADS res = e ? raise_err(e, err) : PyLong_FromUnsignedLongLong(id.v);
out:
    sm_program_free(p);
    PyMem_Free(refs);
    PyMem_Free(outn);
    return res;
}

static PyObject *Client_wait(Client *self, PyObject *a)
{
    unsigned long long id;
    long long timeout_ms;
    if (!Client_ok(self) || !PyArg_ParseTuple(a, "KL", &id, &timeout_ms))
        return NULL;
    sm_job_info j;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e =
        sm_job_wait(self->c, (sm_job_id){id}, timeout_ms, &j, err, sizeof err);
    Py_END_ALLOW_THREADS if (e) return raise_err(e, err);
    PyObject *res = job_info(&j);
    sm_job_info_free(&j);
    return res;
}

static PyObject *Client_cancel(Client *self, PyObject *a)
{
    unsigned long long id;
    if (!Client_ok(self) || !PyArg_ParseTuple(a, "K", &id))
        return NULL;
    sm_job_info j;
    char err[ERRLEN];
    sm_err e;
    Py_BEGIN_ALLOW_THREADS e = sm_job_cancel(self->c, (sm_job_id){id}, &j, err, sizeof err);
    Py_END_ALLOW_THREADS if (e) return raise_err(e, err);
    PyObject *res = job_info(&j);
    sm_job_info_free(&j);
    return res;
}

static PyMethodDef Client_methods[] = {
    {"close", (PyCFunction)Client_close, METH_NOARGS,
     "Closes the connection (once its last SharedBuffer is gone)."},
    {"alloc", (PyCFunction)Client_alloc, METH_VARARGS,
     "alloc(nbytes) -> SharedBuffer: zero-filled memory in a shared-memory segment."},
    {"devices", (PyCFunction)Client_devices, METH_NOARGS, "The workers and their devices."},
    {"mesh_create", (PyCFunction)Client_mesh_create, METH_VARARGS,
     "Creates a mesh; returns it with its device order."},
    {"put", (PyCFunction)Client_put, METH_VARARGS, "Uploads a whole array (buffer protocol)."},
    {"describe", (PyCFunction)Client_describe, METH_VARARGS, "Describes an array."},
    {"get_into", (PyCFunction)Client_get_into, METH_VARARGS,
     "Fetches an array into a writable buffer."},
    {"get_shard", (PyCFunction)Client_get_shard, METH_VARARGS, "Fetches one device's shard."},
    {"list", (PyCFunction)Client_list, METH_NOARGS, "Lists the arrays."},
    {"reshard", (PyCFunction)Client_reshard, METH_VARARGS, "A resharded copy."},
    {"replicate", (PyCFunction)Client_replicate, METH_VARARGS,
     "Keep copies of every block on 1 or 2 distinct workers."},
    {"save", (PyCFunction)Client_save, METH_VARARGS,
     "save(ref, dir) -> (files, bytes): the workers write a checkpoint."},
    {"load", (PyCFunction)Client_load, METH_VARARGS,
     "load(dir, mesh, spec, name) -> info: a checkpoint onto any sharding."},
    {"delete", (PyCFunction)Client_delete, METH_VARARGS, "Deletes an array."},
    {"put_shards", (PyCFunction)Client_put_shards, METH_VARARGS, "One shard per device."},
    {"put_local", (PyCFunction)Client_put_local, METH_VARARGS, "A process's local data."},
    {"submit", (PyCFunction)Client_submit, METH_VARARGS, "Submits a program; returns the job id."},
    {"wait", (PyCFunction)Client_wait, METH_VARARGS, "Waits for a job."},
    {"cancel", (PyCFunction)Client_cancel, METH_VARARGS, "Cancels a job."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_shmap.Client",
    .tp_basicsize = sizeof(Client),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A connection to a shmap coordinator (libshmap's sm_client).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Client_init,
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_methods = Client_methods,
};

/* ---- offline ---- */

/* sharding_info(mesh, spec, shape) -> dict */
static PyObject *sharding_info(PyObject *mod, PyObject *args)
{
    PyObject *mo, *shape;
    const char *spec;
    if (!PyArg_ParseTuple(args, "OsO", &mo, &spec, &shape))
        return NULL;
    sm_mesh m;
    int def;
    sm_pspec p;
    sm_shape g;
    if (to_mesh(mo, &m, &def) || to_spec(spec, &p) || to_shape(shape, &g))
        return NULL;
    sm_sharding s;
    sm_shape ss;
    char err[ERRLEN];
    sm_err e = sm_sharding_init(&s, &m, &p, &g, err, sizeof err);
    if (!e)
        e = sm_sharding_shard_shape(&s, &g, &ss, err, sizeof err);
    if (e)
        return raise_err(e, err);
    sm_device_slice *sl = malloc(sizeof *sl * (size_t)m.ndevices);
    if (!sl)
        return PyErr_NoMemory();
    if ((e = sm_sharding_indices(&s, &g, sl, err, sizeof err))) {
        free(sl);
        return raise_err(e, err);
    }
    PyObject *devs = PyList_New(m.ndevices);
    for (int k = 0; devs && k < m.ndevices; k++)
        PyList_SET_ITEM(devs, k,
                        Py_BuildValue("{s:i,s:N,s:i}", "device", (int)sl[k].device, "index",
                                      from_index(&sl[k].index), "replica_id", sl[k].replica_id));
    free(sl);
    char ty[512];
    sm_strbuf d = {0};
    sm_sharding_diagram(&s, &g, &d, err, sizeof err);
    PyObject *res = Py_BuildValue(
        "{s:N,s:N,s:O,s:s,s:s}", "shard_shape", from_shape(&ss), "devices", devs,
        "fully_replicated", sm_sharding_is_fully_replicated(&s, &g) ? Py_True : Py_False, "type",
        sm_sharding_type_str(&s, SM_F32, &g, ty, sizeof ty), "diagram", sm_strbuf_str(&d));
    sm_strbuf_free(&d);
    return res;
}

/* program_check(text, file, entry, check_vma[, types_only]) -> {name, kind,
 * describe, printed, lowered, types: [(type, dtype, shape, line, weak,
 * name or None) per value], outputs: [...], params: [(name, dtype, shape,
 * spec)]}. types_only skips the lowering and the printed forms
 * (describe, printed and lowered are ""): what a trace needs after each op. */
static PyObject *program_check(PyObject *mod, PyObject *args)
{
    const char *text, *file, *entry;
    int check_vma, types_only = 0;
    if (!PyArg_ParseTuple(args, "szzp|p", &text, &file, &entry, &check_vma, &types_only))
        return NULL;
    sm_program *p = parse_program(text, file, entry, check_vma), *l = NULL;
    if (!p)
        return NULL;
    char err[ERRLEN], ty[512], sp[512];
    sm_strbuf d = {0}, pr = {0}, lw = {0};
    if (p->kind == SM_PROG_JIT && !types_only) {
        sm_err e = sm_lower(p, NULL, &l, err, sizeof err);
        if (e) {
            sm_program_free(p);
            return raise_err(e, err);
        }
        sm_program_print(l, &lw);
    }
    if (!types_only) {
        sm_program_describe(p, &d);
        sm_program_print(p, &pr);
    }
    PyObject *types = PyList_New(p->nvalues), *outs = PyList_New(p->nreturns),
             *params = PyList_New(p->nparams);
    for (int v = 0; types && v < p->nvalues; v++) {
        const sm_ir_value *x = &p->values[v];
        PyList_SET_ITEM(types, v,
                        Py_BuildValue("(ssNiOz)", sm_program_value_type(p, v, ty, sizeof ty),
                                      sm_dtype_name(x->dtype), from_shape(&x->shape),
                                      x->def >= 0 ? p->ops[x->def].line : 0,
                                      x->weak ? Py_True : Py_False, x->name));
    }
    for (int k = 0; outs && k < p->nreturns; k++)
        PyList_SET_ITEM(outs, k,
                        Py_BuildValue("(ssNs)", sm_program_output_type(p, k, ty, sizeof ty),
                                      sm_dtype_name(p->values[p->returns[k]].dtype),
                                      from_shape(&p->out_global[k]),
                                      sm_pspec_format(&p->out_specs[k], sp, sizeof sp)));
    for (int i = 0; params && i < p->nparams; i++)
        PyList_SET_ITEM(params, i,
                        Py_BuildValue("(ssNs)", p->params[i].name,
                                      sm_dtype_name(p->params[i].dtype),
                                      from_shape(&p->params[i].global),
                                      sm_pspec_format(&p->params[i].spec, sp, sizeof sp)));
    PyObject *res = Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:N,s:N,s:N,s:N}", "name", p->name, "kind",
                                  p->kind == SM_PROG_JIT ? "jit" : "shard_map", "describe",
                                  sm_strbuf_str(&d), "printed", sm_strbuf_str(&pr), "lowered",
                                  l ? sm_strbuf_str(&lw) : "", "types", types, "outputs", outs,
                                  "params", params, "mesh", from_mesh(&p->mesh));
    sm_strbuf_free(&d);
    sm_strbuf_free(&pr);
    sm_strbuf_free(&lw);
    sm_program_free(p);
    sm_program_free(l);
    return res;
}

/* op_table() -> [(name, signature, min_operands, max_operands, jit_only)]: the ops
 * a program calls (a while loop's four ops are written as `while`, not called) */
static PyObject *op_table(PyObject *mod, PyObject *unused)
{
    PyObject *l = PyList_New(0);
    for (int k = 0; l && k < SM_OP_COUNT; k++) {
        int mn, mx;
        if (sm_op_loop((sm_op_kind)k))
            continue;
        sm_op_arity((sm_op_kind)k, &mn, &mx);
        PyObject *row =
            Py_BuildValue("(ssiiO)", sm_op_name((sm_op_kind)k), sm_op_signature((sm_op_kind)k), mn,
                          mx, sm_op_global_only((sm_op_kind)k) ? Py_True : Py_False);
        if (!row || PyList_Append(l, row)) {
            Py_XDECREF(row);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(row);
    }
    return l;
}

static PyMethodDef module_methods[] = {
    {"sharding_info", sharding_info, METH_VARARGS,
     "Shard shape, index map, replicas, type string and diagram of a sharding."},
    {"program_check", program_check, METH_VARARGS,
     "Parses and verifies a program's text; its types, printed and lowered forms."},
    {"op_table", op_table, METH_NOARGS, "The op table: (name, signature, min, max, jit_only)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_shmap", "The C core of the shmap Python package.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__shmap(void)
{
    if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&SharedBufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    sm_py_error = PyErr_NewException("_shmap.Error", NULL, NULL);
    Py_INCREF(&ClientType);
    if (PyModule_AddObject(m, "Client", (PyObject *)&ClientType) < 0 ||
        PyModule_AddObject(m, "Error", sm_py_error) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
