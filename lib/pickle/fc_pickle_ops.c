/*
 * fc_pickle_ops.c - the one description of the pickle opcodes (fc_ops) and the
 * decoder of their arguments, which the VM, the memo pre-scan and the writer's
 * memoizer all use.
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

#define WO_SY (OPF_WEIGHTS_ONLY | OPF_SYMBOLIC)
const struct fc_op_info fc_ops[256] = {
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
int fc_op_decode(struct fc_vm *vm, unsigned op, size_t op_off, size_t *pos, struct fc_op_arg *a)
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
int fc_vm_decode_arg(struct fc_vm *vm)
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
int fc_parse_dec(const unsigned char *s, size_t n, int64_t *out)
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
struct fc_pv *fc_vm_long(struct fc_vm *vm, const unsigned char *b, size_t n)
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
