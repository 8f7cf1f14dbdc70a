/*
 * fc_pickle.c - the pickle VM (two profiles) and the protocol-2 writer.
 *
 * Layout of this file: opcode table, arena, VM state (stack, marks, memo),
 * node constructors, the weights-only allowlist and the torch rebuild
 * interpreters, the opcode loop, the post-STOP check (cycles, depth, dict key
 * merging), then the tree helpers, fc_pv_repr() and the writer.
 *
 * Nodes are allocated with only the union member their kind uses (a tensor
 * node is ~330 bytes, an int 24), so a struct fc_pv is never copied whole.
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
#include "fc_strmap.h"

/* ---- opcodes ---- */

enum {
    OP_MARK = 0x28,            /* ( */
    OP_STOP = 0x2e,            /* . */
    OP_POP = 0x30,             /* 0 */
    OP_POP_MARK = 0x31,        /* 1 */
    OP_DUP = 0x32,             /* 2 */
    OP_FLOAT = 0x46,           /* F */
    OP_INT = 0x49,             /* I */
    OP_BININT = 0x4a,          /* J */
    OP_BININT1 = 0x4b,         /* K */
    OP_LONG = 0x4c,            /* L */
    OP_BININT2 = 0x4d,         /* M */
    OP_NONE = 0x4e,            /* N */
    OP_PERSID = 0x50,          /* P */
    OP_BINPERSID = 0x51,       /* Q */
    OP_REDUCE = 0x52,          /* R */
    OP_STRING = 0x53,          /* S */
    OP_BINSTRING = 0x54,       /* T */
    OP_SHORT_BINSTRING = 0x55, /* U */
    OP_UNICODE = 0x56,         /* V */
    OP_BINUNICODE = 0x58,      /* X */
    OP_APPEND = 0x61,          /* a */
    OP_BUILD = 0x62,           /* b */
    OP_GLOBAL = 0x63,          /* c */
    OP_DICT = 0x64,            /* d */
    OP_EMPTY_DICT = 0x7d,      /* } */
    OP_APPENDS = 0x65,         /* e */
    OP_GET = 0x67,             /* g */
    OP_BINGET = 0x68,          /* h */
    OP_INST = 0x69,            /* i */
    OP_LONG_BINGET = 0x6a,     /* j */
    OP_LIST = 0x6c,            /* l */
    OP_EMPTY_LIST = 0x5d,      /* ] */
    OP_OBJ = 0x6f,             /* o */
    OP_PUT = 0x70,             /* p */
    OP_BINPUT = 0x71,          /* q */
    OP_LONG_BINPUT = 0x72,     /* r */
    OP_SETITEM = 0x73,         /* s */
    OP_TUPLE = 0x74,           /* t */
    OP_EMPTY_TUPLE = 0x29,     /* ) */
    OP_SETITEMS = 0x75,        /* u */
    OP_BINFLOAT = 0x47,        /* G */
    OP_PROTO = 0x80,
    OP_NEWOBJ = 0x81,
    OP_EXT1 = 0x82,
    OP_EXT2 = 0x83,
    OP_EXT4 = 0x84,
    OP_TUPLE1 = 0x85,
    OP_TUPLE2 = 0x86,
    OP_TUPLE3 = 0x87,
    OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89,
    OP_LONG1 = 0x8a,
    OP_LONG4 = 0x8b,
    OP_BINBYTES = 0x42,       /* B */
    OP_SHORT_BINBYTES = 0x43, /* C */
    OP_SHORT_BINUNICODE = 0x8c,
    OP_BINUNICODE8 = 0x8d,
    OP_BINBYTES8 = 0x8e,
    OP_EMPTY_SET = 0x8f,
    OP_ADDITEMS = 0x90,
    OP_FROZENSET = 0x91,
    OP_NEWOBJ_EX = 0x92,
    OP_STACK_GLOBAL = 0x93,
    OP_MEMOIZE = 0x94,
    OP_FRAME = 0x95,
    OP_BYTEARRAY8 = 0x96,
    OP_NEXT_BUFFER = 0x97,
    OP_READONLY_BUFFER = 0x98
};

/*
 * The one description of the opcodes: name, how the argument after the
 * opcode byte is laid out, which profile allows it and its memo role.  The
 * VM, the memo pre-scan and the writer's memoizer all decode arguments
 * through fc_op_decode() with it.
 */
enum fc_op_argkind {
    ARG_NONE,
    ARG_FIXED1, /* fixed-size argument of 1, 2, 4 or 8 bytes (value read little-endian) */
    ARG_FIXED2,
    ARG_FIXED4,
    ARG_FIXED8,
    ARG_LEN1, /* a 1, 4 or 8 byte little-endian length, then that many bytes */
    ARG_LEN4,
    ARG_LEN8,
    ARG_LINE, /* one newline-terminated line */
    ARG_LINE2 /* two of them */
};

enum {
    OPF_WEIGHTS_ONLY = 1, /* exactly the opcodes torch's weights-only unpickler implements (A.4) */
    OPF_SYMBOLIC = 2,     /* the DCP .metadata set (dcp-format.md 2.4) */
    OPF_PUT = 4,          /* stores the top of the stack under the argument's key */
    OPF_GET = 8,          /* pushes the value stored under the argument's key */
    OPF_SIGNED_LEN = 16   /* the 4-byte length is signed: above INT32_MAX is negative */
};

struct fc_op_info {
    const char *name; /* NULL: not an opcode */
    unsigned char arg;
    unsigned char flags;
};

#define WO_SY (OPF_WEIGHTS_ONLY | OPF_SYMBOLIC)
static const struct fc_op_info fc_ops[256] = {
    [OP_MARK] = {"MARK", ARG_NONE, WO_SY},
    [OP_STOP] = {"STOP", ARG_NONE, WO_SY},
    [OP_POP] = {"POP", ARG_NONE, OPF_SYMBOLIC},
    [OP_POP_MARK] = {"POP_MARK", ARG_NONE, OPF_SYMBOLIC},
    [OP_DUP] = {"DUP", ARG_NONE, OPF_SYMBOLIC},
    [OP_FLOAT] = {"FLOAT", ARG_LINE, OPF_SYMBOLIC},
    [OP_INT] = {"INT", ARG_LINE, OPF_SYMBOLIC},
    [OP_BININT] = {"BININT", ARG_FIXED4, WO_SY},
    [OP_BININT1] = {"BININT1", ARG_FIXED1, WO_SY},
    [OP_LONG] = {"LONG", ARG_LINE, OPF_SYMBOLIC},
    [OP_BININT2] = {"BININT2", ARG_FIXED2, WO_SY},
    [OP_NONE] = {"NONE", ARG_NONE, WO_SY},
    [OP_PERSID] = {"PERSID", ARG_LINE, 0},
    [OP_BINPERSID] = {"BINPERSID", ARG_NONE, OPF_WEIGHTS_ONLY},
    [OP_REDUCE] = {"REDUCE", ARG_NONE, WO_SY},
    [OP_STRING] = {"STRING", ARG_LINE, 0},
    [OP_BINSTRING] = {"BINSTRING", ARG_LEN4, OPF_SYMBOLIC | OPF_SIGNED_LEN},
    [OP_SHORT_BINSTRING] = {"SHORT_BINSTRING", ARG_LEN1, WO_SY},
    [OP_UNICODE] = {"UNICODE", ARG_LINE, 0},
    [OP_BINUNICODE] = {"BINUNICODE", ARG_LEN4, WO_SY},
    [OP_APPEND] = {"APPEND", ARG_NONE, WO_SY},
    [OP_BUILD] = {"BUILD", ARG_NONE, WO_SY},
    [OP_GLOBAL] = {"GLOBAL", ARG_LINE2, WO_SY},
    [OP_DICT] = {"DICT", ARG_NONE, OPF_SYMBOLIC},
    [OP_EMPTY_DICT] = {"EMPTY_DICT", ARG_NONE, WO_SY},
    [OP_APPENDS] = {"APPENDS", ARG_NONE, WO_SY},
    [OP_GET] = {"GET", ARG_LINE, OPF_SYMBOLIC | OPF_GET},
    [OP_BINGET] = {"BINGET", ARG_FIXED1, WO_SY | OPF_GET},
    [OP_INST] = {"INST", ARG_LINE2, 0},
    [OP_LONG_BINGET] = {"LONG_BINGET", ARG_FIXED4, WO_SY | OPF_GET},
    [OP_LIST] = {"LIST", ARG_NONE, OPF_SYMBOLIC},
    [OP_EMPTY_LIST] = {"EMPTY_LIST", ARG_NONE, WO_SY},
    [OP_OBJ] = {"OBJ", ARG_NONE, 0},
    [OP_PUT] = {"PUT", ARG_LINE, OPF_SYMBOLIC | OPF_PUT},
    [OP_BINPUT] = {"BINPUT", ARG_FIXED1, WO_SY | OPF_PUT},
    [OP_LONG_BINPUT] = {"LONG_BINPUT", ARG_FIXED4, WO_SY | OPF_PUT},
    [OP_SETITEM] = {"SETITEM", ARG_NONE, WO_SY},
    [OP_TUPLE] = {"TUPLE", ARG_NONE, WO_SY},
    [OP_EMPTY_TUPLE] = {"EMPTY_TUPLE", ARG_NONE, WO_SY},
    [OP_SETITEMS] = {"SETITEMS", ARG_NONE, WO_SY},
    [OP_BINFLOAT] = {"BINFLOAT", ARG_FIXED8, WO_SY},
    [OP_PROTO] = {"PROTO", ARG_FIXED1, WO_SY},
    [OP_NEWOBJ] = {"NEWOBJ", ARG_NONE, WO_SY},
    [OP_EXT1] = {"EXT1", ARG_FIXED1, 0},
    [OP_EXT2] = {"EXT2", ARG_FIXED2, 0},
    [OP_EXT4] = {"EXT4", ARG_FIXED4, 0},
    [OP_TUPLE1] = {"TUPLE1", ARG_NONE, WO_SY},
    [OP_TUPLE2] = {"TUPLE2", ARG_NONE, WO_SY},
    [OP_TUPLE3] = {"TUPLE3", ARG_NONE, WO_SY},
    [OP_NEWTRUE] = {"NEWTRUE", ARG_NONE, WO_SY},
    [OP_NEWFALSE] = {"NEWFALSE", ARG_NONE, WO_SY},
    [OP_LONG1] = {"LONG1", ARG_LEN1, WO_SY},
    [OP_LONG4] = {"LONG4", ARG_LEN4, OPF_SYMBOLIC | OPF_SIGNED_LEN},
    [OP_BINBYTES] = {"BINBYTES", ARG_LEN4, OPF_SYMBOLIC},
    [OP_SHORT_BINBYTES] = {"SHORT_BINBYTES", ARG_LEN1, OPF_SYMBOLIC},
    [OP_SHORT_BINUNICODE] = {"SHORT_BINUNICODE", ARG_LEN1, OPF_SYMBOLIC},
    [OP_BINUNICODE8] = {"BINUNICODE8", ARG_LEN8, OPF_SYMBOLIC},
    [OP_BINBYTES8] = {"BINBYTES8", ARG_LEN8, OPF_SYMBOLIC},
    [OP_EMPTY_SET] = {"EMPTY_SET", ARG_NONE, WO_SY},
    [OP_ADDITEMS] = {"ADDITEMS", ARG_NONE, OPF_SYMBOLIC},
    [OP_FROZENSET] = {"FROZENSET", ARG_NONE, OPF_SYMBOLIC},
    [OP_NEWOBJ_EX] = {"NEWOBJ_EX", ARG_NONE, OPF_SYMBOLIC},
    [OP_STACK_GLOBAL] = {"STACK_GLOBAL", ARG_NONE, OPF_SYMBOLIC},
    [OP_MEMOIZE] = {"MEMOIZE", ARG_NONE, OPF_SYMBOLIC | OPF_PUT},
    [OP_FRAME] = {"FRAME", ARG_FIXED8, OPF_SYMBOLIC},
    [OP_BYTEARRAY8] = {"BYTEARRAY8", ARG_LEN8, OPF_SYMBOLIC},
    [OP_NEXT_BUFFER] = {"NEXT_BUFFER", ARG_NONE, 0},
    [OP_READONLY_BUFFER] = {"READONLY_BUFFER", ARG_NONE, 0},
};
#undef WO_SY

