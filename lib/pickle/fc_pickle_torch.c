/*
 * fc_pickle_torch.c - the torch rebuild functions the weights-only profile
 * interprets (tensors, parameters, storages, devices) and the opcodes that
 * build objects (REDUCE, NEWOBJ, BUILD, BINPERSID, GLOBAL).
 */
#include "fc_pickle.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_endian.h"
#include "fc_error.h"
#include "fc_pickle_internal.h"
#include "fc_strmap.h"

/* ---- interpreting calls: torch (weights-only profile) ---- */

static int fc_vm_bad_args(struct fc_vm *vm, const char *fn, const char *why)
{
    return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: %s", fn, why);
}

static int fc_vm_get_int(const struct fc_pv *v, int64_t *out)
{
    if (v->kind == FC_PV_INT) {
        *out = v->u.i;
        return 0;
    }
    if (v->kind == FC_PV_BOOL) {
        *out = v->u.b;
        return 0;
    }
    return -1;
}

/* A sequence of ints (shape/stride) into dst; ndim into *ndim. */
static int fc_vm_dims(struct fc_vm *vm, const char *fn, const char *what_arg, const struct fc_pv *v,
                      int64_t *dst, int *ndim)
{
    if (v->kind != FC_PV_TUPLE && v->kind != FC_PV_LIST)
        return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: %s is a %s, not a tuple", fn,
                         what_arg, fc_pv_kind_name(v->kind));
    if (v->u.seq.n > FC_MAX_DIMS)
        return fc_vm_err(vm, FC_EFORMAT, "tensor with %zu dimensions (at most %d supported)",
                         v->u.seq.n, FC_MAX_DIMS);
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const struct fc_pv *x = v->u.seq.items[i];
        if (x->kind != FC_PV_INT)
            return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: %s[%zu] is a %s, not an int",
                             fn, what_arg, i, fc_pv_kind_name(x->kind));
        if (x->u.i < 0)
            return fc_vm_err(vm, FC_ECORRUPT,
                             "malformed call of %s: %s[%zu] is negative (%" PRId64 ")", fn,
                             what_arg, i, x->u.i);
        dst[i] = x->u.i;
    }
    *ndim = (int)v->u.seq.n;
    return FC_OK;
}

static int fc_vm_bool_arg(struct fc_vm *vm, const char *fn, const struct fc_pv *v, int *out)
{
    int64_t i;
    if (fc_vm_get_int(v, &i) < 0 || (i != 0 && i != 1))
        return fc_vm_bad_args(vm, fn, "requires_grad is not a bool");
    *out = (int)i;
    return FC_OK;
}

/* The dtype named by a torch.<dtype> GLOBAL. */
static int fc_vm_dtype_arg(struct fc_vm *vm, const char *fn, const struct fc_pv *v, fc_dtype *out)
{
    const struct fc_sym_entry *e;
    if (v->kind != FC_PV_GLOBAL || fc_sym_of(v, &e) != SYM_DTYPE)
        return fc_vm_bad_args(vm, fn, "dtype argument is not a torch dtype");
    const fc_dtype dt = fc_dtype_from_torch_name(v->u.global.name);
    if (dt == FC_DTYPE_INVALID) {
        return fc_vm_err(vm, FC_EFORMAT, "tensor of dtype torch.%.128s is not supported",
                         v->u.global.name);
    }
    *out = dt;
    return FC_OK;
}

/* Check the metadata argument of v2/v3: a dict, and empty. */
static int fc_vm_tensor_metadata(struct fc_vm *vm, const char *fn, const struct fc_pv *md)
{
    if (md->kind == FC_PV_NONE)
        return FC_OK;
    if (md->kind != FC_PV_DICT)
        return fc_vm_bad_args(vm, fn, "metadata is not a dict");
    if (md->u.dict.n == 0)
        return FC_OK;
    struct fc_buf r = FC_BUF_INIT(256);
    const int rc = fc_pv_repr(&r, md, 80);
    const int ret =
        fc_vm_err(vm, FC_EFORMAT, "tensor with conj/neg bit (metadata %.*s) is not supported",
                  rc == FC_OK ? (int)r.len : 1, rc == FC_OK ? (const char *)r.data : "?");
    fc_buf_release(&r);
    return ret;
}

