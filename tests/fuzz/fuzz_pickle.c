/*
 * fuzz_pickle.c - the pickle VM in both profiles, and the writer round trip.
 *
 * Every input is loaded with FC_PICKLE_WEIGHTS_ONLY and FC_PICKLE_SYMBOLIC.
 * A load either fails with a known code and *out == NULL, or gives a tree
 * whose heights are consistent.  When the tree is a plain value (no tensors),
 * it is written with fc_pw_value(), loaded again with the same profile, and
 * the two trees must be equal (structure and repr); writing the second tree
 * must give the same bytes (zstd's simple_round_trip idea).  Any violation
 * aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_buf.h"
#include "fc_error.h"
#include "fc_pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_OUT_CAP ((size_t)8 << 20)  /* memo sharing can blow a DAG up when written */
#define FUZZ_REPR_CAP ((size_t)1 << 16)
#define FUZZ_VISITS 200000

static void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz_pickle: %s (%s)\n", what, fc_error_last());
    abort();
}

static int fuzz_same_str(const struct fc_pv *a, const struct fc_pv *b)
{
    return a->u.str.len == b->u.str.len && memcmp(a->u.str.s, b->u.str.s, a->u.str.len) == 0;
}

/* Structural equality; *budget bounds the work on DAGs that share subtrees. */
static int fuzz_equal(const struct fc_pv *a, const struct fc_pv *b, int depth, long *budget)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (--*budget < 0 || depth > FC_PICKLE_MAX_NESTING + 1)
        return 1;
    if (a->kind != b->kind || a->height != b->height)
        return 0;
    switch (a->kind) {
    case FC_PV_NONE: return 1;
    case FC_PV_BOOL: return a->u.b == b->u.b;
    case FC_PV_INT: return a->u.i == b->u.i;
    case FC_PV_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof(double)) == 0;
    case FC_PV_BIGINT:
    case FC_PV_STR:
    case FC_PV_BYTES: return fuzz_same_str(a, b);
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET:
        if (a->u.seq.n != b->u.seq.n)
            return 0;
        for (size_t i = 0; i < a->u.seq.n; i++)
            if (!fuzz_equal(a->u.seq.items[i], b->u.seq.items[i], depth + 1, budget))
                return 0;
        return 1;
    case FC_PV_DICT:
        if (a->u.dict.n != b->u.dict.n || a->u.dict.ordered != b->u.dict.ordered)
            return 0;
        for (size_t i = 0; i < a->u.dict.n; i++)
            if (!fuzz_equal(a->u.dict.keys[i], b->u.dict.keys[i], depth + 1, budget) ||
                !fuzz_equal(a->u.dict.vals[i], b->u.dict.vals[i], depth + 1, budget))
                return 0;
        return fuzz_equal(a->u.dict.state, b->u.dict.state, depth + 1, budget);
    case FC_PV_GLOBAL:
        return strcmp(a->u.global.module, b->u.global.module) == 0 &&
               strcmp(a->u.global.name, b->u.global.name) == 0;
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        return fuzz_equal(a->u.call.callable, b->u.call.callable, depth + 1, budget) &&
               fuzz_equal(a->u.call.args, b->u.call.args, depth + 1, budget) &&
               fuzz_equal(a->u.call.state, b->u.call.state, depth + 1, budget);
    case FC_PV_TENSOR:
    default: return 0; /* never written, never compared */
    }
}

/* Heights as documented: 1 for leaves, 1 + max over the children otherwise. */
static uint32_t fuzz_check_height(const struct fc_pv *v, long *budget)
{
    uint32_t h = 0;
    if (v->height < 1 || v->height > FC_PICKLE_MAX_NESTING)
        fuzz_fail("height out of range");
    if (--*budget < 0)
        return v->height;
    switch (v->kind) {
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET:
        for (size_t i = 0; i < v->u.seq.n; i++)
            if (v->u.seq.items[i]->height > h)
                h = v->u.seq.items[i]->height;
        break;
    case FC_PV_DICT:
        for (size_t i = 0; i < v->u.dict.n; i++) {
            if (v->u.dict.keys[i]->height > h)
                h = v->u.dict.keys[i]->height;
            if (v->u.dict.vals[i]->height > h)
                h = v->u.dict.vals[i]->height;
        }
        if (v->u.dict.state != NULL && v->u.dict.state->height > h)
            h = v->u.dict.state->height;
        (void)fc_pv_dict_get(v, "_metadata");
        break;
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        h = v->u.call.callable->height;
        if (v->u.call.args->kind != FC_PV_TUPLE)
            fuzz_fail("call arguments are not a tuple");
        if (v->u.call.args->height > h)
            h = v->u.call.args->height;
        if (v->u.call.state != NULL && v->u.call.state->height > h)
            h = v->u.call.state->height;
        (void)fc_pv_is_global(v->u.call.callable, "torch", "Size");
        break;
    case FC_PV_TENSOR:
        if (v->u.tensor.desc.ndim < 0 || v->u.tensor.desc.ndim > FC_MAX_DIMS ||
            v->u.tensor.storage_key == NULL || v->u.tensor.location == NULL)
            fuzz_fail("bad tensor node");
        break;
    default: break;
    }
    if (v->height != h + 1)
        fuzz_fail("inconsistent height");
    return v->height;
}