/* The argument of one opcode, as fc_op_decode() found it in the input. */
struct fc_op_arg {
    const unsigned char *s;  /* fixed: its bytes; length-prefixed: the payload; line: the first */
    size_t n;                /* bytes at s (a line without its newline) */
    const unsigned char *s2; /* ARG_LINE2: the second line, n2 bytes */
    size_t n2;
    uint64_t u; /* fixed: the little-endian value; length-prefixed: the length */
};

/* Why fc_op_decode() could not decode an argument (positive: not an error yet). */
enum fc_op_short {
    OP_SHORT_FIXED = 1, /* the fixed part (argument or length) is cut off */
    OP_SHORT_PAYLOAD,   /* the length-prefixed bytes are cut off */
    OP_SHORT_LINE,      /* a line has no newline */
    OP_SHORT_NEGATIVE   /* a signed length is negative */
};

/* Whether the profile allows op (BINPERSID is weights-only; the .metadata set adds many). */
static int fc_op_allowed(unsigned op, enum fc_pickle_profile profile)
{
    return (fc_ops[op & 0xff].flags &
            (profile == FC_PICKLE_WEIGHTS_ONLY ? OPF_WEIGHTS_ONLY : OPF_SYMBOLIC)) != 0;
}

/* ---- arena ---- */

struct fc_arena_chunk {
    struct fc_arena_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
};

#define FC_ARENA_HDR   ((sizeof(struct fc_arena_chunk) + 15) & ~(size_t)15)
#define FC_ARENA_CHUNK ((size_t)64 << 10)

/*
 * Blocks come in size classes so that freed ones can be reused (a consumer
 * that takes dict items as they are built frees their subtrees, and grown
 * arrays free their old copy): multiples of 8 up to FC_ARENA_SMALL, powers of
 * two above.  A freed block goes on its class's free list and is only given
 * back to the system by fc_pickle_free().
 */
#define FC_ARENA_SMALL   ((size_t)512)
#define FC_ARENA_CLASSES (FC_ARENA_SMALL / 8 + 64) /* the powers of two reach SIZE_MAX */

struct fc_pickle {
    struct fc_arena_chunk *chunks; /* head is the chunk being filled */
    size_t arena_bytes;
    size_t arena_cap;
    void *free_blocks[FC_ARENA_CLASSES]; /* per size class: freed blocks, linked through word 0 */
    const struct fc_pv *root;
    const struct fc_pv **globals; /* distinct GLOBAL/STACK_GLOBAL names, first use first */
    size_t nglobals, globals_alloc;
    struct fc_strmap global_names; /* "module name" (arena strings) -> index in globals */
};

/* Internal node kind for a persistent-id storage; never left in a result. */
#define FC_PV_STORAGE_ ((enum fc_pv_kind)(FC_PV_TENSOR + 1))

/* ---- VM state ---- */

struct fc_vm {
    struct fc_pickle *p;
    const unsigned char *data;
    size_t len;
    size_t pos;
    enum fc_pickle_profile profile;
    const char *what;
    uint64_t op_off; /* offset of the opcode being run */
    unsigned op;
    struct fc_op_arg arg; /* its argument (fc_vm_decode_arg) */
    struct fc_pv **stack;
    size_t sp;
    size_t stack_alloc;
    size_t *marks;
    size_t nmarks;
    size_t marks_alloc;
    /*
     * The memo keeps only the values that a later GET fetches: a pre-scan of
     * the opcodes (fc_vm_prescan) marks those keys in memo_used, and
     * memo_rank[w] counts the marked keys below word w, so a fetched key's
     * value sits at memo[rank].  Everything else a pickle memoises (nearly
     * every object) has one owner, so a consumer may free it.  A value the
     * memo holds is reference counted (struct fc_pv.shared): its placements
     * plus the memo's hold, which ends at the key's only GET (keys fetched
     * more than once are held to the end).  memo_set marks
     * the keys set so far: MEMOIZE's next key is their count, len(memo) in
     * Python.
     */
    uint64_t *memo_used, *memo_multi, *memo_set; /* multi: fetched more than once */
    uint32_t *memo_rank;
    size_t memo_words, multi_words, set_words; /* 64-bit words of each bitmap (memo_rank: used) */
    struct fc_pv **memo;                       /* one slot per fetched key */
    size_t memo_n;
    size_t memo_limit; /* keys at or beyond this are refused */
    int aliased;       /* DUP seen: a node may sit in two places, so nothing is freed */
    const struct fc_pickle_hooks *hooks;
    size_t window_to; /* hooks->window made data[.., window_to) readable */
    struct fc_pv *root;
};