static int fc_vm_backward_hooks(struct fc_vm *vm, const char *fn, const struct fc_pv *h)
{
    if (h->kind != FC_PV_DICT && h->kind != FC_PV_NONE)
        return fc_vm_bad_args(vm, fn, "backward_hooks is not a dict");
    return FC_OK;
}

/* A TENSOR node from a storage node and the view arguments. */
static int fc_vm_make_tensor(struct fc_vm *vm, const char *fn, const struct fc_pv *storage,
                             const struct fc_pv *offset, const struct fc_pv *size,
                             const struct fc_pv *stride, fc_dtype dtype, struct fc_pv **out)
{
    if (storage->kind != FC_PV_STORAGE_)
        return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: storage is a %s, not a storage",
                         fn, fc_pv_kind_name(storage->kind));
    struct fc_pv *t = fc_vm_node(vm, FC_PV_TENSOR);
    if (t == NULL)
        return FC_ENOMEM;
    struct fc_pv_tensor *tt = &t->u.tensor;
    memcpy(tt, &storage->u.tensor, sizeof(*tt));
    int64_t off;
    if (offset->kind != FC_PV_INT || (off = offset->u.i) < 0)
        return fc_vm_bad_args(vm, fn, "storage_offset is not a non-negative int");
    int nd_size = 0, nd_stride = 0;
    FC_TRY(fc_vm_dims(vm, fn, "size", size, tt->desc.shape, &nd_size));
    FC_TRY(fc_vm_dims(vm, fn, "stride", stride, tt->desc.stride, &nd_stride));
    if (nd_size != nd_stride)
        return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: %d sizes but %d strides", fn,
                         nd_size, nd_stride);
    tt->desc.ndim = nd_size;
    tt->desc.storage_offset = off;
    tt->desc.dtype = dtype;
    *out = t;
    return FC_OK;
}

static struct fc_pv *fc_vm_tensor_copy(struct fc_vm *vm, const struct fc_pv *src)
{
    struct fc_pv *t = fc_vm_node(vm, FC_PV_TENSOR);
    if (t != NULL)
        memcpy(&t->u.tensor, &src->u.tensor, sizeof(t->u.tensor));
    return t;
}

static int fc_vm_call_torch(struct fc_vm *vm, struct fc_pv *callable, enum fc_sym sym,
                            const struct fc_sym_entry *entry, struct fc_pv *args, int nested,
                            struct fc_pv **out);

/*
 * A DTensor of a torch_checkpointing rank file: _rebuild_from_type_v2(
 * _rebuild_wrapper_subclass, DTensor, args, state) is the tensor
 * '_local_tensor' of its state (GLOBAL admitted DTensor only for
 * FC_PICKLE_WEIGHTS_DTENSOR).
 */
static int fc_vm_dtensor(struct fc_vm *vm, const char *fn, const struct fc_pv *func,
                         const struct fc_pv *state, struct fc_pv **out)
{
    if (!fc_pv_is_global(func, "torch._utils", "_rebuild_wrapper_subclass"))
        return fc_vm_bad_args(vm, fn, "a DTensor not rebuilt by _rebuild_wrapper_subclass");
    /* The state is the object's __dict__, or (__dict__ or None, slot values) for slots. */
    const struct fc_pv *local = fc_pv_dict_get(state, "_local_tensor");
    for (size_t i = 0; local == NULL && state->kind == FC_PV_TUPLE && i < state->u.seq.n; i++)
        local = fc_pv_dict_get(state->u.seq.items[i], "_local_tensor");
    if (local == NULL || local->kind != FC_PV_TENSOR)
        return fc_vm_bad_args(vm, fn, "DTensor state has no '_local_tensor' tensor");
    *out = fc_vm_tensor_copy(vm, local);
    return *out == NULL ? FC_ENOMEM : FC_OK;
}