static void fuzz_walk(const struct fc_pv *v, long *budget, int depth)
{
    if (--*budget < 0 || depth > FC_PICKLE_MAX_NESTING)
        return;
    fuzz_check_height(v, budget);
    size_t n = 0;
    switch (v->kind) {
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET:
        for (n = 0; n < v->u.seq.n; n++)
            fuzz_walk(v->u.seq.items[n], budget, depth + 1);
        break;
    case FC_PV_DICT:
        for (n = 0; n < v->u.dict.n; n++) {
            fuzz_walk(v->u.dict.keys[n], budget, depth + 1);
            fuzz_walk(v->u.dict.vals[n], budget, depth + 1);
        }
        if (v->u.dict.state != NULL)
            fuzz_walk(v->u.dict.state, budget, depth + 1);
        break;
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        fuzz_walk(v->u.call.callable, budget, depth + 1);
        fuzz_walk(v->u.call.args, budget, depth + 1);
        if (v->u.call.state != NULL)
            fuzz_walk(v->u.call.state, budget, depth + 1);
        break;
    default: break;
    }
}

static void fuzz_one(const uint8_t *data, size_t size, enum fc_pickle_profile pr)
{
    struct fc_pickle *p = (struct fc_pickle *)1, *q = NULL;
    struct fc_buf r1 = FC_BUF_INIT(FUZZ_REPR_CAP + 16), r2 = FC_BUF_INIT(FUZZ_REPR_CAP + 16);
    struct fc_buf w1 = FC_BUF_INIT(FUZZ_OUT_CAP), w2 = FC_BUF_INIT(FUZZ_OUT_CAP);
    int rc = fc_pickle_load(&p, data, size, pr, "fuzz");
    if (rc < 0) {
        if (p != NULL)
            fuzz_fail("failed load left *out set");
        if (rc != FC_ECORRUPT && rc != FC_EFORMAT && rc != FC_ENOMEM)
            fuzz_fail("unexpected error code");
        if (strncmp(fc_error_last(), "fuzz: offset ", 13) != 0)
            fuzz_fail("error message without what and offset");
        return;
    }
    const struct fc_pv *root = fc_pickle_root(p);
    long budget = FUZZ_VISITS;
    fuzz_walk(root, &budget, 0);
    if (fc_pv_repr(&r1, root, FUZZ_REPR_CAP) < 0)
        fuzz_fail("repr failed");
    if (r1.len > FUZZ_REPR_CAP)
        fuzz_fail("repr longer than its cap");

    /* Plain values round-trip through the writer. */
    if (fc_pw_proto(&w1) < 0)
        fuzz_fail("proto");
    rc = fc_pw_value(&w1, root);
    if (rc == FC_OK)
        rc = fc_pw_stop(&w1);
    if (rc == FC_EINVAL || rc == FC_ENOMEM)
        goto done; /* a tensor, a name with a newline, or too big once the DAG is unshared */
    if (rc < 0)
        fuzz_fail("writer failed");
    rc = fc_pickle_load(&q, w1.data, w1.len, pr, "fuzz-rewrite");
    if (rc < 0)
        fuzz_fail("rewritten pickle does not load");
    budget = FUZZ_VISITS;
    if (!fuzz_equal(root, fc_pickle_root(q), 0, &budget))
        fuzz_fail("round trip changed the tree");
    if (fc_pv_repr(&r2, fc_pickle_root(q), FUZZ_REPR_CAP) < 0)
        fuzz_fail("repr failed");
    if (r1.len != r2.len || memcmp(r1.data, r2.data, r1.len) != 0)
        fuzz_fail("round trip changed the repr");
    if (fc_pw_proto(&w2) < 0 || fc_pw_value(&w2, fc_pickle_root(q)) < 0 || fc_pw_stop(&w2) < 0)
        fuzz_fail("second write failed");
    if (w1.len != w2.len || memcmp(w1.data, w2.data, w1.len) != 0)
        fuzz_fail("writer is not deterministic");
done:
    fc_buf_release(&r1);
    fc_buf_release(&r2);
    fc_buf_release(&w1);
    fc_buf_release(&w2);
    fc_pickle_free(q);
    fc_pickle_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_one(data, size, FC_PICKLE_WEIGHTS_ONLY);
    fuzz_one(data, size, FC_PICKLE_SYMBOLIC);
    return 0;
}