static int fc_vm_err(struct fc_vm *vm, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fc_vm_err(struct fc_vm *vm, int code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return fc_error_set(code, "%s: offset %" PRIu64 ": %s", vm->what, vm->op_off, msg);
}

static const char *fc_vm_opname(const struct fc_vm *vm)
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

static void *fc_arena_alloc(struct fc_vm *vm, size_t n)
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

static struct fc_pv *fc_vm_node(struct fc_vm *vm, enum fc_pv_kind kind)
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
static char *fc_vm_strdup(struct fc_vm *vm, const void *s, size_t n)
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

static struct fc_pv *fc_vm_strnode(struct fc_vm *vm, enum fc_pv_kind kind, const void *s, size_t n)
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

static struct fc_pv *fc_vm_int(struct fc_vm *vm, int64_t i)
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

static int fc_vm_dict_push(struct fc_vm *vm, struct fc_pv *d, struct fc_pv *k, struct fc_pv *v)
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
static struct fc_pv *fc_vm_seq_from(struct fc_vm *vm, enum fc_pv_kind kind,
                                    struct fc_pv *const *items, size_t n)
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

static int fc_vm_push(struct fc_vm *vm, struct fc_pv *v)
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

static int fc_vm_pop(struct fc_vm *vm, struct fc_pv **out)
{
    if (fc_vm_avail(vm) == 0)
        return fc_vm_underflow(vm, 1);
    *out = vm->stack[--vm->sp];
    return FC_OK;
}

static int fc_vm_top(struct fc_vm *vm, struct fc_pv **out)
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
static int fc_bit_test(const uint64_t *bits, size_t nwords, uint64_t k)
{
    return k / 64 < nwords && (bits[k / 64] >> (k % 64) & 1) != 0;
}

static int fc_bit_set(uint64_t **bits, size_t *nwords, uint64_t k)
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
static int fc_vm_memo_mark_set(struct fc_vm *vm, uint64_t key)
{
    if (key >= vm->memo_limit)
        return fc_vm_err(vm, FC_ECORRUPT, "memo index %" PRIu64 " out of range (limit %zu)", key,
                         vm->memo_limit);
    if (fc_bit_test(vm->memo_set, vm->set_words, key))
        return FC_OK;
    vm->memo_n++;
    return fc_bit_set(&vm->memo_set, &vm->set_words, key);
}

static void fc_vm_free_tree(struct fc_vm *vm, struct fc_pv *v, int depth);

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
static int fc_vm_window(struct fc_vm *vm, size_t from, size_t to)
{
    if (vm->hooks == NULL || vm->hooks->window == NULL || to <= vm->window_to)
        return FC_OK;
    size_t ready = to;
    FC_TRY(vm->hooks->window(vm->hooks->ctx, from, to, &ready));
    vm->window_to = ready > to ? ready : to;
    return FC_OK;
}

/* Find the '\n' ending the line at data[pos]: *nl its offset, or SIZE_MAX when there is none. */
static int fc_vm_find_newline(struct fc_vm *vm, size_t from, size_t pos, size_t *nl)
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

/* Bytes of a fixed argument, or of the length before a length-prefixed one; 0 for the rest. */
static size_t fc_op_width(unsigned kind)
{
    switch (kind) {
    case ARG_FIXED1:
    case ARG_LEN1: return 1;
    case ARG_FIXED2: return 2;
    case ARG_FIXED4:
    case ARG_LEN4: return 4;
    case ARG_FIXED8:
    case ARG_LEN8: return 8;
    default: return 0;
    }
}

/*
 * Decode the argument of op, which starts at data[*pos], into *a and move *pos
 * past it.  Returns FC_OK, an fc_op_short reason (positive) when the input
 * cannot hold it, or a window hook's error.  Reads only; op_off is the opcode's
 * offset, which the window must keep.
 */
static int fc_op_decode(struct fc_vm *vm, unsigned op, size_t op_off, size_t *pos,
                        struct fc_op_arg *a)
{
    const unsigned char *d = vm->data;
    const unsigned kind = fc_ops[op & 0xff].arg;
    size_t at = *pos;
    memset(a, 0, sizeof(*a));
    switch (kind) {
    case ARG_NONE: return FC_OK;
    case ARG_FIXED1:
    case ARG_FIXED2:
    case ARG_FIXED4:
    case ARG_FIXED8:
    case ARG_LEN1:
    case ARG_LEN4:
    case ARG_LEN8: {
        const size_t w = fc_op_width(kind);
        if (vm->len - at < w)
            return OP_SHORT_FIXED;
        FC_TRY(fc_vm_window(vm, op_off, at + w));
        a->s = d + at;
        a->n = w;
        a->u = w == 1   ? d[at]
               : w == 2 ? fc_read_le16(d + at)
               : w == 4 ? fc_read_le32(d + at)
                        : fc_read_le64(d + at);
        at += w;
        if (kind >= ARG_LEN1) {
            if ((fc_ops[op & 0xff].flags & OPF_SIGNED_LEN) && a->u > INT32_MAX)
                return OP_SHORT_NEGATIVE;
            if (a->u > vm->len - at)
                return OP_SHORT_PAYLOAD;
            FC_TRY(fc_vm_window(vm, op_off, at + (size_t)a->u));
            a->s = d + at;
            a->n = (size_t)a->u;
            at += a->n;
        }
        break;
    }
    case ARG_LINE:
    case ARG_LINE2:
        for (int line = 0; line < (kind == ARG_LINE2 ? 2 : 1); line++) {
            size_t nl;
            FC_TRY(fc_vm_find_newline(vm, op_off, at, &nl));
            if (nl == SIZE_MAX)
                return OP_SHORT_LINE;
            if (line == 0) {
                a->s = d + at;
                a->n = nl - at;
            } else {
                a->s2 = d + at;
                a->n2 = nl - at;
            }
            at = nl + 1;
        }
        break;
    default: return OP_SHORT_FIXED;
    }
    *pos = at;
    return FC_OK;
}

/* The VM's read of the current opcode's argument into vm->arg: a short input is an error. */
static int fc_vm_decode_arg(struct fc_vm *vm)
{
    const int rc = fc_op_decode(vm, vm->op, (size_t)vm->op_off, &vm->pos, &vm->arg);
    if (rc <= 0)
        return rc; /* FC_OK, or the window hook's error */
    /* Only for the message: a failed decode left vm->pos at the argument. */
    const size_t left = vm->len - vm->pos;
    const size_t w = fc_op_width(fc_ops[vm->op].arg);
    switch (rc) {
    case OP_SHORT_FIXED:
        return fc_vm_err(vm, FC_ECORRUPT, "truncated pickle: %s needs %zu bytes, %zu left",
                         fc_vm_opname(vm), w, left);
    case OP_SHORT_PAYLOAD:
        return fc_vm_err(vm, FC_ECORRUPT, "truncated pickle: %s of %" PRIu64 " bytes, %zu left",
                         fc_vm_opname(vm), vm->arg.u, left - w);
    case OP_SHORT_LINE:
        return fc_vm_err(vm, FC_ECORRUPT, "truncated pickle: %s argument has no newline",
                         fc_vm_opname(vm));
    default: /* OP_SHORT_NEGATIVE */
        return fc_vm_err(vm, FC_ECORRUPT, "%s with a negative length", fc_vm_opname(vm));
    }
}

/* Decimal integer (optional sign) into int64; 0 on success. */
static int fc_parse_dec(const unsigned char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    uint64_t acc = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) {
        neg = s[i] == '-';
        i++;
    }
    if (i == n)
        return -1;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (acc > (UINT64_MAX - 9) / 10)
            return -1;
        acc = acc * 10 + (uint64_t)(s[i] - '0');
    }
    if (neg) {
        if (acc > (uint64_t)INT64_MAX + 1)
            return -1;
        *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    } else {
        if (acc > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)acc;
    }
    return 0;
}

/* Little-endian two's complement -> INT when it fits int64, else BIGINT. */
static struct fc_pv *fc_vm_long(struct fc_vm *vm, const unsigned char *b, size_t n)
{
    if (n == 0)
        return fc_vm_int(vm, 0);
    const unsigned ext = (b[n - 1] & 0x80) ? 0xff : 0x00;
    int fits = 1;
    if (n > 8) {
        for (size_t i = 8; i < n; i++)
            if (b[i] != ext)
                fits = 0;
        if (fits && ((b[7] & 0x80) ? 0xff : 0x00) != ext)
            fits = 0;
    }
    if (!fits)
        return fc_vm_strnode(vm, FC_PV_BIGINT, b, n);
    uint64_t u = 0;
    for (size_t i = 0; i < 8; i++) {
        const uint64_t byte = i < n ? b[i] : ext;
        u |= byte << (8 * i);
    }
    int64_t i64;
    memcpy(&i64, &u, sizeof(i64));
    return fc_vm_int(vm, i64);
}

/* ---- names ---- */

/* torch._utils IMPORT_MAPPING / NAME_MAPPING (Python 2 spellings). */
static void fc_rename_global(const char **module, const char **name)
{
    static const char *const names[][4] = {
        {"__builtin__", "xrange", "builtins", "range"},
        {"__builtin__", "reduce", "functools", "reduce"},
        {"__builtin__", "intern", "sys", "intern"},
        {"__builtin__", "unichr", "builtins", "chr"},
        {"__builtin__", "unicode", "builtins", "str"},
        {"__builtin__", "long", "builtins", "int"},
        {"itertools", "izip", "builtins", "zip"},
        {"itertools", "imap", "builtins", "map"},
        {"itertools", "ifilter", "builtins", "filter"},
        {"itertools", "ifilterfalse", "itertools", "filterfalse"},
        {"itertools", "izip_longest", "itertools", "zip_longest"},
        {"UserDict", "IterableUserDict", "collections", "UserDict"},
        {"UserList", "UserList", "collections", "UserList"},
        {"UserString", "UserString", "collections", "UserString"},
        {"__builtin__", "basestring", "builtins", "str"},
        {"exceptions", "StandardError", "builtins", "Exception"},
        {"UserDict", "UserDict", "collections", "UserDict"},
    };
    static const char *const modules[][2] = {
        {"__builtin__", "builtins"},
        {"copy_reg", "copyreg"},
        {"Queue", "queue"},
        {"repr", "reprlib"},
        {"_abcoll", "collections.abc"},
        {"UserDict", "collections"},
        {"UserList", "collections"},
        {"UserString", "collections"},
        {"whichdb", "dbm"},
        {"StringIO", "io"},
        {"cStringIO", "io"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(*module, names[i][0]) == 0 && strcmp(*name, names[i][1]) == 0) {
            *module = names[i][2];
            *name = names[i][3];
            return;
        }
    }
    for (size_t i = 0; i < sizeof(modules) / sizeof(modules[0]); i++) {
        if (strcmp(*module, modules[i][0]) == 0) {
            *module = modules[i][1];
            return;
        }
    }
}