/* _rebuild_* helpers; args already checked to be a tuple. */
static int fc_vm_rebuild(struct fc_vm *vm, enum fc_sym sym, const char *fn,
                         const struct fc_pv *args, int nested, struct fc_pv **out)
{
    const size_t n = args->u.seq.n;
    switch (sym) {
    case SYM_REBUILD_TENSOR: {
        if (n != 4)
            return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: %zu arguments, want 4", fn, n);
        const struct fc_pv *st = fc_arg(args, 0);
        return fc_vm_make_tensor(
            vm, fn, st, fc_arg(args, 1), fc_arg(args, 2), fc_arg(args, 3),
            st->kind == FC_PV_STORAGE_ ? st->u.tensor.storage_dtype : FC_DTYPE_INVALID, out);
    }
    case SYM_REBUILD_V2:
    case SYM_REBUILD_V3: {
        const size_t base = sym == SYM_REBUILD_V2 ? 6 : 7;
        if (n != base && n != base + 1)
            return fc_vm_err(vm, FC_ECORRUPT,
                             "malformed call of %s: %zu arguments, want %zu or %zu", fn, n, base,
                             base + 1);
        const struct fc_pv *st = fc_arg(args, 0);
        fc_dtype dt = st->kind == FC_PV_STORAGE_ ? st->u.tensor.storage_dtype : FC_DTYPE_INVALID;
        if (sym == SYM_REBUILD_V3)
            FC_TRY(fc_vm_dtype_arg(vm, fn, fc_arg(args, 6), &dt));
        if (n == base + 1)
            FC_TRY(fc_vm_tensor_metadata(vm, fn, fc_arg(args, base)));
        FC_TRY(fc_vm_backward_hooks(vm, fn, fc_arg(args, 5)));
        int rg = 0;
        FC_TRY(fc_vm_bool_arg(vm, fn, fc_arg(args, 4), &rg));
        FC_TRY(fc_vm_make_tensor(vm, fn, st, fc_arg(args, 1), fc_arg(args, 2), fc_arg(args, 3), dt,
                                 out));
        (*out)->u.tensor.requires_grad = rg;
        return FC_OK;
    }
    case SYM_REBUILD_PARAM:
    case SYM_REBUILD_PARAM_STATE: {
        const size_t want = sym == SYM_REBUILD_PARAM ? 3 : 4;
        if (n != want)
            return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: %zu arguments, want %zu", fn,
                             n, want);
        if (fc_arg(args, 0)->kind != FC_PV_TENSOR)
            return fc_vm_bad_args(vm, fn, "data is not a tensor");
        int rg = 0;
        FC_TRY(fc_vm_bool_arg(vm, fn, fc_arg(args, 1), &rg));
        FC_TRY(fc_vm_backward_hooks(vm, fn, fc_arg(args, 2)));
        struct fc_pv *t = fc_vm_tensor_copy(vm, fc_arg(args, 0));
        if (t == NULL)
            return FC_ENOMEM;
        t->u.tensor.requires_grad = rg;
        t->u.tensor.is_parameter = 1;
        *out = t;
        return FC_OK;
    }
    case SYM_REBUILD_DEVICE_FROM_CPU: {
        if (n != 4)
            return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: %zu arguments, want 4", fn, n);
        const struct fc_pv *data = fc_arg(args, 0);
        if (data->kind != FC_PV_TENSOR)
            return fc_vm_bad_args(vm, fn, "data is not a tensor");
        fc_dtype dt;
        FC_TRY(fc_vm_dtype_arg(vm, fn, fc_arg(args, 1), &dt));
        if (dt != data->u.tensor.desc.dtype)
            return fc_vm_err(
                vm, FC_EFORMAT,
                "device tensor of dtype %s saved from a %s CPU tensor is not supported",
                fc_dtype_name(dt), fc_dtype_name(data->u.tensor.desc.dtype));
        int rg = 0;
        FC_TRY(fc_vm_bool_arg(vm, fn, fc_arg(args, 3), &rg));
        struct fc_pv *t = fc_vm_tensor_copy(vm, data);
        if (t == NULL)
            return FC_ENOMEM;
        t->u.tensor.requires_grad = rg;
        *out = t;
        return FC_OK;
    }
    case SYM_REBUILD_FROM_TYPE_V2: {
        if (nested)
            return fc_vm_bad_args(vm, fn, "nested _rebuild_from_type_v2");
        if (n != 4)
            return fc_vm_err(vm, FC_ECORRUPT, "malformed call of %s: %zu arguments, want 4", fn, n);
        struct fc_pv *func = fc_arg(args, 0), *inner = fc_arg(args, 2);
        const struct fc_pv *type = fc_arg(args, 1);
        const struct fc_sym_entry *fe, *te;
        const enum fc_sym fsym = fc_sym_of(func, &fe);
        const enum fc_sym tsym = fc_sym_of(type, &te);
        if (tsym == SYM_DTENSOR_TYPE)
            return fc_vm_dtensor(vm, fn, func, fc_arg(args, 3), out);
        if (tsym != SYM_TENSOR_TYPE && tsym != SYM_PARAMETER_TYPE) {
            char name[256] = "?";
            if (type->kind == FC_PV_GLOBAL)
                fc_global_full(type, name, sizeof(name));
            return fc_vm_err(vm, FC_EFORMAT, "tensor subclass '%s' is not supported", name);
        }
        if (inner->kind != FC_PV_TUPLE)
            return fc_vm_bad_args(vm, fn, "args is not a tuple");
        if (func->kind != FC_PV_GLOBAL || fsym == SYM_NOT_ALLOWED)
            return fc_vm_bad_args(vm, fn, "func is not a tensor rebuild function");
        struct fc_pv *t = NULL;
        FC_TRY(fc_vm_call_torch(vm, func, fsym, fe, inner, 1, &t));
        if (t->kind != FC_PV_TENSOR)
            return fc_vm_bad_args(vm, fn, "func did not rebuild a tensor");
        if (tsym == SYM_PARAMETER_TYPE && !t->u.tensor.is_parameter) {
            t = fc_vm_tensor_copy(vm, t);
            if (t == NULL)
                return FC_ENOMEM;
            t->u.tensor.is_parameter = 1;
        }
        *out = t;
        return FC_OK;
    }
    default: return fc_vm_bad_args(vm, fn, "not a rebuild function");
    }
}

