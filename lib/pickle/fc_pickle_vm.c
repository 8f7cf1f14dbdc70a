/*
 * fc_pickle_vm.c - the pickle VM proper: the arena its nodes live in, node
 * constructors, the stack, marks and memo, and the opcode loop (fc_vm_step).
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

int fc_vm_err(struct fc_vm *vm, int code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return fc_error_set(code, "%s: offset %" PRIu64 ": %s", vm->what, vm->op_off, msg);
}

const char *fc_vm_opname(const struct fc_vm *vm)
{
    const char *n = fc_ops[vm->op & 0xff].name;
    return n != NULL ? n : "?";
}

/* The size class of an n-byte block and the block size it stands for; 0 for n beyond any class. */
static size_t fc_arena_class(size_t n, size_t *block)
{
    if (n <= 8) {
        *block = 8;
        return 0;
    }
    if (n <= FC_ARENA_SMALL) {
        *block = (n + 7) & ~(size_t)7;
        return *block / 8 - 1;
    }
    size_t b = FC_ARENA_SMALL * 2, cls = FC_ARENA_SMALL / 8;
    while (b < n && b <= SIZE_MAX / 2) {
        b *= 2;
        cls++;
    }
    if (b < n)
        return 0;
    *block = b;
    return cls;
}

void *fc_arena_alloc(struct fc_vm *vm, size_t n)
{
    struct fc_pickle *p = vm->p;
    size_t need = 0;
    const size_t cls = fc_arena_class(n, &need);
    if (need < n) {
        fc_vm_err(vm, FC_ENOMEM, "allocation of %zu bytes is too large", n);
        return NULL;
    }
    if (p->free_blocks[cls] != NULL) {
        void *r = p->free_blocks[cls];
        memcpy(&p->free_blocks[cls], r, sizeof(void *));
        return r;
    }
    struct fc_arena_chunk *c = p->chunks;
    if (c != NULL && c->size - c->used >= need) {
        void *r = (unsigned char *)c + FC_ARENA_HDR + c->used;
        c->used += need;
        return r;
    }
    const size_t size = need > FC_ARENA_CHUNK / 4 ? need : FC_ARENA_CHUNK;
    size_t total;
    if (fc_add_size(size, FC_ARENA_HDR, &total) < 0 || total > p->arena_cap ||
        p->arena_bytes > p->arena_cap - total) {
        fc_vm_err(vm, FC_ENOMEM, "pickle needs more than %zu bytes of memory", p->arena_cap);
        return NULL;
    }
    struct fc_arena_chunk *nc = fc_malloc(total);
    if (nc == NULL) {
        fc_vm_err(vm, FC_ENOMEM, "out of memory (%zu bytes)", total);
        return NULL;
    }
    p->arena_bytes += total;
    nc->size = size;
    nc->used = need;
    if (size != FC_ARENA_CHUNK && c != NULL) {
        /* A dedicated chunk: keep filling the current one. */
        nc->next = c->next;
        c->next = nc;
    } else {
        nc->next = c;
        p->chunks = nc;
    }
    return (unsigned char *)nc + FC_ARENA_HDR;
}

/* Give back a block of n bytes (the n it was allocated with) for reuse; NULL is ignored. */
static void fc_arena_free(struct fc_vm *vm, void *block, size_t n)
{
    size_t size;
    if (block == NULL)
        return;
    const size_t cls = fc_arena_class(n, &size);
    memcpy(block, &vm->p->free_blocks[cls], sizeof(void *));
    vm->p->free_blocks[cls] = block;
}

static size_t fc_pv_node_size(enum fc_pv_kind kind)
{
    const size_t hdr = offsetof(struct fc_pv, u);
    const struct fc_pv *z = NULL;
    switch (kind) {
    case FC_PV_NONE:
    case FC_PV_BOOL: return hdr + sizeof(z->u.b);
    case FC_PV_INT: return hdr + sizeof(z->u.i);
    case FC_PV_FLOAT: return hdr + sizeof(z->u.f);
    case FC_PV_BIGINT:
    case FC_PV_STR:
    case FC_PV_BYTES: return hdr + sizeof(z->u.str);
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET: return hdr + sizeof(z->u.seq);
    case FC_PV_DICT: return hdr + sizeof(z->u.dict);
    case FC_PV_GLOBAL: return hdr + sizeof(z->u.global);
    case FC_PV_CALL:
    case FC_PV_OBJECT: return hdr + sizeof(z->u.call);
    case FC_PV_TENSOR:
    default: return hdr + sizeof(z->u.tensor);
    }
}