/* What an allowlisted (or, in the symbolic profile, recognised) global is. */
enum fc_sym {
    SYM_NOT_ALLOWED = 0,
    SYM_ALLOWED, /* allowlisted, no special meaning: stays symbolic */
    SYM_ORDEREDDICT,
    SYM_COUNTER,
    SYM_SET,
    SYM_FROZENSET, /* not allowlisted by torch; symbolic profile only */
    SYM_BYTES,     /* idem */
    SYM_BYTEARRAY,
    SYM_CODECS_ENCODE,
    SYM_SIZE,
    SYM_DEVICE,
    SYM_TENSOR_TYPE,
    SYM_PARAMETER_TYPE,
    SYM_TENSOR_CLASS, /* torch.FloatTensor, torch.cuda.sparse.LongTensor, ... */
    SYM_STORAGE_CLASS,
    SYM_STORAGE_UNTYPED,
    SYM_DTYPE,
    SYM_REBUILD_TENSOR,
    SYM_REBUILD_V2,
    SYM_REBUILD_V3,
    SYM_REBUILD_PARAM,
    SYM_REBUILD_PARAM_STATE,
    SYM_REBUILD_FROM_TYPE_V2,
    SYM_REBUILD_DEVICE_FROM_CPU,
    SYM_UNCONVERTIBLE
};

struct fc_sym_entry {
    const char *full;
    enum fc_sym sym;
    const char *what; /* SYM_UNCONVERTIBLE: what kind of tensor it rebuilds */
};

static const struct fc_sym_entry fc_sym_table[] = {
    {"collections.OrderedDict", SYM_ORDEREDDICT, NULL},
    {"collections.Counter", SYM_COUNTER, NULL},
    {"torch.nn.parameter.Parameter", SYM_PARAMETER_TYPE, NULL},
    {"torch.serialization._get_layout", SYM_ALLOWED, NULL},
    {"torch.Size", SYM_SIZE, NULL},
    {"torch.Tensor", SYM_TENSOR_TYPE, NULL},
    {"torch.device", SYM_DEVICE, NULL},
    {"_codecs.encode", SYM_CODECS_ENCODE, NULL},
    {"builtins.bytearray", SYM_BYTEARRAY, NULL},
    {"builtins.set", SYM_SET, NULL},
    {"builtins.complex", SYM_ALLOWED, NULL},
    {"torch.storage.TypedStorage", SYM_STORAGE_UNTYPED, NULL},
    {"torch.storage.UntypedStorage", SYM_STORAGE_UNTYPED, NULL},
    {"torch.per_tensor_affine", SYM_ALLOWED, NULL},
    {"torch.per_tensor_symmetric", SYM_ALLOWED, NULL},
    {"torch.per_channel_affine", SYM_ALLOWED, NULL},
    {"torch.per_channel_symmetric", SYM_ALLOWED, NULL},
    {"torch.per_channel_affine_float_qparams", SYM_ALLOWED, NULL},
    {"torch._utils._rebuild_tensor", SYM_REBUILD_TENSOR, NULL},
    {"torch._utils._rebuild_tensor_v2", SYM_REBUILD_V2, NULL},
    {"torch._utils._rebuild_tensor_v3", SYM_REBUILD_V3, NULL},
    {"torch._utils._rebuild_parameter", SYM_REBUILD_PARAM, NULL},
    {"torch._utils._rebuild_parameter_with_state", SYM_REBUILD_PARAM_STATE, NULL},
    {"torch._tensor._rebuild_from_type_v2", SYM_REBUILD_FROM_TYPE_V2, NULL},
    {"torch._utils._rebuild_device_tensor_from_cpu_tensor", SYM_REBUILD_DEVICE_FROM_CPU, NULL},
    {"torch._utils._rebuild_qtensor", SYM_UNCONVERTIBLE, "a quantized tensor"},
    {"torch._utils._rebuild_sparse_tensor", SYM_UNCONVERTIBLE, "a sparse tensor"},
    {"torch._utils._rebuild_sparse_csr_tensor", SYM_UNCONVERTIBLE, "a sparse CSR tensor"},
    {"torch._utils._rebuild_nested_tensor", SYM_UNCONVERTIBLE, "a nested tensor"},
    {"torch._utils._rebuild_wrapper_subclass", SYM_UNCONVERTIBLE,
     "a tensor subclass without data (wrapper subclass)"},
    {"torch._utils._rebuild_meta_tensor_no_storage", SYM_UNCONVERTIBLE,
     "a meta tensor (it has no data)"},
    {"torch._utils._rebuild_device_tensor_from_numpy", SYM_UNCONVERTIBLE,
     "a device tensor saved through numpy"},
};

static const char *const fc_torch_dtypes[] = {
    "bcomplex32",
    "bfloat16",
    "bits16",
    "bits1x8",
    "bits2x4",
    "bits4x2",
    "bits8",
    "bool",
    "complex128",
    "complex32",
    "complex64",
    "float16",
    "float32",
    "float4_e2m1fn_x2",
    "float64",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "int1",
    "int16",
    "int2",
    "int3",
    "int32",
    "int4",
    "int5",
    "int6",
    "int64",
    "int7",
    "int8",
    "qint32",
    "qint8",
    "quint2x4",
    "quint4x2",
    "quint8",
    "uint1",
    "uint16",
    "uint2",
    "uint3",
    "uint32",
    "uint4",
    "uint5",
    "uint6",
    "uint64",
    "uint7",
    "uint8",
};

static const char *const fc_storage_names[] = {
    "BFloat16", "Bool",  "Byte", "Char", "ComplexDouble", "ComplexFloat",
    "Double",   "Float", "Half", "Int",  "Long",          "Short",
};

static const char *const fc_qstorage_names[] = {
    "QInt32", "QInt8", "QUInt2x4", "QUInt4x2", "QUInt8",
};

/* "Float" + "Storage" == s? */
static int fc_name_in(const char *s, const char *const *list, size_t n, const char *suffix)
{
    const size_t sl = strlen(suffix);
    const size_t len = strlen(s);
    if (len <= sl || strcmp(s + len - sl, suffix) != 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len - sl && memcmp(list[i], s, len - sl) == 0)
            return 1;
    return 0;
}

#define FC_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Classify "module.name" (torch compares the joined string, so a dotted name
 * matches too).  *entry is set for table entries.
 */
static enum fc_sym fc_sym_lookup(const char *full, const struct fc_sym_entry **entry)
{
    *entry = NULL;
    for (size_t i = 0; i < FC_COUNT(fc_sym_table); i++) {
        if (strcmp(full, fc_sym_table[i].full) == 0) {
            *entry = &fc_sym_table[i];
            return fc_sym_table[i].sym;
        }
    }
    if (strncmp(full, "torch.", 6) == 0) {
        const char *rest = full + 6;
        for (size_t i = 0; i < FC_COUNT(fc_torch_dtypes); i++)
            if (strcmp(rest, fc_torch_dtypes[i]) == 0)
                return SYM_DTYPE;
        if (fc_name_in(rest, fc_storage_names, FC_COUNT(fc_storage_names), "Storage") ||
            fc_name_in(rest, fc_qstorage_names, FC_COUNT(fc_qstorage_names), "Storage"))
            return SYM_STORAGE_CLASS;
        if (fc_name_in(rest, fc_storage_names, FC_COUNT(fc_storage_names), "Tensor") &&
            strncmp(rest, "Complex", 7) != 0)
            return SYM_TENSOR_CLASS;
        if (strncmp(rest, "cuda.", 5) == 0) {
            const char *c = rest + 5;
            if (fc_name_in(c, fc_storage_names, FC_COUNT(fc_storage_names), "Storage"))
                return SYM_STORAGE_CLASS;
            if (fc_name_in(c, fc_storage_names, FC_COUNT(fc_storage_names), "Tensor") &&
                strncmp(c, "Complex", 7) != 0)
                return SYM_TENSOR_CLASS;
            if (strncmp(c, "sparse.", 7) == 0)
                rest = c; /* torch.cuda.sparse.X -> checked as sparse.X below */
        }
        if (strncmp(rest, "sparse.", 7) == 0) {
            const char *c = rest + 7;
            if (fc_name_in(c, fc_storage_names, FC_COUNT(fc_storage_names), "Tensor") &&
                strncmp(c, "Complex", 7) != 0 && strcmp(c, "BoolTensor") != 0)
                return SYM_TENSOR_CLASS;
        }
    }
    return SYM_NOT_ALLOWED;
}

/* Symbols the symbolic profile turns into plain values (stdlib constructors). */
static enum fc_sym fc_sym_symbolic(const struct fc_pv *g)
{
    static const struct {
        const char *module, *name;
        enum fc_sym sym;
    } t[] = {
        {"collections", "OrderedDict", SYM_ORDEREDDICT}, {"builtins", "set", SYM_SET},
        {"builtins", "frozenset", SYM_FROZENSET},        {"builtins", "bytes", SYM_BYTES},
        {"builtins", "bytearray", SYM_BYTEARRAY},        {"_codecs", "encode", SYM_CODECS_ENCODE},
    };
    if (g->kind != FC_PV_GLOBAL)
        return SYM_NOT_ALLOWED;
    for (size_t i = 0; i < FC_COUNT(t); i++)
        if (strcmp(g->u.global.module, t[i].module) == 0 &&
            strcmp(g->u.global.name, t[i].name) == 0)
            return t[i].sym;
    return SYM_NOT_ALLOWED;
}