/* torch.device('cuda', 0) -> "cuda:0"; torch.device('cpu') -> "cpu". */
static int fc_vm_device(struct fc_vm *vm, const struct fc_pv *args, struct fc_pv **out)
{
    const size_t n = args->u.seq.n;
    if (n < 1 || n > 2 || fc_arg(args, 0)->kind != FC_PV_STR)
        return fc_vm_bad_args(vm, "torch.device", "want (str[, int])");
    const struct fc_pv *type = fc_arg(args, 0);
    if (n == 1 || fc_arg(args, 1)->kind == FC_PV_NONE) {
        *out = fc_vm_strnode(vm, FC_PV_STR, type->u.str.s, type->u.str.len);
        return *out == NULL ? FC_ENOMEM : FC_OK;
    }
    const struct fc_pv *idx = fc_arg(args, 1);
    if (idx->kind != FC_PV_INT || idx->u.i < 0)
        return fc_vm_bad_args(vm, "torch.device", "index is not a non-negative int");
    char num[32];
    const int k = snprintf(num, sizeof(num), ":%" PRId64, idx->u.i);
    const size_t tl = type->u.str.len;
    char *s = fc_arena_alloc(vm, tl + (size_t)k + 1);
    if (s == NULL)
        return FC_ENOMEM;
    memcpy(s, type->u.str.s, tl);
    memcpy(s + tl, num, (size_t)k + 1);
    struct fc_pv *v = fc_vm_node(vm, FC_PV_STR);
    if (v == NULL)
        return FC_ENOMEM;
    v->u.str.s = s;
    v->u.str.len = tl + (size_t)k;
    *out = v;
    return FC_OK;
}

static struct fc_pv *fc_vm_call_node(struct fc_vm *vm, enum fc_pv_kind kind, struct fc_pv *callable,
                                     struct fc_pv *args)
{
    struct fc_pv *v = fc_vm_node(vm, kind);
    if (v != NULL) {
        v->u.call.callable = callable;
        v->u.call.args = args;
    }
    return v;
}

