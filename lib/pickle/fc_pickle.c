/*
 * fc_pickle.c - loading a pickle: the memo pre-scan, the run of the VM, the
 * post-STOP check (cycles, depth, dict key merging), the result and its tree
 * helpers.  The VM's parts are listed in fc_pickle_internal.h.
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

/* ---- after STOP: cycles, depth, dict key merging ---- */

struct fc_keyref {
    const struct fc_pv *k;
    size_t idx;
    int cls;
    int64_t num;
};

/* Keys Python would merge: 0 str, 1 bytes, 2 int/bool (True == 1), 3 None; -1 others. */
static int fc_key_class(const struct fc_pv *k, int64_t *num)
{
    switch (k->kind) {
    case FC_PV_STR: return 0;
    case FC_PV_BYTES: return 1;
    case FC_PV_INT: *num = k->u.i; return 2;
    case FC_PV_BOOL: *num = k->u.b; return 2;
    case FC_PV_NONE: return 3;
    default: return -1;
    }
}

static int fc_keyref_cmp(const void *pa, const void *pb)
{
    const struct fc_keyref *a = pa, *b = pb;
    if (a->cls != b->cls)
        return a->cls < b->cls ? -1 : 1;
    if (a->cls == 0 || a->cls == 1) {
        const size_t la = a->k->u.str.len, lb = b->k->u.str.len;
        if (la != lb)
            return la < lb ? -1 : 1;
        const int r = memcmp(a->k->u.str.s, b->k->u.str.s, la);
        if (r != 0)
            return r;
    } else if (a->cls == 2 && a->num != b->num) {
        return a->num < b->num ? -1 : 1;
    }
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int fc_dict_merge_keys(struct fc_vm *vm, struct fc_pv *d)
{
    const size_t n = d->u.dict.n;
    if (n < 2)
        return FC_OK;
    struct fc_keyref *refs = fc_calloc(n, sizeof(*refs));
    unsigned char *dead = fc_calloc(n, 1);
    if (refs == NULL || dead == NULL) {
        fc_free(refs);
        fc_free(dead);
        return fc_error_set(FC_ENOMEM, "%s: out of memory checking dict keys", vm->what);
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t num = 0;
        const int cls = fc_key_class(d->u.dict.keys[i], &num);
        if (cls >= 0)
            refs[m++] = (struct fc_keyref){d->u.dict.keys[i], i, cls, num};
    }
    qsort(refs, m, sizeof(*refs), fc_keyref_cmp);
    size_t ndead = 0;
    for (size_t g = 0; g < m;) {
        size_t e = g + 1;
        while (e < m && refs[e].cls == refs[g].cls) {
            struct fc_keyref x = refs[e], y = refs[g];
            x.idx = y.idx = 0;
            if (fc_keyref_cmp(&x, &y) != 0)
                break;
            e++;
        }
        if (e - g > 1) {
            d->u.dict.vals[refs[g].idx] = d->u.dict.vals[refs[e - 1].idx];
            for (size_t k = g + 1; k < e; k++)
                dead[refs[k].idx] = 1;
            ndead += e - g - 1;
        }
        g = e;
    }
    if (ndead > 0) {
        size_t w = 0;
        for (size_t i = 0; i < n; i++) {
            if (!dead[i]) {
                d->u.dict.keys[w] = d->u.dict.keys[i];
                d->u.dict.vals[w] = d->u.dict.vals[i];
                w++;
            }
        }
        d->u.dict.n = w;
    }
    fc_free(refs);
    fc_free(dead);
    return FC_OK;
}

static struct fc_pv *fc_pv_child(const struct fc_pv *v, size_t i)
{
    switch (v->kind) {
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET: return i < v->u.seq.n ? v->u.seq.items[i] : NULL;
    case FC_PV_DICT:
        if (i < v->u.dict.n)
            return v->u.dict.keys[i];
        if (i < 2 * v->u.dict.n)
            return v->u.dict.vals[i - v->u.dict.n];
        return i == 2 * v->u.dict.n ? v->u.dict.state : NULL;
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        if (i == 0)
            return v->u.call.callable;
        if (i == 1)
            return v->u.call.args;
        return i == 2 ? v->u.call.state : NULL;
    default: return NULL;
    }
}

#define FC_HEIGHT_GRAY UINT32_MAX

/* Iterative DFS from the root: heights, cycle and depth checks, key merging. */
static int fc_vm_finish(struct fc_vm *vm, struct fc_pv *root)
{
    struct frame {
        struct fc_pv *v;
        size_t next;
        uint32_t h;
        uint64_t n; /* expanded nodes so far: this one plus its children's */
    } *st = fc_calloc(FC_PICKLE_MAX_NESTING + 1, sizeof(*st));
    if (st == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", vm->what);
    int rc = FC_OK;
    size_t depth = 0;
    /* ->expanded is 32 bits; inputs are at most 1 GiB, so this cap binds only on bombs */
    const uint64_t max_expanded =
        FC_PICKLE_MAX_EXPANDED(vm->len) < UINT32_MAX ? FC_PICKLE_MAX_EXPANDED(vm->len) : UINT32_MAX;
    st[0] = (struct frame){root, 0, 1, 1};
    root->height = FC_HEIGHT_GRAY;
    for (;;) {
        struct frame *f = &st[depth];
        if (f->v->kind == FC_PV_STORAGE_) {
            vm->op_off = f->v->offset;
            rc = fc_vm_err(vm, FC_EFORMAT, "a bare storage (not a tensor) cannot be converted");
            goto done;
        }
        struct fc_pv *c = fc_pv_child(f->v, f->next);
        if (c == NULL) {
            if (f->v->kind == FC_PV_DICT && f->v->u.dict.n > 1) {
                rc = fc_dict_merge_keys(vm, f->v);
                if (rc < 0)
                    goto done;
                /* merged-away keys and values no longer count */
                f->h = 1;
                for (size_t i = 0;; i++) {
                    const struct fc_pv *k = fc_pv_child(f->v, i);
                    if (k == NULL)
                        break;
                    if (f->h < k->height + 1)
                        f->h = k->height + 1;
                }
            }
            if (f->h > FC_PICKLE_MAX_NESTING) {
                /* a long path through shared subtrees the DFS did not enter again */
                vm->op_off = f->v->offset;
                rc = fc_vm_err(vm, FC_EFORMAT, "containers nested deeper than %d levels",
                               FC_PICKLE_MAX_NESTING);
                goto done;
            }
            f->v->height = f->h;
            f->v->expanded = (uint32_t)f->n; /* <= max_expanded, checked as children add up */
            if (depth == 0)
                break;
            depth--;
            if (st[depth].h < f->h + 1)
                st[depth].h = f->h + 1;
            st[depth].n += f->n;
            st[depth].next++;
            if (st[depth].n > max_expanded)
                goto bomb;
            continue;
        }
        if (c->height == FC_HEIGHT_GRAY) {
            vm->op_off = c->offset;
            rc = fc_vm_err(vm, FC_EFORMAT, "the unpickled object contains itself (a cycle)");
            goto done;
        }
        if (c->height != 0) {
            if (f->h < c->height + 1)
                f->h = c->height + 1;
            f->n += c->expanded;
            f->next++;
            if (f->n > max_expanded)
                goto bomb;
            continue;
        }
        if (depth + 1 >= FC_PICKLE_MAX_NESTING) {
            vm->op_off = c->offset;
            rc = fc_vm_err(vm, FC_EFORMAT, "containers nested deeper than %d levels",
                           FC_PICKLE_MAX_NESTING);
            goto done;
        }
        c->height = FC_HEIGHT_GRAY;
        st[++depth] = (struct frame){c, 0, 1, 1};
    }
    goto done;
bomb:
    vm->op_off = st[depth].v->offset;
    rc = fc_vm_err(vm, FC_ECORRUPT,
                   "shared values expand to more than %" PRIu64
                   " objects (memo references repeated beyond any real checkpoint)",
                   max_expanded);
done:
    fc_free(st);
    return rc;
}

/* ---- public: load ---- */

/*
 * Pass 1: walk the opcodes without running them, to learn which memo keys a
 * GET fetches (memo_used) and whether DUP aliases a node.  Stops at STOP, at
 * an opcode the profile refuses or at a truncated argument: the VM stops there
 * too, with the message.  Keys are numbered as the VM numbers them.
 */
static int fc_vm_prescan(struct fc_vm *vm)
{
    size_t pos = 0;
    while (pos < vm->len) {
        const size_t op_off = pos;
        FC_TRY(fc_vm_window(vm, op_off, pos + 1));
        const unsigned op = vm->data[pos++];
        if (!fc_op_allowed(op, vm->profile) || op == OP_STOP)
            break;
        struct fc_op_arg arg;
        const int rc = fc_op_decode(vm, op, op_off, &pos, &arg);
        if (rc != FC_OK) {
            if (rc < 0)
                return rc;
            break;
        }
        const unsigned flags = fc_ops[op].flags;
        if (op == OP_DUP)
            vm->aliased = 1;
        if (!(flags & (OPF_PUT | OPF_GET)))
            continue;
        uint64_t key = vm->memo_n;
        if (op == OP_MEMOIZE) {
            if (vm->memo_n >= vm->memo_limit)
                break;
        } else if (fc_ops[op].arg == ARG_LINE) {
            int64_t k = -1;
            if (fc_parse_dec(arg.s, arg.n, &k) < 0 || k < 0)
                break;
            key = (uint64_t)k;
        } else {
            key = arg.u;
        }
        if (key >= vm->memo_limit)
            break;
        if (flags & OPF_PUT)
            FC_TRY(fc_vm_memo_mark_set(vm, key));
        else if (fc_bit_test(vm->memo_used, vm->memo_words, key))
            FC_TRY(fc_bit_set(&vm->memo_multi, &vm->multi_words, key));
        else
            FC_TRY(fc_bit_set(&vm->memo_used, &vm->memo_words, key));
    }
    vm->window_to = 0; /* the run reads from the start again */
    /* Slots for the fetched keys; the VM sets keys again from scratch. */
    vm->memo_rank = fc_calloc(vm->memo_words + 1, sizeof(*vm->memo_rank));
    if (vm->memo_rank == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", vm->what);
    size_t used = 0;
    for (size_t w = 0; w < vm->memo_words; w++) {
        vm->memo_rank[w] = (uint32_t)used;
        used += (size_t)__builtin_popcountll(vm->memo_used[w]);
    }
    vm->memo = fc_calloc(used + 1, sizeof(*vm->memo));
    if (vm->memo == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", vm->what);
    if (vm->memo_set != NULL)
        memset(vm->memo_set, 0, vm->set_words * sizeof(*vm->memo_set));
    vm->memo_n = 0;
    return FC_OK;
}

static void fc_vm_release(struct fc_vm *vm)
{
    fc_free(vm->stack);
    fc_free(vm->marks);
    fc_free(vm->memo);
    fc_free(vm->memo_used);
    fc_free(vm->memo_multi);
    fc_free(vm->memo_set);
    fc_free(vm->memo_rank);
}

int fc_pickle_load(struct fc_pickle **out, const unsigned char *data, size_t len,
                   enum fc_pickle_profile profile, const char *what)
{
    return fc_pickle_load_hooked(out, data, len, profile, what, NULL);
}

int fc_pickle_load_hooked(struct fc_pickle **out, const unsigned char *data, size_t len,
                          enum fc_pickle_profile profile, const char *what,
                          const struct fc_pickle_hooks *hooks)
{
    struct fc_vm vm;
    int rc = FC_OK, done = 0;
    *out = NULL;
    memset(&vm, 0, sizeof(vm));
    vm.what = what != NULL ? what : "pickle";
    vm.data = data;
    vm.len = len;
    vm.dtensor = profile == FC_PICKLE_WEIGHTS_DTENSOR;
    if (vm.dtensor)
        profile = FC_PICKLE_WEIGHTS_ONLY;
    vm.profile = profile;
    vm.hooks = profile == FC_PICKLE_SYMBOLIC ? hooks : NULL;
    vm.memo_limit = len > FC_PICKLE_MAX_MEMO ? len : FC_PICKLE_MAX_MEMO;
    if (len > FC_PICKLE_MAX_INPUT)
        return fc_vm_err(&vm, FC_ECORRUPT, "pickle of %zu bytes is larger than the %zu byte limit",
                         len, (size_t)FC_PICKLE_MAX_INPUT);
    vm.p = fc_calloc(1, sizeof(*vm.p));
    if (vm.p == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", vm.what);
    vm.p->arena_cap = FC_PICKLE_MAX_ARENA(len);
    FC_TRY_GOTO(fc_vm_prescan(&vm), rc, fail);
    while (!done) {
        if (vm.pos >= vm.len) {
            vm.op_off = vm.len;
            rc = fc_vm_err(&vm, FC_ECORRUPT, "truncated pickle: no STOP opcode");
            goto fail;
        }
        vm.op_off = vm.pos;
        FC_TRY_GOTO(fc_vm_window(&vm, vm.pos, vm.pos + 1), rc, fail);
        vm.op = data[vm.pos++];
        if (!fc_op_allowed(vm.op, profile)) {
            if (fc_ops[vm.op].name != NULL)
                rc = fc_vm_err(&vm, FC_EFORMAT, "pickle opcode 0x%02x (%s) is not allowed", vm.op,
                               fc_ops[vm.op].name);
            else
                rc = fc_vm_err(&vm, FC_ECORRUPT, "unknown pickle opcode 0x%02x", vm.op);
            goto fail;
        }
        FC_TRY_GOTO(fc_vm_decode_arg(&vm), rc, fail);
        FC_TRY_GOTO(fc_vm_step(&vm, &done), rc, fail);
    }
    FC_TRY_GOTO(fc_vm_finish(&vm, vm.root), rc, fail);
    fc_vm_release(&vm);
    *out = vm.p;
    return FC_OK;
fail:
    fc_vm_release(&vm);
    fc_pickle_free(vm.p);
    return rc;
}

const struct fc_pv *fc_pickle_root(const struct fc_pickle *p)
{
    return p != NULL ? p->root : NULL;
}

size_t fc_pickle_globals(const struct fc_pickle *p, const struct fc_pv *const **out)
{
    *out = p->globals;
    return p->nglobals;
}

void fc_pickle_free(struct fc_pickle *p)
{
    if (p == NULL)
        return;
    fc_free(p->globals);
    fc_strmap_release(&p->global_names);
    struct fc_arena_chunk *c = p->chunks;
    while (c != NULL) {
        struct fc_arena_chunk *next = c->next;
        fc_free(c);
        c = next;
    }
    fc_free(p);
}

/* ---- tree helpers ---- */

const struct fc_pv *fc_pv_dict_get(const struct fc_pv *dict, const char *key)
{
    if (dict == NULL || dict->kind != FC_PV_DICT || key == NULL)
        return NULL;
    const size_t kl = strlen(key);
    for (size_t i = dict->u.dict.n; i-- > 0;) {
        const struct fc_pv *k = dict->u.dict.keys[i];
        if (k->kind == FC_PV_STR && k->u.str.len == kl && memcmp(k->u.str.s, key, kl) == 0)
            return dict->u.dict.vals[i];
    }
    return NULL;
}

int fc_pv_is_global(const struct fc_pv *v, const char *module, const char *name)
{
    return v != NULL && v->kind == FC_PV_GLOBAL && strcmp(v->u.global.module, module) == 0 &&
           strcmp(v->u.global.name, name) == 0;
}