/* Join module.name into buf (truncated names cannot be allowlisted). */
static void fc_global_full(const struct fc_pv *g, char *buf, size_t cap)
{
    /* snprintf "%s.%s", without its cost on every REDUCE */
    const size_t ml = strlen(g->u.global.module), nl = strlen(g->u.global.name);
    size_t k = ml < cap - 1 ? ml : cap - 1;
    memcpy(buf, g->u.global.module, k);
    if (k < cap - 1)
        buf[k++] = '.';
    const size_t nk = nl < cap - 1 - k ? nl : cap - 1 - k;
    memcpy(buf + k, g->u.global.name, nk);
    buf[k + nk] = '\0';
}

static enum fc_sym fc_sym_of(const struct fc_pv *g, const struct fc_sym_entry **entry)
{
    char full[256];
    *entry = NULL;
    if (g == NULL || g->kind != FC_PV_GLOBAL)
        return SYM_NOT_ALLOWED;
    fc_global_full(g, full, sizeof(full));
    return fc_sym_lookup(full, entry);
}

const char *fc_pv_kind_name(enum fc_pv_kind k)
{
    switch (k) {
    case FC_PV_NONE: return "None";
    case FC_PV_BOOL: return "bool";
    case FC_PV_INT:
    case FC_PV_BIGINT: return "int";
    case FC_PV_FLOAT: return "float";
    case FC_PV_STR: return "str";
    case FC_PV_BYTES: return "bytes";
    case FC_PV_LIST: return "list";
    case FC_PV_TUPLE: return "tuple";
    case FC_PV_SET: return "set";
    case FC_PV_DICT: return "dict";
    case FC_PV_GLOBAL: return "global";
    case FC_PV_CALL: return "call result";
    case FC_PV_OBJECT: return "object";
    case FC_PV_TENSOR: return "tensor";
    default: return "storage";
    }
}

/* ---- interpreting calls: stdlib value constructors ---- */

static struct fc_pv *fc_arg(const struct fc_pv *args, size_t i)
{
    return args->u.seq.items[i];
}

/* _codecs.encode(str[, encoding[, 'strict']]) -> BYTES; NULL result with rc 0: not handled. */
static int fc_vm_codecs_encode(struct fc_vm *vm, const struct fc_pv *args, struct fc_pv **out)
{
    *out = NULL;
    const size_t n = args->u.seq.n;
    if (n < 1 || n > 3 || fc_arg(args, 0)->kind != FC_PV_STR)
        return FC_OK;
    const char *enc = "utf-8";
    if (n >= 2) {
        if (fc_arg(args, 1)->kind != FC_PV_STR)
            return FC_OK;
        enc = fc_arg(args, 1)->u.str.s;
    }
    if (n == 3 &&
        (fc_arg(args, 2)->kind != FC_PV_STR || strcmp(fc_arg(args, 2)->u.str.s, "strict")))
        return FC_OK;
    const unsigned char *s = (const unsigned char *)fc_arg(args, 0)->u.str.s;
    const size_t len = fc_arg(args, 0)->u.str.len;
    const int latin1 = !strcmp(enc, "latin1") || !strcmp(enc, "latin-1") ||
                       !strcmp(enc, "iso-8859-1") || !strcmp(enc, "iso8859-1");
    const int utf8 = !strcmp(enc, "utf-8") || !strcmp(enc, "utf8");
    const int ascii = !strcmp(enc, "ascii");
    if (!latin1 && !utf8 && !ascii)
        return FC_OK;
    if (utf8 || ascii) {
        if (fc_utf8_invalid_at(s, len, 0) != len)
            return FC_OK; /* lone surrogates: Python raises, leave symbolic */
        for (size_t i = 0; ascii && i < len; i++)
            if (s[i] >= 0x80)
                return FC_OK;
        *out = fc_vm_strnode(vm, FC_PV_BYTES, s, len);
        return *out == NULL ? FC_ENOMEM : FC_OK;
    }
    /* latin1: every code point must be < 256, i.e. 1-byte or C2/C3 lead bytes. */
    size_t nb = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x80) {
            nb++;
        } else if ((s[i] == 0xc2 || s[i] == 0xc3) && i + 1 < len) {
            nb++;
            i++;
        } else {
            return FC_OK;
        }
    }
    struct fc_pv *v = fc_vm_node(vm, FC_PV_BYTES);
    if (v == NULL)
        return FC_ENOMEM;
    char *d = fc_arena_alloc(vm, nb + 1);
    if (d == NULL)
        return FC_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x80) {
            d[k++] = (char)s[i];
        } else {
            d[k++] = (char)(((s[i] & 0x03u) << 6) | (s[i + 1] & 0x3fu));
            i++;
        }
    }
    d[k] = '\0';
    v->u.str.s = d;
    v->u.str.len = nb;
    *out = v;
    return FC_OK;
}

/*
 * OrderedDict(), set(list), frozenset(list), bytes(), bytearray(bytes),
 * _codecs.encode(str, enc): the values pickle itself emits for those types.
 * *out is NULL (rc FC_OK) when the arguments are not of that plain form.
 */
static int fc_vm_stdlib_call(struct fc_vm *vm, enum fc_sym sym, const struct fc_pv *args,
                             struct fc_pv **out)
{
    const size_t n = args->u.seq.n;
    *out = NULL;
    switch (sym) {
    case SYM_ORDEREDDICT:
    case SYM_COUNTER: {
        if (n > 1 || (n == 1 && fc_arg(args, 0)->kind != FC_PV_DICT))
            return FC_OK;
        struct fc_pv *d = fc_vm_node(vm, FC_PV_DICT);
        if (d == NULL)
            return FC_ENOMEM;
        d->u.dict.ordered = sym == SYM_ORDEREDDICT;
        if (n == 1) {
            const struct fc_pv *src = fc_arg(args, 0);
            for (size_t i = 0; i < src->u.dict.n; i++)
                FC_TRY(fc_vm_dict_push(vm, d, src->u.dict.keys[i], src->u.dict.vals[i]));
        }
        *out = d;
        return FC_OK;
    }
    case SYM_SET:
    case SYM_FROZENSET: {
        if (n == 0) {
            *out = fc_vm_node(vm, FC_PV_SET);
            return *out == NULL ? FC_ENOMEM : FC_OK;
        }
        const struct fc_pv *src = fc_arg(args, 0);
        if (n != 1 ||
            (src->kind != FC_PV_LIST && src->kind != FC_PV_TUPLE && src->kind != FC_PV_SET))
            return FC_OK;
        *out = fc_vm_seq_from(vm, FC_PV_SET, src->u.seq.items, src->u.seq.n);
        return *out == NULL ? FC_ENOMEM : FC_OK;
    }
    case SYM_BYTES:
    case SYM_BYTEARRAY:
        if (n == 0) {
            *out = fc_vm_strnode(vm, FC_PV_BYTES, "", 0);
            return *out == NULL ? FC_ENOMEM : FC_OK;
        }
        if (n == 1 && fc_arg(args, 0)->kind == FC_PV_BYTES) {
            const struct fc_pv *b = fc_arg(args, 0);
            *out = fc_vm_strnode(vm, FC_PV_BYTES, b->u.str.s, b->u.str.len);
            return *out == NULL ? FC_ENOMEM : FC_OK;
        }
        if (n == 2 && fc_arg(args, 0)->kind == FC_PV_STR)
            return fc_vm_codecs_encode(vm, args, out); /* bytearray('ab', 'latin-1') */
        return FC_OK;
    case SYM_CODECS_ENCODE: return fc_vm_codecs_encode(vm, args, out);
    default: return FC_OK;
    }
}

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

static int fc_op_reduce(struct fc_vm *vm)
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
static int fc_op_newobj(struct fc_vm *vm, struct fc_pv *cls, struct fc_pv *args)
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
    case SYM_ALLOWED: return fc_vm_push(vm, fc_vm_call_node(vm, FC_PV_OBJECT, cls, args));
    case SYM_NOT_ALLOWED:
        return fc_vm_err(vm, FC_EFORMAT, "NEWOBJ of a %s (only allowlisted classes)",
                         fc_pv_kind_name(cls->kind));
    default: return fc_vm_err(vm, FC_EFORMAT, "NEWOBJ of %s is not supported", fn);
    }
}

static int fc_op_build(struct fc_vm *vm)
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
static int fc_op_binpersid(struct fc_vm *vm)
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

static int fc_op_global(struct fc_vm *vm, const unsigned char *mod, size_t mlen,
                        const unsigned char *name, size_t nlen)
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
        if (sym == SYM_NOT_ALLOWED || sym == SYM_FROZENSET || sym == SYM_BYTES) {
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
static void fc_vm_free_tree(struct fc_vm *vm, struct fc_pv *v, int depth)
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

static int fc_vm_step(struct fc_vm *vm, int *done)
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

/* ---- fc_pv_repr ---- */

struct fc_repr {
    struct fc_buf *out;
    size_t start;
    size_t max;
    int truncated;
    int rc;
};

static void fc_repr_put(struct fc_repr *r, const void *s, size_t n)
{
    if (r->truncated || r->rc < 0)
        return;
    const size_t used = r->out->len - r->start;
    const size_t avail = r->max - used;
    if (n > avail) {
        r->truncated = 1;
        n = avail;
    }
    const int rc = fc_buf_append(r->out, s, n);
    if (rc < 0)
        r->rc = rc;
}

static void fc_repr_puts(struct fc_repr *r, const char *s)
{
    fc_repr_put(r, s, strlen(s));
}

/* Python's repr(float): shortest round-trip digits, exponent form outside 1e-4 <= |x| < 1e16. */
static void fc_format_float(char *out, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v > 0 ? "inf" : "-inf");
        return;
    }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e is "[-]d[.ddd]e(+|-)XX" */
    const char *p = e;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    char digits[24];
    size_t nd = 0;
    while (*p != 'e' && *p != '\0') {
        if (*p != '.' && nd + 1 < sizeof(digits))
            digits[nd++] = *p;
        p++;
    }
    digits[nd] = '\0';
    while (nd > 1 && digits[nd - 1] == '0')
        digits[--nd] = '\0';
    long ex = 0;
    if (*p == 'e') {
        char *end = NULL;
        ex = strtol(p + 1, &end, 10);
    }
    size_t k = 0;
    char buf[64];