/* REDUCE of an allowlisted global in the weights-only profile. */
static int fc_vm_call_torch(struct fc_vm *vm, struct fc_pv *callable, enum fc_sym sym,
                            const struct fc_sym_entry *entry, struct fc_pv *args, int nested,
                            struct fc_pv **out)
{
    char fn[256];
    fc_global_full(callable, fn, sizeof(fn));
    *out = NULL;
    switch (sym) {
    case SYM_ORDEREDDICT:
    case SYM_COUNTER:
    case SYM_SET:
    case SYM_BYTEARRAY:
    case SYM_CODECS_ENCODE:
        FC_TRY(fc_vm_stdlib_call(vm, sym, args, out));
        if (*out == NULL)
            return fc_vm_err(vm, FC_EFORMAT, "call of %s with these arguments is not supported",
                             fn);
        return FC_OK;
    case SYM_SIZE: {
        if (args->u.seq.n == 0) {
            *out = fc_vm_node(vm, FC_PV_TUPLE);
            return *out == NULL ? FC_ENOMEM : FC_OK;
        }
        const struct fc_pv *t = fc_arg(args, 0);
        if (args->u.seq.n != 1 || (t->kind != FC_PV_TUPLE && t->kind != FC_PV_LIST))
            return fc_vm_bad_args(vm, fn, "want one tuple of ints");
        for (size_t i = 0; i < t->u.seq.n; i++)
            if (t->u.seq.items[i]->kind != FC_PV_INT)
                return fc_vm_bad_args(vm, fn, "want one tuple of ints");
        *out = fc_vm_seq_from(vm, FC_PV_TUPLE, t->u.seq.items, t->u.seq.n);
        return *out == NULL ? FC_ENOMEM : FC_OK;
    }
    case SYM_DEVICE: {
        /* Validate, but keep the call: a torch.device must come back as one when re-pickled. */
        struct fc_pv *ignored;
        FC_TRY(fc_vm_device(vm, args, &ignored));
        *out = fc_vm_call_node(vm, FC_PV_CALL, callable, args);
        return *out == NULL ? FC_ENOMEM : FC_OK;
    }
    case SYM_PARAMETER_TYPE: {
        /* Parameter(data[, requires_grad]) */
        const size_t n = args->u.seq.n;
        if (n < 1 || n > 2 || fc_arg(args, 0)->kind != FC_PV_TENSOR)
            return fc_vm_bad_args(vm, fn, "want (tensor[, requires_grad])");
        int rg = 1;
        if (n == 2)
            FC_TRY(fc_vm_bool_arg(vm, fn, fc_arg(args, 1), &rg));
        struct fc_pv *t = fc_vm_tensor_copy(vm, fc_arg(args, 0));
        if (t == NULL)
            return FC_ENOMEM;
        t->u.tensor.requires_grad = rg;
        t->u.tensor.is_parameter = 1;
        *out = t;
        return FC_OK;
    }
    case SYM_TENSOR_TYPE:
    case SYM_TENSOR_CLASS:
    case SYM_STORAGE_CLASS:
    case SYM_STORAGE_UNTYPED:
    case SYM_DTYPE: return fc_vm_err(vm, FC_EFORMAT, "call of %s is not supported", fn);
    case SYM_REBUILD_TENSOR:
    case SYM_REBUILD_V2:
    case SYM_REBUILD_V3:
    case SYM_REBUILD_PARAM:
    case SYM_REBUILD_PARAM_STATE:
    case SYM_REBUILD_FROM_TYPE_V2:
    case SYM_REBUILD_DEVICE_FROM_CPU: return fc_vm_rebuild(vm, sym, fn, args, nested, out);
    case SYM_UNCONVERTIBLE:
        return fc_vm_err(vm, FC_EFORMAT, "%s (%s) cannot be converted", entry->what, fn);
    case SYM_ALLOWED:
        if (nested)
            return fc_vm_bad_args(vm, "torch._tensor._rebuild_from_type_v2",
                                  "func is not a tensor rebuild function");
        *out = fc_vm_call_node(vm, FC_PV_CALL, callable, args);
        return *out == NULL ? FC_ENOMEM : FC_OK;
    case SYM_FROZENSET:
    case SYM_BYTES:
    case SYM_NOT_ALLOWED:
    default: return fc_vm_err(vm, FC_EFORMAT, "call of %s is not allowed", fn);
    }
}

