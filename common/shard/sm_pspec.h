/* sm_pspec: JAX's PartitionSpec. One entry per leading array dimension;
 * each entry is None or a tuple of mesh axis names (one name is a 1-tuple;
 * the first name is the most significant). Value type. */
#ifndef SM_PSPEC_H
#define SM_PSPEC_H

#include "sm_err.h"
#include "sm_mesh.h"
#include "sm_shape.h"

typedef struct {
    int naxes;         /* 0: None / () — not sharded */
    int is_tuple;      /* written as a tuple: ('x',) or ('x','y') or () */
    int unconstrained; /* P.UNCONSTRAINED (no axes): left to the service; only a
                        * with_sharding_constraint takes it (JAX's) */
    char axes[SM_MAX_AXES][SM_AXIS_NAME_MAX];
} sm_pspec_entry;

typedef struct {
    int nentries;
    sm_pspec_entry e[SM_MAX_RANK];
    /* unreduced={'y'}: mesh axes over which each device holds a partial sum
     * of the value (JAX's unreduced sharding; in the order written). Programs
     * use them inside; arrays are never unreduced. */
    int nunreduced;
    char unreduced[SM_MAX_AXES][SM_AXIS_NAME_MAX];
    /* unreduced_kind=max: how the devices' partial results make the value
     * (JAX's UnreducedKind): SM_UK_SUM (the default), their max or min */
    int unreduced_kind;
    /* reduced={'x'}: mesh axes over which the value is replicated but its
     * cotangent is unreduced (JAX's reduced sharding). The data is laid out
     * as if replicated over them; only the types (and grad) differ. */
    int nreduced;
    char reduced[SM_MAX_AXES][SM_AXIS_NAME_MAX];
} sm_pspec;

enum { SM_UK_SUM = 0, SM_UK_MAX = 1, SM_UK_MIN = 2 };
/* "sum", "max", "min"; NULL for another kind. */
const char *sm_pspec_kind_name(int kind);
/* SM_UK_* of "sum", "max", "min" (or "UnreducedKind.max"), -1 otherwise. */
int sm_pspec_kind_of(const char *s, size_t n);

/* Parses P('i', None), P(('x','y'),), P(), P(None, 'j'),
 * PartitionSpec('i'), P('x', None, unreduced={'y'}), P(None, reduced={'x'}),
 * with single or double
 * quotes and any spacing. Syntax errors are SM_EINVAL naming the column and
 * what was expected. Does not check against a mesh. */
sm_err sm_pspec_parse(const char *text, sm_pspec *out, char *err, size_t errlen);
/* Formats as P('i', None) / P(('x', 'y'),) / P(); returns buf. Entries
 * are written canonically as JAX's PartitionSpec stores them: () as None,
 * ('x',) as 'x'. */
char *sm_pspec_format(const sm_pspec *p, char *buf, size_t len);
/* 1 if the specs have the same entries in canonical form (so ('x',) equals
 * 'x' and () equals None, but P('x') and P('x', None) differ, as in JAX) and
 * the same sets of unreduced and reduced axes. */
int sm_pspec_equal(const sm_pspec *a, const sm_pspec *b);

/* Checks the spec against a mesh only: every axis known to the mesh, no axis
 * used twice, no unreduced or reduced axis also partitioning, none both. */
sm_err sm_pspec_check_mesh(const sm_pspec *p, const sm_mesh *m, char *err, size_t errlen);
/* 1 if some entry is P.UNCONSTRAINED. */
int sm_pspec_has_unconstrained(const sm_pspec *p);
/* Full check against mesh and global shape: sm_pspec_check_mesh, then the
 * shape is sane (rank 0..SM_MAX_RANK, no negative dimension), then the
 * spec is not longer than the rank (a scalar needs P()), then every sharded
 * dimension divisible (the message names the dimension, its size, the axes
 * and the factor). what names the value in messages (e.g. "argument 'a'"),
 * may be NULL. */
sm_err sm_pspec_check(const sm_pspec *p, const sm_mesh *m, const sm_shape *shape, const char *what,
                      char *err, size_t errlen);

/* Number of shards along dimension dim (product of its axes' sizes; 1 for
 * dimensions past the spec). Assumes sm_pspec_check_mesh passed. */
int64_t sm_pspec_dim_factor(const sm_pspec *p, const sm_mesh *m, int dim);
/* 1 if mesh axis name is one of the spec's unreduced axes. */
int sm_pspec_is_unreduced(const sm_pspec *p, const char *name);
/* 1 if mesh axis name is one of the spec's reduced axes. */
int sm_pspec_is_reduced(const sm_pspec *p, const char *name);
/* Refuses a spec with unreduced axes where the data comes whole (an upload,
 * a reshard's target): SM_EUNIMPLEMENTED naming what. Only a program's
 * results hold partial sums. */
sm_err sm_pspec_check_reduced(const sm_pspec *p, const char *what, char *err, size_t errlen);

#endif