#define FC_PUTC(c)                                                                                 \
    do {                                                                                           \
        if (k + 1 < sizeof(buf))                                                                   \
            buf[k++] = (c);                                                                        \
    } while (0)
    if (neg)
        FC_PUTC('-');
    if (ex >= -4 && ex < 16) {
        if (ex >= 0) {
            for (long i = 0; i <= ex; i++)
                FC_PUTC((size_t)i < nd ? digits[i] : '0');
            FC_PUTC('.');
            if ((size_t)ex + 1 < nd) {
                for (size_t i = (size_t)ex + 1; i < nd; i++)
                    FC_PUTC(digits[i]);
            } else {
                FC_PUTC('0');
            }
        } else {
            FC_PUTC('0');
            FC_PUTC('.');
            for (long i = 0; i < -ex - 1; i++)
                FC_PUTC('0');
            for (size_t i = 0; i < nd; i++)
                FC_PUTC(digits[i]);
        }
        buf[k] = '\0';
    } else {
        FC_PUTC(digits[0]);
        if (nd > 1) {
            FC_PUTC('.');
            for (size_t i = 1; i < nd; i++)
                FC_PUTC(digits[i]);
        }
        buf[k] = '\0';
        snprintf(buf + k, sizeof(buf) - k, "e%c%02ld", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
#undef FC_PUTC
    snprintf(out, cap, "%s", buf);
}

/* Decimal rendering of a little-endian two's complement integer of at most 64 bytes. */
static void fc_repr_bigint(struct fc_repr *r, const unsigned char *b, size_t n)
{
    if (n > 64) {
        char t[64];
        snprintf(t, sizeof(t), "<int of %zu bytes>", n);
        fc_repr_puts(r, t);
        return;
    }
    unsigned char mag[64];
    const int neg = n > 0 && (b[n - 1] & 0x80);
    unsigned carry = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned x = b[i];
        if (neg) {
            x = (~x & 0xffu) + carry;
            carry = x >> 8;
            x &= 0xffu;
        }
        mag[i] = (unsigned char)x;
    }
    char dig[160];
    size_t nd = 0;
    size_t len = n;
    while (len > 0 && mag[len - 1] == 0)
        len--;
    while (len > 0) {
        unsigned rem = 0;
        for (size_t i = len; i-- > 0;) {
            const unsigned cur = (rem << 8) | mag[i];
            mag[i] = (unsigned char)(cur / 10);
            rem = cur % 10;
        }
        dig[nd++] = (char)('0' + rem);
        while (len > 0 && mag[len - 1] == 0)
            len--;
    }
    if (nd == 0)
        dig[nd++] = '0';
    if (neg)
        fc_repr_put(r, "-", 1);
    char out[160];
    for (size_t i = 0; i < nd; i++)
        out[i] = dig[nd - 1 - i];
    fc_repr_put(r, out, nd);
}

static void fc_repr_str(struct fc_repr *r, const struct fc_pv *v, int bytes)
{
    const unsigned char *s = (const unsigned char *)v->u.str.s;
    const size_t n = v->u.str.len;
    char q = '\'';
    if (memchr(s, '\'', n) != NULL && memchr(s, '"', n) == NULL)
        q = '"';
    if (bytes)
        fc_repr_put(r, "b", 1);
    fc_repr_put(r, &q, 1);
    size_t run = 0; /* bytes copied verbatim in one go */
    for (size_t i = 0; i < n && !r->truncated; i++) {
        const unsigned char c = s[i];
        const char *esc = NULL;
        char hex[8];
        if (c == '\\')
            esc = "\\\\";
        else if (c == (unsigned char)q)
            esc = q == '\'' ? "\\'" : "\\\"";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20 || c == 0x7f || (bytes && c >= 0x80)) {
            snprintf(hex, sizeof(hex), "\\x%02x", c);
            esc = hex;
        }
        if (esc == NULL) {
            run++;
            continue;
        }
        fc_repr_put(r, s + i - run, run);
        run = 0;
        fc_repr_puts(r, esc);
    }
    fc_repr_put(r, s + n - run, run);
    fc_repr_put(r, &q, 1);
}

static void fc_repr_global_name(struct fc_repr *r, const struct fc_pv *g)
{
    if (g != NULL && g->kind == FC_PV_GLOBAL) {
        fc_repr_puts(r, g->u.global.module);
        fc_repr_put(r, ".", 1);
        fc_repr_puts(r, g->u.global.name);
    } else {
        fc_repr_put(r, "?", 1);
    }
}

static void fc_repr_value(struct fc_repr *r, const struct fc_pv *v, int depth)
{
    char t[64];
    if (r->truncated || r->rc < 0)
        return;
    if (depth > FC_PICKLE_MAX_NESTING) {
        fc_repr_puts(r, "...");
        return;
    }
    switch (v->kind) {
    case FC_PV_NONE: fc_repr_puts(r, "None"); return;
    case FC_PV_BOOL: fc_repr_puts(r, v->u.b ? "True" : "False"); return;
    case FC_PV_INT:
        snprintf(t, sizeof(t), "%" PRId64, v->u.i);
        fc_repr_puts(r, t);
        return;
    case FC_PV_BIGINT: fc_repr_bigint(r, (const unsigned char *)v->u.str.s, v->u.str.len); return;
    case FC_PV_FLOAT:
        fc_format_float(t, sizeof(t), v->u.f);
        fc_repr_puts(r, t);
        return;
    case FC_PV_STR: fc_repr_str(r, v, 0); return;
    case FC_PV_BYTES: fc_repr_str(r, v, 1); return;
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET: {
        const size_t n = v->u.seq.n;
        if (v->kind == FC_PV_SET && n == 0) {
            fc_repr_puts(r, "set()");
            return;
        }
        fc_repr_puts(r, v->kind == FC_PV_LIST ? "[" : v->kind == FC_PV_TUPLE ? "(" : "{");
        for (size_t i = 0; i < n && !r->truncated; i++) {
            if (i > 0)
                fc_repr_puts(r, ", ");
            fc_repr_value(r, v->u.seq.items[i], depth + 1);
        }
        if (v->kind == FC_PV_TUPLE && n == 1)
            fc_repr_puts(r, ",");
        fc_repr_puts(r, v->kind == FC_PV_LIST ? "]" : v->kind == FC_PV_TUPLE ? ")" : "}");
        return;
    }
    case FC_PV_DICT:
        if (v->u.dict.ordered)
            fc_repr_puts(r, "OrderedDict(");
        fc_repr_puts(r, "{");
        for (size_t i = 0; i < v->u.dict.n && !r->truncated; i++) {
            if (i > 0)
                fc_repr_puts(r, ", ");
            fc_repr_value(r, v->u.dict.keys[i], depth + 1);
            fc_repr_puts(r, ": ");
            fc_repr_value(r, v->u.dict.vals[i], depth + 1);
        }
        fc_repr_puts(r, "}");
        if (v->u.dict.ordered)
            fc_repr_puts(r, ")");
        return;
    case FC_PV_GLOBAL: fc_repr_global_name(r, v); return;
    case FC_PV_CALL:
        if (v->u.call.callable->kind == FC_PV_GLOBAL && v->u.call.args != NULL &&
            v->u.call.args->kind == FC_PV_TUPLE && v->u.call.state == NULL) {
            /* Render as Python source: torch.device('cuda', 0). */
            fc_repr_global_name(r, v->u.call.callable);
            fc_repr_puts(r, "(");
            for (size_t i = 0; i < v->u.call.args->u.seq.n; i++) {
                if (i > 0)
                    fc_repr_puts(r, ", ");
                fc_repr_value(r, v->u.call.args->u.seq.items[i], depth + 1);
            }
            fc_repr_puts(r, ")");
            return;
        }
        /* fall through */
    case FC_PV_OBJECT:
        fc_repr_puts(r, v->kind == FC_PV_CALL ? "<call " : "<object ");
        fc_repr_global_name(r, v->u.call.callable);
        fc_repr_puts(r, ">");
        return;
    case FC_PV_TENSOR: {
        const struct fc_tensor_desc *d = &v->u.tensor.desc;
        fc_repr_puts(r, v->u.tensor.is_parameter ? "<parameter " : "<tensor ");
        fc_repr_puts(r, fc_dtype_name(d->dtype));
        fc_repr_puts(r, " [");
        for (int i = 0; i < d->ndim && i < FC_MAX_DIMS; i++) {
            snprintf(t, sizeof(t), i == 0 ? "%" PRId64 : ", %" PRId64, d->shape[i]);
            fc_repr_puts(r, t);
        }
        fc_repr_puts(r, "]>");
        return;
    }
    default: fc_repr_puts(r, "<storage>"); return;
    }
}