/* ---- the opcodes that build objects ---- */

int fc_op_reduce(struct fc_vm *vm)
{
    struct fc_pv *args, *callable, *res = NULL;
    FC_TRY(fc_vm_pop(vm, &args));
    FC_TRY(fc_vm_top(vm, &callable));
    if (args->kind != FC_PV_TUPLE)
        return fc_vm_err(vm, FC_ECORRUPT, "REDUCE argument is a %s, not a tuple",
                         fc_pv_kind_name(args->kind));
    if (vm->profile == FC_PICKLE_WEIGHTS_ONLY) {
        const struct fc_sym_entry *e;
        if (callable->kind != FC_PV_GLOBAL)
            return fc_vm_err(vm, FC_EFORMAT,
                             "REDUCE of a %s (only allowlisted globals may be called)",
                             fc_pv_kind_name(callable->kind));
        const enum fc_sym sym = fc_sym_of(callable, &e);
        FC_TRY(fc_vm_call_torch(vm, callable, sym, e, args, 0, &res));
    } else {
        const enum fc_sym sym = fc_sym_symbolic(callable);
        if (sym != SYM_NOT_ALLOWED)
            FC_TRY(fc_vm_stdlib_call(vm, sym, args, &res));
        if (res == NULL)
            res = fc_vm_call_node(vm, FC_PV_CALL, callable, args);
        if (res == NULL)
            return FC_ENOMEM;
    }
    res->offset = vm->op_off;
    vm->stack[vm->sp - 1] = res;
    return FC_OK;
}

/* NEWOBJ / NEWOBJ_EX: cls.__new__(cls, *args). */
int fc_op_newobj(struct fc_vm *vm, struct fc_pv *cls, struct fc_pv *args)
{
    if (args->kind != FC_PV_TUPLE)
        return fc_vm_err(vm, FC_ECORRUPT, "%s argument is a %s, not a tuple", fc_vm_opname(vm),
                         fc_pv_kind_name(args->kind));
    if (vm->profile == FC_PICKLE_SYMBOLIC)
        return fc_vm_push(vm, fc_vm_call_node(vm, FC_PV_OBJECT, cls, args));
    const struct fc_sym_entry *e;
    const enum fc_sym sym = fc_sym_of(cls, &e);
    char fn[256] = "?";
    if (cls->kind == FC_PV_GLOBAL)
        fc_global_full(cls, fn, sizeof(fn));
    switch (sym) {
    case SYM_PARAMETER_TYPE: {
        struct fc_pv *res = NULL;
        FC_TRY(fc_vm_call_torch(vm, cls, sym, e, args, 0, &res));
        return fc_vm_push(vm, res);
    }
    case SYM_ORDEREDDICT:
    case SYM_COUNTER: {
        struct fc_pv *d = fc_vm_node(vm, FC_PV_DICT);
        if (d != NULL)
            d->u.dict.ordered = sym == SYM_ORDEREDDICT;
        return fc_vm_push(vm, d);
    }
    case SYM_SET: return fc_vm_push(vm, fc_vm_node(vm, FC_PV_SET));
    case SYM_DTENSOR_PART: /* GLOBAL let it through only for FC_PICKLE_WEIGHTS_DTENSOR */
    case SYM_ALLOWED: return fc_vm_push(vm, fc_vm_call_node(vm, FC_PV_OBJECT, cls, args));
    case SYM_NOT_ALLOWED:
        return fc_vm_err(vm, FC_EFORMAT, "NEWOBJ of a %s (only allowlisted classes)",
                         fc_pv_kind_name(cls->kind));
    default: return fc_vm_err(vm, FC_EFORMAT, "NEWOBJ of %s is not supported", fn);
    }
}