struct fc_pv *fc_vm_node(struct fc_vm *vm, enum fc_pv_kind kind)
{
    const size_t n = fc_pv_node_size(kind);
    struct fc_pv *v = fc_arena_alloc(vm, n);
    if (v == NULL)
        return NULL;
    memset(v, 0, n);
    v->kind = kind;
    v->offset = vm->op_off;
    return v;
}

/* Copy n bytes into the arena, NUL-terminated. */
char *fc_vm_strdup(struct fc_vm *vm, const void *s, size_t n)
{
    size_t total;
    if (fc_add_size(n, 1, &total) < 0) {
        fc_vm_err(vm, FC_ENOMEM, "string too long");
        return NULL;
    }
    char *d = fc_arena_alloc(vm, total);
    if (d == NULL)
        return NULL;
    if (n > 0)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

struct fc_pv *fc_vm_strnode(struct fc_vm *vm, enum fc_pv_kind kind, const void *s, size_t n)
{
    struct fc_pv *v = fc_vm_node(vm, kind);
    if (v == NULL)
        return NULL;
    char *d = fc_vm_strdup(vm, s, n);
    if (d == NULL)
        return NULL;
    v->u.str.s = d;
    v->u.str.len = n;
    return v;
}

struct fc_pv *fc_vm_int(struct fc_vm *vm, int64_t i)
{
    struct fc_pv *v = fc_vm_node(vm, FC_PV_INT);
    if (v != NULL)
        v->u.i = i;
    return v;
}

/* Append to a LIST/TUPLE/SET node (arena arrays, doubling). */
static int fc_vm_seq_push(struct fc_vm *vm, struct fc_pv *seq, struct fc_pv *item)
{
    if (seq->u.seq.n >= FC_PICKLE_MAX_CONTAINER)
        return fc_vm_err(vm, FC_ECORRUPT, "container with more than %zu items",
                         (size_t)FC_PICKLE_MAX_CONTAINER);
    if (seq->u.seq.n == seq->u.seq.alloc) {
        const size_t na = seq->u.seq.alloc < 4 ? 8 : seq->u.seq.alloc * 2;
        struct fc_pv **items = fc_arena_alloc(vm, na * sizeof(*items));
        if (items == NULL)
            return FC_ENOMEM;
        if (seq->u.seq.n > 0)
            memcpy(items, seq->u.seq.items, seq->u.seq.n * sizeof(*items));
        fc_arena_free(vm, seq->u.seq.items, seq->u.seq.alloc * sizeof(*items));
        seq->u.seq.items = items;
        seq->u.seq.alloc = na;
    }
    seq->u.seq.items[seq->u.seq.n++] = item;
    return FC_OK;
}

int fc_vm_dict_push(struct fc_vm *vm, struct fc_pv *d, struct fc_pv *k, struct fc_pv *v)
{
    if (d->u.dict.n >= FC_PICKLE_MAX_CONTAINER)
        return fc_vm_err(vm, FC_ECORRUPT, "dict with more than %zu items",
                         (size_t)FC_PICKLE_MAX_CONTAINER);
    if (d->u.dict.n == d->u.dict.alloc) {
        const size_t na = d->u.dict.alloc < 4 ? 8 : d->u.dict.alloc * 2;
        struct fc_pv **keys = fc_arena_alloc(vm, na * sizeof(*keys));
        if (keys == NULL)
            return FC_ENOMEM;
        struct fc_pv **vals = fc_arena_alloc(vm, na * sizeof(*vals));
        if (vals == NULL)
            return FC_ENOMEM;
        if (d->u.dict.n > 0) {
            memcpy(keys, d->u.dict.keys, d->u.dict.n * sizeof(*keys));
            memcpy(vals, d->u.dict.vals, d->u.dict.n * sizeof(*vals));
        }
        fc_arena_free(vm, d->u.dict.keys, d->u.dict.alloc * sizeof(*keys));
        fc_arena_free(vm, d->u.dict.vals, d->u.dict.alloc * sizeof(*vals));
        d->u.dict.keys = keys;
        d->u.dict.vals = vals;
        d->u.dict.alloc = na;
    }
    d->u.dict.keys[d->u.dict.n] = k;
    d->u.dict.vals[d->u.dict.n] = v;
    d->u.dict.n++;
    return FC_OK;
}

/* A LIST/TUPLE/SET node holding a copy of items[0..n). */
struct fc_pv *fc_vm_seq_from(struct fc_vm *vm, enum fc_pv_kind kind, struct fc_pv *const *items,
                             size_t n)
{
    struct fc_pv *v = fc_vm_node(vm, kind);
    if (v == NULL)
        return NULL;
    if (n > 0) {
        struct fc_pv **a = fc_arena_alloc(vm, n * sizeof(*a));
        if (a == NULL)
            return NULL;
        memcpy(a, items, n * sizeof(*a));
        v->u.seq.items = a;
        v->u.seq.n = n;
        v->u.seq.alloc = n;
    }
    return v;
}

/* ---- stack, marks, memo ---- */

static size_t fc_vm_base(const struct fc_vm *vm)
{
    return vm->nmarks > 0 ? vm->marks[vm->nmarks - 1] : 0;
}

int fc_vm_push(struct fc_vm *vm, struct fc_pv *v)
{
    if (v == NULL)
        return FC_ENOMEM; /* the constructor set the message */
    if (vm->sp == vm->stack_alloc) {
        if (vm->sp >= FC_PICKLE_MAX_STACK)
            return fc_vm_err(vm, FC_ECORRUPT, "pickle stack deeper than %zu entries",
                             (size_t)FC_PICKLE_MAX_STACK);
        size_t na = vm->stack_alloc < 64 ? 64 : vm->stack_alloc * 2;
        if (na > FC_PICKLE_MAX_STACK)
            na = FC_PICKLE_MAX_STACK;
        struct fc_pv **s = fc_reallocarray(vm->stack, na, sizeof(*s));
        if (s == NULL)
            return fc_vm_err(vm, FC_ENOMEM, "out of memory growing the pickle stack");
        vm->stack = s;
        vm->stack_alloc = na;
    }
    vm->stack[vm->sp++] = v;
    return FC_OK;
}

/* Number of items above the innermost MARK. */
static size_t fc_vm_avail(const struct fc_vm *vm)
{
    return vm->sp - fc_vm_base(vm);
}

static int fc_vm_underflow(struct fc_vm *vm, size_t need)
{
    return fc_vm_err(vm, FC_ECORRUPT, "pickle stack underflow: %s needs %zu item%s, %zu there",
                     fc_vm_opname(vm), need, need == 1 ? "" : "s", fc_vm_avail(vm));
}

int fc_vm_pop(struct fc_vm *vm, struct fc_pv **out)
{
    if (fc_vm_avail(vm) == 0)
        return fc_vm_underflow(vm, 1);
    *out = vm->stack[--vm->sp];
    return FC_OK;
}

int fc_vm_top(struct fc_vm *vm, struct fc_pv **out)
{
    if (fc_vm_avail(vm) == 0)
        return fc_vm_underflow(vm, 1);
    *out = vm->stack[vm->sp - 1];
    return FC_OK;
}

/* Close the innermost MARK: its items are stack[*start .. vm->sp), left in place. */
static int fc_vm_pop_mark(struct fc_vm *vm, size_t *start)
{
    if (vm->nmarks == 0)
        return fc_vm_err(vm, FC_ECORRUPT, "%s without a MARK", fc_vm_opname(vm));
    *start = vm->marks[--vm->nmarks];
    return FC_OK;
}

/*
 * Memo keys are refused at or beyond max(FC_PICKLE_MAX_MEMO, input length):
 * Python numbers memo entries 0, 1, 2, ... (len(memo)) and each costs at
 * least one opcode byte, so larger keys only come from a hostile or foreign
 * writer, and the bitmaps stay within a bit per input byte.  (A DCP
 * .metadata of 100k chunks has more than 2^20 entries.)
 */
int fc_bit_test(const uint64_t *bits, size_t nwords, uint64_t k)
{
    return k / 64 < nwords && (bits[k / 64] >> (k % 64) & 1) != 0;
}

int fc_bit_set(uint64_t **bits, size_t *nwords, uint64_t k)
{
    if (k / 64 >= *nwords) {
        size_t nw = *nwords < 16 ? 16 : *nwords;
        while (nw <= k / 64)
            nw *= 2;
        uint64_t *b = fc_reallocarray(*bits, nw, sizeof(*b));
        if (b == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory growing the pickle memo");
        memset(b + *nwords, 0, (nw - *nwords) * sizeof(*b));
        *bits = b;
        *nwords = nw;
    }
    (*bits)[k / 64] |= (uint64_t)1 << (k % 64);
    return FC_OK;
}

/* Record that key is set (MEMOIZE numbers keys by how many are set). */
int fc_vm_memo_mark_set(struct fc_vm *vm, uint64_t key)
{
    if (key >= vm->memo_limit)
        return fc_vm_err(vm, FC_ECORRUPT, "memo index %" PRIu64 " out of range (limit %zu)", key,
                         vm->memo_limit);
    if (fc_bit_test(vm->memo_set, vm->set_words, key))
        return FC_OK;
    vm->memo_n++;
    return fc_bit_set(&vm->memo_set, &vm->set_words, key);
}

/* The memo's slot for a fetched key. */
static struct fc_pv **fc_vm_memo_slot(struct fc_vm *vm, uint64_t key)
{
    const uint64_t below = vm->memo_used[key / 64] & (((uint64_t)1 << (key % 64)) - 1);
    return &vm->memo[vm->memo_rank[key / 64] + (size_t)__builtin_popcountll(below)];
}

/*
 * Reference counts of memo-held nodes live in ->expanded until the post-STOP
 * check computes the real expanded counts (it reads them only from nodes it
 * has finished).
 */
static int fc_vm_memo_put(struct fc_vm *vm, uint64_t key, struct fc_pv *v)
{
    FC_TRY(fc_vm_memo_mark_set(vm, key));
    if (fc_bit_test(vm->memo_used, vm->memo_words, key)) {
        struct fc_pv **slot = fc_vm_memo_slot(vm, key);
        struct fc_pv *old = *slot;
        if (!v->shared) {
            v->shared = 1;
            v->expanded = 1; /* its place on the stack, soon in a container */
        }
        v->expanded++; /* the memo's hold */
        *slot = v;
        fc_vm_free_tree(vm, old, 0); /* the memo lets go of the value it replaces */
    }
    return FC_OK;
}

static int fc_vm_memo_get(struct fc_vm *vm, uint64_t key, struct fc_pv **out)
{
    struct fc_pv **slot = fc_bit_test(vm->memo_set, vm->set_words, key) &&
                                  fc_bit_test(vm->memo_used, vm->memo_words, key)
                              ? fc_vm_memo_slot(vm, key)
                              : NULL;
    if (slot != NULL && *slot != NULL) {
        *out = *slot;
        (*out)->expanded++; /* a new place */
        if (!fc_bit_test(vm->memo_multi, vm->multi_words, key)) {
            *slot = NULL; /* the key's only GET: the memo lets go */
            fc_vm_free_tree(vm, *out, 0);
        }
        return FC_OK;
    }
    return fc_vm_err(vm, FC_ECORRUPT, "memo index %" PRIu64 " is not set", key);
}

/* Make data[from, to) readable (hooks->window); a no-op for inputs held whole in memory. */
int fc_vm_window(struct fc_vm *vm, size_t from, size_t to)
{
    if (vm->hooks == NULL || vm->hooks->window == NULL || to <= vm->window_to)
        return FC_OK;
    size_t ready = to;
    FC_TRY(vm->hooks->window(vm->hooks->ctx, from, to, &ready));
    vm->window_to = ready > to ? ready : to;
    return FC_OK;
}

/* Find the '\n' ending the line at data[pos]: *nl its offset, or SIZE_MAX when there is none. */
int fc_vm_find_newline(struct fc_vm *vm, size_t from, size_t pos, size_t *nl)
{
    size_t at = pos;
    while (at < vm->len) {
        const size_t end = vm->len - at > 4096 ? at + 4096 : vm->len;
        FC_TRY(fc_vm_window(vm, from, end));
        const unsigned char *hit = memchr(vm->data + at, '\n', end - at);
        if (hit != NULL) {
            *nl = (size_t)(hit - vm->data);
            return FC_OK;
        }
        at = end;
    }
    *nl = SIZE_MAX;
    return FC_OK;
}

/* ---- the opcode loop ---- */

/* A length-prefixed str or bytes opcode (its argument decoded in vm->arg). */
static int fc_op_string(struct fc_vm *vm, enum fc_pv_kind kind, int strict_utf8)
{
    const unsigned char *s = vm->arg.s;
    const size_t n = vm->arg.n;
    /* surrogates (ED A0..BF) pass except in BINSTRING, as Python's surrogatepass reads them */
    if (kind == FC_PV_STR && fc_utf8_invalid_at(s, n, !strict_utf8) != n)
        return fc_vm_err(vm, FC_ECORRUPT, "%s is not valid UTF-8", fc_vm_opname(vm));
    return fc_vm_push(vm, fc_vm_strnode(vm, kind, s, n));
}

/*
 * Drop one reference to v: free it and everything below it that nothing else
 * holds (a dict item a hook took; a value the memo lets go).  Globals are kept: fc_pickle_globals()
 * lists them. Subtrees deeper than a DCP item are left to the arena (freed with it).
 */
void fc_vm_free_tree(struct fc_vm *vm, struct fc_pv *v, int depth)
{
    if (v == NULL || v->kind == FC_PV_GLOBAL || vm->aliased || depth > 32)
        return;
    if (v->shared && --v->expanded > 0)
        return; /* still held elsewhere */
    switch (v->kind) {
    case FC_PV_BIGINT:
    case FC_PV_STR:
    case FC_PV_BYTES: fc_arena_free(vm, (void *)(uintptr_t)v->u.str.s, v->u.str.len + 1); break;
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET:
        for (size_t i = 0; i < v->u.seq.n; i++)
            fc_vm_free_tree(vm, v->u.seq.items[i], depth + 1);
        fc_arena_free(vm, v->u.seq.items, v->u.seq.alloc * sizeof(*v->u.seq.items));
        break;
    case FC_PV_DICT:
        for (size_t i = 0; i < v->u.dict.n; i++) {
            fc_vm_free_tree(vm, v->u.dict.keys[i], depth + 1);
            fc_vm_free_tree(vm, v->u.dict.vals[i], depth + 1);
        }
        fc_arena_free(vm, v->u.dict.keys, v->u.dict.alloc * sizeof(*v->u.dict.keys));
        fc_arena_free(vm, v->u.dict.vals, v->u.dict.alloc * sizeof(*v->u.dict.vals));
        fc_vm_free_tree(vm, v->u.dict.state, depth + 1);
        break;
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        fc_vm_free_tree(vm, v->u.call.callable, depth + 1);
        fc_vm_free_tree(vm, v->u.call.args, depth + 1);
        fc_vm_free_tree(vm, v->u.call.state, depth + 1);
        break;
    case FC_PV_TENSOR: return; /* weights-only profile: never handed to hooks */
    default: break;
    }
    fc_arena_free(vm, v, fc_pv_node_size(v->kind));
}

/* Add k: v to dict d, unless the dict_item hook takes the pair. */
static int fc_vm_dict_add(struct fc_vm *vm, struct fc_pv *d, struct fc_pv *k, struct fc_pv *v)
{
    if (vm->hooks != NULL && vm->hooks->dict_item != NULL) {
        const int rc = vm->hooks->dict_item(vm->hooks->ctx, d, k, v);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            fc_vm_free_tree(vm, k, 0);
            fc_vm_free_tree(vm, v, 0);
            return FC_OK;
        }
    }
    return fc_vm_dict_push(vm, d, k, v);
}

/* Collect stack[start..sp) into a new container and replace them with it. */
static int fc_vm_collect(struct fc_vm *vm, size_t start, enum fc_pv_kind kind)
{
    const size_t n = vm->sp - start;
    struct fc_pv *v = fc_vm_seq_from(vm, kind, n > 0 ? vm->stack + start : NULL, n);
    if (v == NULL)
        return FC_ENOMEM;
    vm->sp = start;
    return fc_vm_push(vm, v);
}

static int fc_vm_setitems(struct fc_vm *vm, size_t start)
{
    const size_t n = vm->sp - start;
    if (n % 2 != 0)
        return fc_vm_err(vm, FC_ECORRUPT, "odd number of items (%zu) for %s", n, fc_vm_opname(vm));
    vm->sp = start;
    struct fc_pv *d;
    FC_TRY(fc_vm_top(vm, &d));
    if (d->kind != FC_PV_DICT)
        return fc_vm_err(vm, FC_EFORMAT, "%s on a %s (only dicts)", fc_vm_opname(vm),
                         fc_pv_kind_name(d->kind));
    for (size_t i = 0; i < n; i += 2)
        FC_TRY(fc_vm_dict_add(vm, d, vm->stack[start + i], vm->stack[start + i + 1]));
    return FC_OK;
}

static int fc_vm_appends(struct fc_vm *vm, size_t start, enum fc_pv_kind target)
{
    const size_t n = vm->sp - start;
    vm->sp = start;
    struct fc_pv *l;
    FC_TRY(fc_vm_top(vm, &l));
    if (l->kind != target)
        return fc_vm_err(vm, FC_EFORMAT, "%s on a %s (only %ss)", fc_vm_opname(vm),
                         fc_pv_kind_name(l->kind), fc_pv_kind_name(target));
    for (size_t i = 0; i < n; i++)
        FC_TRY(fc_vm_seq_push(vm, l, vm->stack[start + i]));
    return FC_OK;
}

/* Text argument of INT/LONG/PUT/GET: a decimal number. */
static int fc_vm_text_int(struct fc_vm *vm, int64_t *out, int strip_l)
{
    size_t n = vm->arg.n;
    if (strip_l && n > 0 && vm->arg.s[n - 1] == 'L')
        n--;
    if (fc_parse_dec(vm->arg.s, n, out) < 0)
        return fc_vm_err(vm, FC_EFORMAT, "%s argument is not a 64-bit decimal integer",
                         fc_vm_opname(vm));
    return FC_OK;
}

int fc_vm_step(struct fc_vm *vm, int *done)
{
    const struct fc_op_arg *arg = &vm->arg;
    struct fc_pv *a, *b, *c;
    size_t start;
    int64_t i64;
    switch (vm->op) {
    case OP_PROTO:
        if (arg->u > 5)
            return fc_vm_err(vm, FC_EFORMAT, "unsupported pickle protocol %u", (unsigned)arg->u);
        return FC_OK;
    case OP_FRAME: {
        const uint64_t fl = arg->u;
        if (fl > vm->len - vm->pos)
            return fc_vm_err(vm, FC_ECORRUPT,
                             "truncated pickle: FRAME of %" PRIu64 " bytes, %zu left", fl,
                             vm->len - vm->pos);
        return FC_OK;
    }
    case OP_STOP:
        if (fc_vm_avail(vm) == 0)
            return fc_vm_err(vm, FC_ECORRUPT, "STOP with an empty stack");
        vm->root = vm->stack[vm->sp - 1];
        vm->p->root = vm->root;
        *done = 1;
        return FC_OK;
    case OP_MARK:
        if (vm->nmarks >= FC_PICKLE_MAX_MARKS)
            return fc_vm_err(vm, FC_ECORRUPT, "more than %d nested MARKs", FC_PICKLE_MAX_MARKS);
        if (vm->nmarks == vm->marks_alloc) {
            const size_t na = vm->marks_alloc < 16 ? 16 : vm->marks_alloc * 2;
            size_t *m = fc_reallocarray(vm->marks, na, sizeof(*m));
            if (m == NULL)
                return fc_vm_err(vm, FC_ENOMEM, "out of memory growing the MARK stack");
            vm->marks = m;
            vm->marks_alloc = na;
        }
        vm->marks[vm->nmarks++] = vm->sp;
        return FC_OK;
    case OP_POP:
        if (fc_vm_avail(vm) > 0) {
            vm->sp--;
            return FC_OK;
        }
        if (vm->nmarks > 0) {
            vm->nmarks--; /* Python: POP on an empty MARK frame drops the MARK */
            return FC_OK;
        }
        return fc_vm_underflow(vm, 1);
    case OP_POP_MARK:
        FC_TRY(fc_vm_pop_mark(vm, &start));
        vm->sp = start;
        return FC_OK;
    case OP_DUP: FC_TRY(fc_vm_top(vm, &a)); return fc_vm_push(vm, a);
    case OP_EMPTY_DICT: return fc_vm_push(vm, fc_vm_node(vm, FC_PV_DICT));
    case OP_EMPTY_LIST: return fc_vm_push(vm, fc_vm_node(vm, FC_PV_LIST));
    case OP_EMPTY_TUPLE: return fc_vm_push(vm, fc_vm_node(vm, FC_PV_TUPLE));
    case OP_EMPTY_SET: return fc_vm_push(vm, fc_vm_node(vm, FC_PV_SET));
    case OP_TUPLE: FC_TRY(fc_vm_pop_mark(vm, &start)); return fc_vm_collect(vm, start, FC_PV_TUPLE);
    case OP_LIST: FC_TRY(fc_vm_pop_mark(vm, &start)); return fc_vm_collect(vm, start, FC_PV_LIST);
    case OP_FROZENSET:
        FC_TRY(fc_vm_pop_mark(vm, &start));
        return fc_vm_collect(vm, start, FC_PV_SET);
    case OP_TUPLE1:
    case OP_TUPLE2:
    case OP_TUPLE3: {
        const size_t n = vm->op - OP_TUPLE1 + 1;
        if (fc_vm_avail(vm) < n)
            return fc_vm_underflow(vm, n);
        return fc_vm_collect(vm, vm->sp - n, FC_PV_TUPLE);
    }
    case OP_DICT: {
        FC_TRY(fc_vm_pop_mark(vm, &start));
        const size_t n = vm->sp - start;
        if (n % 2 != 0)
            return fc_vm_err(vm, FC_ECORRUPT, "odd number of items (%zu) for DICT", n);
        struct fc_pv *d = fc_vm_node(vm, FC_PV_DICT);
        if (d == NULL)
            return FC_ENOMEM;
        for (size_t i = 0; i < n; i += 2)
            FC_TRY(fc_vm_dict_add(vm, d, vm->stack[start + i], vm->stack[start + i + 1]));
        vm->sp = start;
        return fc_vm_push(vm, d);
    }
    case OP_APPEND:
        if (fc_vm_avail(vm) < 2)
            return fc_vm_underflow(vm, 2);
        return fc_vm_appends(vm, vm->sp - 1, FC_PV_LIST);
    case OP_APPENDS:
        FC_TRY(fc_vm_pop_mark(vm, &start));
        return fc_vm_appends(vm, start, FC_PV_LIST);
    case OP_ADDITEMS:
        FC_TRY(fc_vm_pop_mark(vm, &start));
        return fc_vm_appends(vm, start, FC_PV_SET);
    case OP_SETITEM:
        if (fc_vm_avail(vm) < 3)
            return fc_vm_underflow(vm, 3);
        return fc_vm_setitems(vm, vm->sp - 2);
    case OP_SETITEMS: FC_TRY(fc_vm_pop_mark(vm, &start)); return fc_vm_setitems(vm, start);
    case OP_BINPUT:
    case OP_LONG_BINPUT: FC_TRY(fc_vm_top(vm, &a)); return fc_vm_memo_put(vm, arg->u, a);
    case OP_PUT:
        FC_TRY(fc_vm_text_int(vm, &i64, 0));
        if (i64 < 0)
            return fc_vm_err(vm, FC_ECORRUPT, "negative PUT argument");
        FC_TRY(fc_vm_top(vm, &a));
        return fc_vm_memo_put(vm, (uint64_t)i64, a);
    case OP_MEMOIZE: FC_TRY(fc_vm_top(vm, &a)); return fc_vm_memo_put(vm, vm->memo_n, a);
    case OP_BINGET:
    case OP_LONG_BINGET: FC_TRY(fc_vm_memo_get(vm, arg->u, &a)); return fc_vm_push(vm, a);
    case OP_GET:
        FC_TRY(fc_vm_text_int(vm, &i64, 0));
        if (i64 < 0)
            return fc_vm_err(vm, FC_ECORRUPT, "negative GET argument");
        FC_TRY(fc_vm_memo_get(vm, (uint64_t)i64, &a));
        return fc_vm_push(vm, a);
    case OP_BININT1:
    case OP_BININT2: return fc_vm_push(vm, fc_vm_int(vm, (int64_t)arg->u));
    case OP_BININT: return fc_vm_push(vm, fc_vm_int(vm, (int32_t)(uint32_t)arg->u));
    case OP_LONG1:
    case OP_LONG4: return fc_vm_push(vm, fc_vm_long(vm, arg->s, arg->n));
    case OP_INT: {
        const unsigned char *s = arg->s;
        size_t n = arg->n;
        if (n == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1')) {
            a = fc_vm_node(vm, FC_PV_BOOL);
            if (a != NULL)
                a->u.b = s[1] == '1';
            return fc_vm_push(vm, a);
        }
        if (fc_parse_dec(s, n, &i64) < 0)
            return fc_vm_err(vm, FC_EFORMAT, "INT argument is not a 64-bit decimal integer");
        return fc_vm_push(vm, fc_vm_int(vm, i64));
    }
    case OP_LONG: FC_TRY(fc_vm_text_int(vm, &i64, 1)); return fc_vm_push(vm, fc_vm_int(vm, i64));
    case OP_FLOAT: {
        const unsigned char *s = arg->s;
        const size_t n = arg->n;
        char buf[64];
        if (n == 0 || n >= sizeof(buf) || memchr(s, 0, n) != NULL)
            return fc_vm_err(vm, FC_ECORRUPT, "FLOAT argument is not a number");
        memcpy(buf, s, n);
        buf[n] = '\0';
        char *end = NULL;
        const double d = strtod(buf, &end);
        if (end != buf + n)
            return fc_vm_err(vm, FC_ECORRUPT, "FLOAT argument is not a number");
        a = fc_vm_node(vm, FC_PV_FLOAT);
        if (a != NULL)
            a->u.f = d;
        return fc_vm_push(vm, a);
    }
    case OP_BINFLOAT: {
        uint64_t u = 0; /* big-endian, unlike every other fixed argument */
        for (int k = 0; k < 8; k++)
            u = (u << 8) | arg->s[k];
        a = fc_vm_node(vm, FC_PV_FLOAT);
        if (a != NULL)
            memcpy(&a->u.f, &u, sizeof(u));
        return fc_vm_push(vm, a);
    }
    case OP_NONE: return fc_vm_push(vm, fc_vm_node(vm, FC_PV_NONE));
    case OP_NEWTRUE:
    case OP_NEWFALSE:
        a = fc_vm_node(vm, FC_PV_BOOL);
        if (a != NULL)
            a->u.b = vm->op == OP_NEWTRUE;
        return fc_vm_push(vm, a);
    case OP_BINUNICODE:
    case OP_SHORT_BINUNICODE:
    case OP_BINUNICODE8: return fc_op_string(vm, FC_PV_STR, 0);
    case OP_SHORT_BINSTRING:
    case OP_BINSTRING: return fc_op_string(vm, FC_PV_STR, 1);
    case OP_SHORT_BINBYTES:
    case OP_BINBYTES:
    case OP_BINBYTES8:
    case OP_BYTEARRAY8: return fc_op_string(vm, FC_PV_BYTES, 0);
    case OP_GLOBAL: return fc_op_global(vm, arg->s, arg->n, arg->s2, arg->n2);
    case OP_STACK_GLOBAL:
        FC_TRY(fc_vm_pop(vm, &b));
        FC_TRY(fc_vm_pop(vm, &a));
        if (a->kind != FC_PV_STR || b->kind != FC_PV_STR)
            return fc_vm_err(vm, FC_ECORRUPT, "STACK_GLOBAL requires str module and name");
        return fc_op_global(vm, (const unsigned char *)a->u.str.s, a->u.str.len,
                            (const unsigned char *)b->u.str.s, b->u.str.len);
    case OP_REDUCE: return fc_op_reduce(vm);
    case OP_NEWOBJ:
        FC_TRY(fc_vm_pop(vm, &b));
        FC_TRY(fc_vm_pop(vm, &a));
        return fc_op_newobj(vm, a, b);
    case OP_NEWOBJ_EX:
        FC_TRY(fc_vm_pop(vm, &c));
        FC_TRY(fc_vm_pop(vm, &b));
        FC_TRY(fc_vm_pop(vm, &a));
        if (c->kind != FC_PV_DICT)
            return fc_vm_err(vm, FC_ECORRUPT, "NEWOBJ_EX keyword arguments are not a dict");
        if (c->u.dict.n != 0)
            return fc_vm_err(vm, FC_EFORMAT, "NEWOBJ_EX with keyword arguments is not supported");
        return fc_op_newobj(vm, a, b);
    case OP_BUILD: return fc_op_build(vm);
    case OP_BINPERSID: return fc_op_binpersid(vm);
    default:
        return fc_vm_err(vm, FC_EFORMAT, "pickle opcode 0x%02x (%s) is not allowed", vm->op,
                         fc_vm_opname(vm));
    }
}