int fc_pv_repr(struct fc_buf *out, const struct fc_pv *v, size_t max_bytes)
{
    struct fc_repr r = {out, out->len, max_bytes, 0, FC_OK};
    if (v == NULL)
        fc_repr_puts(&r, "NULL");
    else
        fc_repr_value(&r, v, 0);
    if (r.rc < 0) {
        out->len = r.start;
        return r.rc;
    }
    if (!r.truncated)
        return FC_OK;
    if (max_bytes < 3) {
        out->len = r.start;
        return fc_buf_append(out, "...", max_bytes);
    }
    size_t cut = max_bytes - 3;
    if (cut > out->len - r.start)
        cut = out->len - r.start;
    while (cut > 0 && (out->data[r.start + cut] & 0xc0) == 0x80)
        cut--;
    out->len = r.start + cut;
    return fc_buf_append(out, "...", 3);
}

/* ---- writer ---- */

static int fc_pw_op(struct fc_buf *b, unsigned char op)
{
    return fc_buf_putc(b, op);
}

int fc_pw_proto(struct fc_buf *b)
{
    const unsigned char p[2] = {OP_PROTO, 2};
    return fc_buf_append(b, p, sizeof(p));
}

int fc_pw_stop(struct fc_buf *b)
{
    return fc_pw_op(b, OP_STOP);
}
int fc_pw_mark(struct fc_buf *b)
{
    return fc_pw_op(b, OP_MARK);
}
int fc_pw_none(struct fc_buf *b)
{
    return fc_pw_op(b, OP_NONE);
}
int fc_pw_bool(struct fc_buf *b, int v)
{
    return fc_pw_op(b, v ? OP_NEWTRUE : OP_NEWFALSE);
}
int fc_pw_empty_tuple(struct fc_buf *b)
{
    return fc_pw_op(b, OP_EMPTY_TUPLE);
}
int fc_pw_tuple(struct fc_buf *b)
{
    return fc_pw_op(b, OP_TUPLE);
}
int fc_pw_empty_dict(struct fc_buf *b)
{
    return fc_pw_op(b, OP_EMPTY_DICT);
}
int fc_pw_setitems(struct fc_buf *b)
{
    return fc_pw_op(b, OP_SETITEMS);
}
int fc_pw_setitem(struct fc_buf *b)
{
    return fc_pw_op(b, OP_SETITEM);
}
int fc_pw_empty_list(struct fc_buf *b)
{
    return fc_pw_op(b, OP_EMPTY_LIST);
}
int fc_pw_appends(struct fc_buf *b)
{
    return fc_pw_op(b, OP_APPENDS);
}
int fc_pw_append(struct fc_buf *b)
{
    return fc_pw_op(b, OP_APPEND);
}
int fc_pw_reduce(struct fc_buf *b)
{
    return fc_pw_op(b, OP_REDUCE);
}
int fc_pw_newobj(struct fc_buf *b)
{
    return fc_pw_op(b, OP_NEWOBJ);
}
int fc_pw_build(struct fc_buf *b)
{
    return fc_pw_op(b, OP_BUILD);
}
int fc_pw_binpersid(struct fc_buf *b)
{
    return fc_pw_op(b, OP_BINPERSID);
}

int fc_pw_tuple_n(struct fc_buf *b, int n)
{
    if (n < 1 || n > 3)
        return fc_error_set(FC_EINVAL, "pickle writer: TUPLE%d does not exist", n);
    return fc_pw_op(b, (unsigned char)(OP_TUPLE1 + n - 1));
}

int fc_pw_long_bytes(struct fc_buf *b, const unsigned char *le, size_t n)
{
    if (n < 256) {
        const unsigned char h[2] = {OP_LONG1, (unsigned char)n};
        FC_TRY(fc_buf_append(b, h, sizeof(h)));
    } else {
        if (n > INT32_MAX)
            return fc_error_set(FC_EINVAL, "pickle writer: integer of %zu bytes is too large", n);
        FC_TRY(fc_pw_op(b, OP_LONG4));
        FC_TRY(fc_buf_put_le32(b, (uint32_t)n));
    }
    return fc_buf_append(b, le, n);
}

int fc_pw_int(struct fc_buf *b, int64_t v)
{
    if (v >= 0 && v <= 0xff) {
        const unsigned char t[2] = {OP_BININT1, (unsigned char)v};
        return fc_buf_append(b, t, sizeof(t));
    }
    if (v >= 0 && v <= 0xffff) {
        FC_TRY(fc_pw_op(b, OP_BININT2));
        return fc_buf_put_le16(b, (uint16_t)v);
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
        FC_TRY(fc_pw_op(b, OP_BININT));
        return fc_buf_put_le32(b, (uint32_t)(int32_t)v);
    }
    /* pickle.encode_long: (bit_length >> 3) + 1 bytes, minus a redundant 0xff. */
    const uint64_t u = (uint64_t)v;
    const uint64_t mag = v < 0 ? (uint64_t)0 - u : u;
    int bits = 0;
    while (bits < 64 && (mag >> bits) != 0)
        bits++;
    size_t n = (size_t)(bits >> 3) + 1;
    unsigned char le[9];
    for (size_t i = 0; i < 9; i++)
        le[i] = i < 8 ? (unsigned char)(u >> (8 * i)) : (v < 0 ? 0xff : 0x00);
    if (v < 0 && n > 1 && le[n - 1] == 0xff && (le[n - 2] & 0x80) != 0)
        n--;
    return fc_pw_long_bytes(b, le, n);
}

int fc_pw_int_tuple(struct fc_buf *b, const int64_t *v, int n)
{
    if (n == 0)
        return fc_pw_empty_tuple(b);
    if (n > 3)
        FC_TRY(fc_pw_mark(b));
    for (int i = 0; i < n; i++)
        FC_TRY(fc_pw_int(b, v[i]));
    return n > 3 ? fc_pw_tuple(b) : fc_pw_tuple_n(b, n);
}

int fc_pw_float(struct fc_buf *b, double v)
{
    unsigned char t[9];
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    t[0] = OP_BINFLOAT;
    for (int i = 0; i < 8; i++)
        t[1 + i] = (unsigned char)(u >> (56 - 8 * i));
    return fc_buf_append(b, t, sizeof(t));
}

int fc_pw_str(struct fc_buf *b, const char *s, size_t len)
{
    if (len > UINT32_MAX)
        return fc_error_set(FC_EINVAL, "pickle writer: string of %zu bytes is too long", len);
    FC_TRY(fc_pw_op(b, OP_BINUNICODE));
    FC_TRY(fc_buf_put_le32(b, (uint32_t)len));
    return fc_buf_append(b, s, len);
}

int fc_pw_bytes(struct fc_buf *b, const void *p, size_t len)
{
    const unsigned char *s = p;
    size_t n = len;
    for (size_t i = 0; i < len; i++)
        if (s[i] >= 0x80)
            n++;
    if (n < len || n > UINT32_MAX)
        return fc_error_set(FC_EINVAL, "pickle writer: bytes of %zu are too long", len);
    FC_TRY(fc_pw_global(b, "_codecs", "encode"));
    FC_TRY(fc_pw_op(b, OP_BINUNICODE));
    FC_TRY(fc_buf_put_le32(b, (uint32_t)n));
    FC_TRY(fc_buf_reserve(b, n));
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x80) {
            b->data[b->len++] = s[i];
        } else {
            b->data[b->len++] = (unsigned char)(0xc0 | (s[i] >> 6));
            b->data[b->len++] = (unsigned char)(0x80 | (s[i] & 0x3f));
        }
    }
    FC_TRY(fc_pw_str(b, "latin1", 6));
    FC_TRY(fc_pw_op(b, OP_TUPLE2));
    return fc_pw_op(b, OP_REDUCE);
}

int fc_pw_global(struct fc_buf *b, const char *module, const char *name)
{
    if (module[0] == '\0' || name[0] == '\0' || strchr(module, '\n') != NULL ||
        strchr(name, '\n') != NULL)
        return fc_error_set(FC_EINVAL, "pickle writer: invalid global name");
    /*
     * Python's fix_imports for protocol < 3, except for the names the reader
     * would map to something else (__builtin__.long is builtins.int).
     */
    static const char *const py2_names[] = {"xrange",  "reduce", "intern",    "unichr",
                                            "unicode", "long",   "basestring"};
    int py2_name = 0;
    for (size_t i = 0; i < FC_COUNT(py2_names); i++)
        if (strcmp(name, py2_names[i]) == 0)
            py2_name = 1;
    if (strcmp(module, "builtins") == 0 && !py2_name)
        module = "__builtin__";
    else if (strcmp(module, "copyreg") == 0)
        module = "copy_reg";
    FC_TRY(fc_pw_op(b, OP_GLOBAL));
    FC_TRY(fc_buf_puts(b, module));
    FC_TRY(fc_buf_putc(b, '\n'));
    FC_TRY(fc_buf_puts(b, name));
    return fc_buf_putc(b, '\n');
}

#define FC_PW_BATCH 1000

static int fc_pw_value_at(struct fc_buf *b, const struct fc_pv *v, int depth,
                          const struct fc_pw_tensor_hook *h);