int fc_op_build(struct fc_vm *vm)
{
    struct fc_pv *state, *inst;
    FC_TRY(fc_vm_pop(vm, &state));
    FC_TRY(fc_vm_top(vm, &inst));
    struct fc_pv **slot = NULL;
    if (inst->kind == FC_PV_DICT) {
        if (vm->profile == FC_PICKLE_WEIGHTS_ONLY && !inst->u.dict.ordered)
            return fc_vm_err(vm, FC_EFORMAT,
                             "BUILD on a dict (only OrderedDict and allowlisted "
                             "objects take state)");
        if (vm->profile == FC_PICKLE_WEIGHTS_ONLY && state->kind != FC_PV_DICT)
            return fc_vm_err(vm, FC_ECORRUPT, "BUILD state of an OrderedDict is a %s, not a dict",
                             fc_pv_kind_name(state->kind));
        slot = &inst->u.dict.state;
    } else if (inst->kind == FC_PV_CALL || inst->kind == FC_PV_OBJECT) {
        slot = &inst->u.call.state;
    } else {
        return fc_vm_err(vm, FC_EFORMAT, "BUILD on a %s is not supported",
                         fc_pv_kind_name(inst->kind));
    }
    if (*slot != NULL && vm->profile == FC_PICKLE_WEIGHTS_ONLY)
        return fc_vm_err(vm, FC_EFORMAT, "second BUILD on the same %s",
                         fc_pv_kind_name(inst->kind));
    *slot = state;
    if (vm->hooks != NULL && vm->hooks->built != NULL && inst->kind == FC_PV_OBJECT &&
        !inst->shared) {
        const int rc = vm->hooks->built(vm->hooks->ctx, inst);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            *slot = NULL;
            fc_vm_free_tree(vm, state, 0);
        }
    }
    return FC_OK;
}

/* BINPERSID ('storage', <storage class>, key, location, numel) -> storage node. */
int fc_op_binpersid(struct fc_vm *vm)
{
    struct fc_pv *pid;
    FC_TRY(fc_vm_pop(vm, &pid));
    if (pid->kind != FC_PV_TUPLE)
        return fc_vm_err(vm, FC_EFORMAT, "persistent id is a %s, not a ('storage', ...) tuple",
                         fc_pv_kind_name(pid->kind));
    const size_t n = pid->u.seq.n;
    const struct fc_pv *tag = n > 0 ? fc_arg(pid, 0) : NULL;
    if (tag == NULL || tag->kind != FC_PV_STR || strcmp(tag->u.str.s, "storage") != 0 ||
        tag->u.str.len != 7)
        return fc_vm_err(vm, FC_EFORMAT, "persistent id is not a ('storage', ...) tuple");
    if (n != 5)
        return fc_vm_err(vm, FC_EFORMAT, "storage persistent id with %zu fields (want 5)", n);
    const struct fc_pv *type = fc_arg(pid, 1), *key = fc_arg(pid, 2), *loc = fc_arg(pid, 3),
                       *numel = fc_arg(pid, 4);
    const struct fc_sym_entry *e;
    const enum fc_sym sym = fc_sym_of(type, &e);
    struct fc_pv *s = fc_vm_node(vm, FC_PV_STORAGE_);
    if (s == NULL)
        return FC_ENOMEM;
    struct fc_pv_tensor *st = &s->u.tensor;
    if (sym == SYM_STORAGE_UNTYPED) {
        st->untyped_storage = 1;
        st->storage_dtype = FC_DTYPE_UINT8;
    } else if (sym == SYM_STORAGE_CLASS) {
        st->storage_dtype = fc_dtype_from_storage_class(type->u.global.name);
        if (st->storage_dtype == FC_DTYPE_INVALID) {
            char name[256];
            fc_global_full(type, name, sizeof(name));
            return fc_vm_err(vm, FC_EFORMAT, "storage of type %s (quantized) cannot be converted",
                             name);
        }
    } else {
        return fc_vm_err(vm, FC_ECORRUPT, "storage persistent id: type is not a storage class");
    }
    if (key->kind != FC_PV_STR || key->u.str.len == 0 || strlen(key->u.str.s) != key->u.str.len)
        return fc_vm_err(vm, FC_ECORRUPT, "storage persistent id: key is not a non-empty str");
    if (loc->kind != FC_PV_STR || strlen(loc->u.str.s) != loc->u.str.len)
        return fc_vm_err(vm, FC_ECORRUPT, "storage persistent id: location is not a str");
    if (numel->kind != FC_PV_INT || numel->u.i < 0)
        return fc_vm_err(vm, FC_ECORRUPT, "storage persistent id: numel is not a non-negative int");
    st->storage_key = key->u.str.s;
    st->location = loc->u.str.s;
    st->storage_numel = (uint64_t)numel->u.i;
    st->desc.dtype = st->storage_dtype;
    return fc_vm_push(vm, s);
}