/* pickle._batch_appends: MARK ... APPENDS per 1000, a lone item with APPEND. */
static int fc_pw_batch_appends(struct fc_buf *b, struct fc_pv *const *items, size_t n, int depth,
                               const struct fc_pw_tensor_hook *h)
{
    for (size_t i = 0; i < n; i += FC_PW_BATCH) {
        const size_t k = n - i < FC_PW_BATCH ? n - i : FC_PW_BATCH;
        if (k == 1) {
            FC_TRY(fc_pw_value_at(b, items[i], depth + 1, h));
            FC_TRY(fc_pw_append(b));
            continue;
        }
        FC_TRY(fc_pw_mark(b));
        for (size_t j = 0; j < k; j++)
            FC_TRY(fc_pw_value_at(b, items[i + j], depth + 1, h));
        FC_TRY(fc_pw_appends(b));
    }
    return FC_OK;
}

static int fc_pw_batch_setitems(struct fc_buf *b, const struct fc_pv *d, int depth,
                                const struct fc_pw_tensor_hook *h)
{
    const size_t n = d->u.dict.n;
    for (size_t i = 0; i < n; i += FC_PW_BATCH) {
        const size_t k = n - i < FC_PW_BATCH ? n - i : FC_PW_BATCH;
        if (k > 1)
            FC_TRY(fc_pw_mark(b));
        for (size_t j = 0; j < k; j++) {
            FC_TRY(fc_pw_value_at(b, d->u.dict.keys[i + j], depth + 1, h));
            FC_TRY(fc_pw_value_at(b, d->u.dict.vals[i + j], depth + 1, h));
        }
        FC_TRY(k > 1 ? fc_pw_setitems(b) : fc_pw_setitem(b));
    }
    return FC_OK;
}

static int fc_pw_value_at(struct fc_buf *b, const struct fc_pv *v, int depth,
                          const struct fc_pw_tensor_hook *h)
{
    if (v == NULL)
        return fc_error_set(FC_EINVAL, "pickle writer: NULL value");
    if (depth > FC_PICKLE_MAX_NESTING)
        return fc_error_set(FC_EINVAL, "pickle writer: value nested deeper than %d levels",
                            FC_PICKLE_MAX_NESTING);
    switch (v->kind) {
    case FC_PV_NONE: return fc_pw_none(b);
    case FC_PV_BOOL: return fc_pw_bool(b, v->u.b);
    case FC_PV_INT: return fc_pw_int(b, v->u.i);
    case FC_PV_BIGINT: return fc_pw_long_bytes(b, (const unsigned char *)v->u.str.s, v->u.str.len);
    case FC_PV_FLOAT: return fc_pw_float(b, v->u.f);
    case FC_PV_STR: return fc_pw_str(b, v->u.str.s, v->u.str.len);
    case FC_PV_BYTES: return fc_pw_bytes(b, v->u.str.s, v->u.str.len);
    case FC_PV_LIST:
        FC_TRY(fc_pw_empty_list(b));
        return fc_pw_batch_appends(b, v->u.seq.items, v->u.seq.n, depth, h);
    case FC_PV_TUPLE: {
        const size_t n = v->u.seq.n;
        if (n == 0)
            return fc_pw_empty_tuple(b);
        if (n > 3)
            FC_TRY(fc_pw_mark(b));
        for (size_t i = 0; i < n; i++)
            FC_TRY(fc_pw_value_at(b, v->u.seq.items[i], depth + 1, h));
        return n > 3 ? fc_pw_tuple(b) : fc_pw_tuple_n(b, (int)n);
    }
    case FC_PV_SET:
        FC_TRY(fc_pw_global(b, "builtins", "set"));
        FC_TRY(fc_pw_empty_list(b));
        FC_TRY(fc_pw_batch_appends(b, v->u.seq.items, v->u.seq.n, depth, h));
        FC_TRY(fc_pw_tuple_n(b, 1));
        return fc_pw_reduce(b);
    case FC_PV_DICT:
        if (v->u.dict.ordered) {
            FC_TRY(fc_pw_global(b, "collections", "OrderedDict"));
            FC_TRY(fc_pw_empty_tuple(b));
            FC_TRY(fc_pw_reduce(b));
        } else {
            FC_TRY(fc_pw_empty_dict(b));
        }
        FC_TRY(fc_pw_batch_setitems(b, v, depth, h));
        if (v->u.dict.state != NULL) {
            FC_TRY(fc_pw_value_at(b, v->u.dict.state, depth + 1, h));
            FC_TRY(fc_pw_build(b));
        }
        return FC_OK;
    case FC_PV_GLOBAL: return fc_pw_global(b, v->u.global.module, v->u.global.name);
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        if (v->u.call.args == NULL || v->u.call.args->kind != FC_PV_TUPLE)
            return fc_error_set(FC_EINVAL, "pickle writer: call arguments are not a tuple");
        FC_TRY(fc_pw_value_at(b, v->u.call.callable, depth + 1, h));
        FC_TRY(fc_pw_value_at(b, v->u.call.args, depth + 1, h));
        FC_TRY(v->kind == FC_PV_CALL ? fc_pw_reduce(b) : fc_pw_newobj(b));
        if (v->u.call.state != NULL) {
            FC_TRY(fc_pw_value_at(b, v->u.call.state, depth + 1, h));
            FC_TRY(fc_pw_build(b));
        }
        return FC_OK;
    case FC_PV_TENSOR:
        if (h != NULL)
            return h->fn(h->ctx, b, &v->u.tensor);
        /* fall through */
    default:
        return fc_error_set(FC_EINVAL, "pickle writer: a %s cannot be written as a plain value",
                            fc_pv_kind_name(v->kind));
    }
}

int fc_pw_value(struct fc_buf *b, const struct fc_pv *v)
{
    return fc_pw_value_at(b, v, 0, NULL);
}

int fc_pw_value_with(struct fc_buf *b, const struct fc_pv *v, const struct fc_pw_tensor_hook *h)
{
    return fc_pw_value_at(b, v, 0, h);
}

/*
 * fc_pw_memoize() - rewrite a stream made of the fc_pw_* opcodes so that
 * repeated GLOBALs and strings are written once and fetched from the memo
 * afterwards (BINPUT/BINGET, LONG_ forms past 255).  A DCP .metadata names
 * the same classes and field names for every chunk; memoised it is about
 * half the size and unpickles into shared nodes.
 */
int fc_pw_memoize(const unsigned char *in, size_t len, struct fc_buf *out)
{
    struct fc_strmap seen = FC_STRMAP_INIT;
    char **keys = NULL;
    size_t nkeys = 0, pos = 0;
    int rc = FC_OK;
    struct fc_vm reader; /* fc_op_decode() reads through a VM; no hooks, nothing is run */
    memset(&reader, 0, sizeof(reader));
    reader.data = in;
    reader.len = len;
    while (pos < len && rc == FC_OK) {
        const unsigned char op = in[pos];
        /*
         * Refused: a stream that already uses the memo (its keys would clash
         * with the ones given here) and FRAME (its length would no longer
         * match once repeats shrink to GETs).
         */
        if (fc_ops[op].name == NULL || (fc_ops[op].flags & (OPF_PUT | OPF_GET)) || op == OP_FRAME) {
            rc = fc_error_set(FC_EINVAL, "pickle memoizer: opcode 0x%02x at %zu not expected", op,
                              pos);
            goto done;
        }
        size_t end = pos + 1;
        struct fc_op_arg arg;
        if (fc_op_decode(&reader, op, pos, &end, &arg) != FC_OK) {
            rc = fc_error_set(FC_EINVAL, "pickle memoizer: truncated opcode at %zu", pos);
            goto done;
        }
        const size_t n = end - pos; /* opcode plus argument bytes */
        const int memo = op == OP_BINUNICODE || op == OP_GLOBAL;
        /* Short strings cost as much to fetch as to write; NUL-carrying ones cannot be keys. */
        if (memo && n > 6 && memchr(in + pos, '\0', n) == NULL) {
            char *key = fc_strndup((const char *)in + pos, n);
            size_t idx = 0;
            if (key == NULL) {
                rc = fc_error_set(FC_ENOMEM, "out of memory");
                goto done;
            }
            if (fc_strmap_get(&seen, key, &idx)) {
                fc_free(key);
                rc = idx < 256 ? fc_buf_putc(out, 'h') : fc_buf_putc(out, 'j');
                if (rc == FC_OK)
                    rc = idx < 256 ? fc_buf_putc(out, (unsigned char)idx)
                                   : fc_buf_put_le32(out, (uint32_t)idx);
                pos += n;
                continue;
            }
            char **k2 = fc_reallocarray(keys, nkeys + 1, sizeof(*keys));
            if (k2 == NULL) {
                fc_free(key);
                rc = fc_error_set(FC_ENOMEM, "out of memory");
                goto done;
            }
            keys = k2;
            keys[nkeys] = key;
            rc = fc_strmap_put(&seen, key, nkeys, NULL);
            if (rc < 0) {
                fc_free(key);
                goto done;
            }
            rc = fc_buf_append(out, in + pos, n);
            if (rc == FC_OK)
                rc = nkeys < 256 ? fc_buf_putc(out, 'q') : fc_buf_putc(out, 'r');
            if (rc == FC_OK)
                rc = nkeys < 256 ? fc_buf_putc(out, (unsigned char)nkeys)
                                 : fc_buf_put_le32(out, (uint32_t)nkeys);
            nkeys++;
        } else {
            rc = fc_buf_append(out, in + pos, n);
        }
        pos += n;
    }
done:
    for (size_t i = 0; i < nkeys; i++)
        fc_free(keys[i]);
    fc_free(keys);
    fc_strmap_release(&seen);
    return rc;
}