/* Record a global's name once (fc_pickle_globals()), in the order pickles first name them. */
static int fc_vm_note_global(struct fc_vm *vm, const struct fc_pv *g)
{
    struct fc_pickle *p = vm->p;
    const size_t ml = strlen(g->u.global.module), nl = strlen(g->u.global.name);
    char *key = fc_arena_alloc(vm, ml + nl + 2);
    if (key == NULL)
        return FC_ENOMEM;
    memcpy(key, g->u.global.module, ml);
    key[ml] = ' ';
    memcpy(key + ml + 1, g->u.global.name, nl + 1);
    if (fc_strmap_get(&p->global_names, key, NULL))
        return FC_OK;
    if (p->nglobals == p->globals_alloc) {
        const size_t n = p->globals_alloc == 0 ? 8 : p->globals_alloc * 2;
        const struct fc_pv **a = fc_reallocarray(p->globals, n, sizeof(*a));
        if (a == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", vm->what);
        p->globals = a;
        p->globals_alloc = n;
    }
    FC_TRY(fc_strmap_put(&p->global_names, key, p->nglobals, NULL));
    p->globals[p->nglobals++] = g;
    return FC_OK;
}

int fc_op_global(struct fc_vm *vm, const unsigned char *mod, size_t mlen, const unsigned char *name,
                 size_t nlen)
{
    if (mlen == 0 || nlen == 0 || memchr(mod, 0, mlen) != NULL || memchr(name, 0, nlen) != NULL ||
        fc_utf8_invalid_at(mod, mlen, 0) != mlen || fc_utf8_invalid_at(name, nlen, 0) != nlen)
        return fc_vm_err(vm, FC_ECORRUPT, "%s with an empty or invalid name", fc_vm_opname(vm));
    char *m = fc_vm_strdup(vm, mod, mlen);
    if (m == NULL)
        return FC_ENOMEM;
    char *nm = fc_vm_strdup(vm, name, nlen);
    if (nm == NULL)
        return FC_ENOMEM;
    const char *rm = m, *rn = nm;
    fc_rename_global(&rm, &rn);
    struct fc_pv *g = fc_vm_node(vm, FC_PV_GLOBAL);
    if (g == NULL)
        return FC_ENOMEM;
    g->u.global.module = rm;
    g->u.global.name = rn;
    FC_TRY(fc_vm_note_global(vm, g));
    if (vm->profile == FC_PICKLE_WEIGHTS_ONLY) {
        const struct fc_sym_entry *e;
        const enum fc_sym sym = fc_sym_of(g, &e);
        const int dt = sym == SYM_DTENSOR_TYPE || sym == SYM_DTENSOR_PART;
        if (sym == SYM_NOT_ALLOWED || sym == SYM_FROZENSET || sym == SYM_BYTES ||
            (dt && !vm->dtensor)) {
            char full[256];
            fc_global_full(g, full, sizeof(full));
            if (strncmp(full, "torch.distributed.", 18) == 0)
                return fc_vm_err(vm, FC_EFORMAT,
                                 "unsupported global '%s' (DTensor/DeviceMesh objects cannot be "
                                 "converted; save a full state dict)",
                                 full);
            return fc_vm_err(vm, FC_EFORMAT,
                             "unsupported global '%s' (torch.load(weights_only=True) would refuse "
                             "it too)",
                             full);
        }
    }
    return fc_vm_push(vm, g);
}
