/* Compiled OTLP protobuf span decoder: the fast path of monitor/ingest/decode.py.
 *
 * One walk over the wire bytes of a TracesData / ExportTraceServiceRequest yields, per span, what
 * `SpanFacts` needs: ids (as hex), name, service, times, and the attributes `dialects.apply` may
 * read, as a dict with only those keys (`dialects.ATTRIBUTE_KEYS`, `dialects.INDEXED_PREFIXES`).
 * Every other attribute is validated, never materialised; a span with no such attribute gets its
 * role without any Python call (ROOT without a parent, else OTHER: what `apply` says for `{}`).
 *
 * It accepts a message only when it is sure upb would parse it to the same values: the whole
 * message is checked against the installed schema (wire types, lengths, UTF-8 of every `string`
 * field, nesting), and anything outside the canonical shape every SDK and the Collector write
 * (a singular message field repeated and so merged, two members of a oneof, groups, deep nesting,
 * an AnyValue field this file does not know) makes `decode_spans` return None. The caller then
 * runs the pure-Python reference path, which also produces every reject reason: errors are rare,
 * exactness is not negotiable, and so the difficult cases have one implementation only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Field kinds of the schema table (built in Python from the installed descriptors). */
enum { K_UNKNOWN = 0, K_VARINT = 1, K_FIXED64 = 2, K_FIXED32 = 3, K_BYTES = 4, K_STRING = 5, K_MESSAGE = 6 };
/* Message indexes: the caller passes these first, in this order. */
enum { M_TRACES = 0, M_RESOURCE_SPANS, M_RESOURCE, M_SCOPE_SPANS, M_SPAN, M_EVENT, M_KEY_VALUE, M_ANY_VALUE,
       M_ARRAY_VALUE, M_KV_LIST, M_FIXED };

#define MAX_FIELD 64
#define MAX_MESSAGES 32
#define MAX_DEPTH 24 /* deeper than any real attribute; beyond it the reference path decides */

typedef struct {
    uint8_t kind;
    uint8_t child;
} field_t;

static field_t schema[MAX_MESSAGES][MAX_FIELD];
static int n_messages = 0;

/* Relevant attribute keys: open-addressing table of interned str objects, plus prefixes. */
#define KEY_SLOTS 256
typedef struct {
    const char *s;
    Py_ssize_t n;
    PyObject *obj;
} key_t_;
static key_t_ keys[KEY_SLOTS];
static uint8_t first_byte[256];
#define MAX_PREFIXES 16
static key_t_ prefixes[MAX_PREFIXES];
static int n_prefixes = 0;
#define MAX_EVENTS 8
static key_t_ merged_events[MAX_EVENTS];
static int n_merged = 0;

static PyObject *span_facts_cls = NULL, *role_root = NULL, *bad_attribute = NULL, *bad_timestamp = NULL;
static PyObject *apply_fn = NULL, *wants_events_fn = NULL, *unknown_service = NULL;
static PyObject *str_role = NULL, *str_problems = NULL, *empty_str = NULL;
static int ready = 0;

typedef const uint8_t *ptr;

/* Any failure: return -1 and let the reference path decide (it may be an error, or a shape we
 * do not handle). A Python exception may be set; the entry point clears it. */
#define FAIL (-1)

/* --- wire primitives --------------------------------------------------------------------- */

static inline int read_varint(ptr *pp, ptr end, uint64_t *out)
{
    ptr p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return FAIL;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return FAIL; /* more than 10 bytes */
}

/* A tag as upb reads it: at most 5 bytes, within 32 bits, field number not 0. */
static inline int read_tag(ptr *pp, ptr end, uint32_t *field, int *wt)
{
    ptr start = *pp;
    uint64_t v;
    if (*start < 0x80) {
        v = *start;
        *pp = start + 1;
    }
    else {
        if (read_varint(pp, end, &v) || *pp - start > 5 || v > 0xffffffffu)
            return FAIL;
    }
    if ((v >> 3) == 0)
        return FAIL;
    *field = (uint32_t)(v >> 3);
    *wt = (int)(v & 7);
    return 0;
}

static inline int read_len(ptr *pp, ptr end, ptr *body, Py_ssize_t *n)
{
    uint64_t len;
    if (read_varint(pp, end, &len) || len > 0x7fffffffu || len > (uint64_t)(end - *pp))
        return FAIL;
    *body = *pp;
    *n = (Py_ssize_t)len;
    *pp += len;
    return 0;
}

static inline int read_fixed64(ptr *pp, ptr end, uint64_t *out)
{
    if (end - *pp < 8)
        return FAIL;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | (*pp)[i];
    *pp += 8;
    *out = v;
    return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as upb checks it. */
static int utf8_ok(ptr s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        }
        else if (c < 0xC2) {
            return 0;
        }
        else if (c < 0xE0) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        }
        else if (c < 0xF0) {
            if (i + 2 >= n)
                return 0;
            uint8_t c1 = s[i + 1];
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F))
                return 0;
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            i += 3;
        }
        else if (c < 0xF5) {
            if (i + 3 >= n)
                return 0;
            uint8_t c1 = s[i + 1];
            if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
                return 0;
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            i += 4;
        }
        else {
            return 0;
        }
    }
    return 1;
}

static int validate_msg(int type, ptr p, ptr end, int depth);

/* One field of message `type` whose tag was just read: check it against the schema and skip it.
 * A known field with an unexpected wire type is left to the reference path. */
static int skip_field(int type, uint32_t field, int wt, ptr *pp, ptr end, int depth)
{
    field_t f = field < MAX_FIELD ? schema[type][field] : (field_t){K_UNKNOWN, 0};
    switch (wt) {
    case 0: {
        uint64_t v;
        if (f.kind != K_UNKNOWN && f.kind != K_VARINT)
            return FAIL;
        return read_varint(pp, end, &v);
    }
    case 1:
        if ((f.kind != K_UNKNOWN && f.kind != K_FIXED64) || end - *pp < 8)
            return FAIL;
        *pp += 8;
        return 0;
    case 5:
        if ((f.kind != K_UNKNOWN && f.kind != K_FIXED32) || end - *pp < 4)
            return FAIL;
        *pp += 4;
        return 0;
    case 2: {
        ptr body;
        Py_ssize_t n;
        if (read_len(pp, end, &body, &n))
            return FAIL;
        switch (f.kind) {
        case K_UNKNOWN:
        case K_BYTES:
            return 0;
        case K_STRING:
            return utf8_ok(body, n) ? 0 : FAIL;
        case K_MESSAGE:
            return validate_msg(f.child, body, body + n, depth + 1);
        default:
            return FAIL; /* packed scalars: none in OTLP traces */
        }
    }
    default:
        return FAIL; /* groups and invalid wire types */
    }
}

static int validate_msg(int type, ptr p, ptr end, int depth)
{
    if (depth > MAX_DEPTH)
        return FAIL;
    while (p < end) {
        uint32_t field;
        int wt;
        if (read_tag(&p, end, &field, &wt) || skip_field(type, field, wt, &p, end, depth))
            return FAIL;
    }
    return 0;
}

/* --- attribute values -------------------------------------------------------------------- */

typedef struct {
    ptr key;
    Py_ssize_t key_n;
    ptr val;
    Py_ssize_t val_n;
    int has_val;
} kv_t;

/* A KeyValue: its key (validated; the last one wins, as in upb) and its value's bytes (not yet
 * validated). Two `value` fields would be merged by upb: left to the reference path. */
static int read_kv(ptr p, ptr end, kv_t *kv, int depth)
{
    kv->key = p;
    kv->key_n = 0;
    kv->has_val = 0;
    while (p < end) {
        uint32_t field;
        int wt;
        if (read_tag(&p, end, &field, &wt))
            return FAIL;
        if (field == 1 && wt == 2) {
            if (read_len(&p, end, &kv->key, &kv->key_n) || !utf8_ok(kv->key, kv->key_n))
                return FAIL;
        }
        else if (field == 2 && wt == 2) {
            if (kv->has_val || read_len(&p, end, &kv->val, &kv->val_n))
                return FAIL;
            kv->has_val = 1;
        }
        else if (skip_field(M_KEY_VALUE, field, wt, &p, end, depth)) {
            return FAIL;
        }
    }
    return 0;
}

static PyObject NONE_SENTINEL_OBJ; /* address only: "the AnyValue has no value set" */
#define NO_VALUE (&NONE_SENTINEL_OBJ)

static PyObject *any_value(ptr p, ptr end, int depth);

static PyObject *array_value(ptr p, ptr end, int depth)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt) || field != 1 || wt != 2 || read_len(&p, end, &body, &n))
            goto fail;
        PyObject *v = any_value(body, body + n, depth + 1);
        if (v == NULL)
            goto fail;
        if (v != NO_VALUE) {
            int rc = PyList_Append(out, v);
            Py_DECREF(v);
            if (rc)
                goto fail;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *kvlist_value(ptr p, ptr end, int depth)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        kv_t kv;
        if (read_tag(&p, end, &field, &wt) || field != 1 || wt != 2 || read_len(&p, end, &body, &n)
            || read_kv(body, body + n, &kv, depth + 1))
            goto fail;
        if (!kv.has_val)
            continue;
        PyObject *v = any_value(kv.val, kv.val + kv.val_n, depth + 1);
        if (v == NULL)
            goto fail;
        if (v == NO_VALUE)
            continue;
        PyObject *k = PyUnicode_DecodeUTF8((const char *)kv.key, kv.key_n, NULL);
        int rc = k == NULL ? -1 : PyDict_SetItem(out, k, v);
        Py_XDECREF(k);
        Py_DECREF(v);
        if (rc)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* An AnyValue as `decode._pb_value` reads it; NO_VALUE when no member is set, NULL to give up.
 * Exactly one field, one of the seven members: anything else is the reference path's. */
static PyObject *any_value(ptr p, ptr end, int depth)
{
    if (p == end)
        return NO_VALUE;
    if (depth > MAX_DEPTH)
        return NULL;
    uint32_t field;
    int wt;
    uint64_t v;
    ptr body;
    Py_ssize_t n;
    PyObject *out;
    if (read_tag(&p, end, &field, &wt))
        return NULL;
    switch (field) {
    case 1:
        if (wt != 2 || read_len(&p, end, &body, &n))
            return NULL;
        out = PyUnicode_DecodeUTF8((const char *)body, n, NULL);
        break;
    case 2:
        if (wt != 0 || read_varint(&p, end, &v))
            return NULL;
        out = PyBool_FromLong(v != 0);
        break;
    case 3:
        if (wt != 0 || read_varint(&p, end, &v))
            return NULL;
        out = PyLong_FromLongLong((long long)(int64_t)v);
        break;
    case 4: {
        double d;
        if (wt != 1 || read_fixed64(&p, end, &v))
            return NULL;
        memcpy(&d, &v, 8);
        out = PyFloat_FromDouble(d);
        break;
    }
    case 5:
        if (wt != 2 || read_len(&p, end, &body, &n))
            return NULL;
        out = array_value(body, body + n, depth);
        break;
    case 6:
        if (wt != 2 || read_len(&p, end, &body, &n))
            return NULL;
        out = kvlist_value(body, body + n, depth);
        break;
    case 7:
        if (wt != 2 || read_len(&p, end, &body, &n))
            return NULL;
        out = PyBytes_FromStringAndSize((const char *)body, n);
        break;
    default:
        return NULL;
    }
    if (out != NULL && p != end) { /* a second field: a merge or another member */
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* --- relevant keys ----------------------------------------------------------------------- */

static inline uint32_t key_hash(ptr s, Py_ssize_t n)
{
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 16777619u;
    return h;
}

/* The str key under which `dialects.apply` may look this attribute up; NULL (no error) if it
 * never does, NULL with an error set on failure. */
static PyObject *relevant_key(ptr s, Py_ssize_t n)
{
    if (n == 0 || !first_byte[s[0]])
        return NULL;
    uint32_t h = key_hash(s, n);
    for (uint32_t i = 0; i < KEY_SLOTS; i++) {
        key_t_ *k = &keys[(h + i) & (KEY_SLOTS - 1)];
        if (k->obj == NULL)
            break;
        if (k->n == n && memcmp(k->s, s, n) == 0) {
            Py_INCREF(k->obj);
            return k->obj;
        }
    }
    for (int i = 0; i < n_prefixes; i++) {
        key_t_ *k = &prefixes[i];
        if (n > k->n && memcmp(k->s, s, k->n) == 0)
            return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    }
    return NULL;
}

/* Read one attribute KeyValue; if its key is relevant, store its value in *attrs (created on
 * first use); otherwise only validate the value. */
static int take_attribute(ptr p, ptr end, PyObject **attrs, int depth)
{
    kv_t kv;
    if (read_kv(p, end, &kv, depth))
        return FAIL;
    PyObject *key = relevant_key(kv.key, kv.key_n);
    if (key == NULL) {
        if (PyErr_Occurred())
            return FAIL;
        return kv.has_val ? validate_msg(M_ANY_VALUE, kv.val, kv.val + kv.val_n, depth + 1) : 0;
    }
    int rc = 0;
    if (kv.has_val) {
        PyObject *v = any_value(kv.val, kv.val + kv.val_n, depth + 1);
        if (v == NULL) {
            rc = FAIL;
        }
        else if (v != NO_VALUE) {
            if (*attrs == NULL && (*attrs = PyDict_New()) == NULL)
                rc = FAIL;
            else
                rc = PyDict_SetItem(*attrs, key, v);
            Py_DECREF(v);
        }
    }
    Py_DECREF(key);
    return rc;
}

/* --- spans ------------------------------------------------------------------------------- */

static PyObject *hex(ptr b, Py_ssize_t n)
{
    static const char digits[] = "0123456789abcdef";
    if (n == 0) {
        Py_INCREF(empty_str);
        return empty_str;
    }
    PyObject *s = PyUnicode_New(2 * n, 127);
    if (s == NULL)
        return NULL;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        d[2 * i] = digits[b[i] >> 4];
        d[2 * i + 1] = digits[b[i] & 15];
    }
    return s;
}

static int all_zero(ptr b, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

typedef struct {
    int64_t lo, hi; /* plausible span times */
    PyObject *spans, *problems;
    long dropped;
} ctx_t;

#define MAX_EVENT_SEGMENTS 64

/* Fold the attributes of the span's merged events into attrs (setdefault), as decode.py does. */
static int merge_events(PyObject *attrs, ptr *ev, Py_ssize_t *ev_n, int n_ev, int depth)
{
    for (int e = 0; e < n_ev; e++) {
        ptr p = ev[e], end = ev[e] + ev_n[e];
        ptr name = NULL;
        Py_ssize_t name_n = 0;
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        while (p < end) { /* validated already: find the (last) name */
            if (read_tag(&p, end, &field, &wt))
                return FAIL;
            if (field == 2 && wt == 2) {
                if (read_len(&p, end, &name, &name_n))
                    return FAIL;
            }
            else if (skip_field(M_EVENT, field, wt, &p, end, depth)) {
                return FAIL;
            }
        }
        int merged = 0;
        for (int i = 0; i < n_merged && !merged; i++)
            merged = name != NULL && merged_events[i].n == name_n && memcmp(merged_events[i].s, name, name_n) == 0;
        if (!merged)
            continue;
        PyObject *ev_attrs = NULL;
        for (p = ev[e]; p < end;) {
            if (read_tag(&p, end, &field, &wt))
                goto fail;
            if (field == 3 && wt == 2) {
                if (read_len(&p, end, &body, &n) || take_attribute(body, body + n, &ev_attrs, depth + 1))
                    goto fail;
            }
            else if (skip_field(M_EVENT, field, wt, &p, end, depth)) {
                goto fail;
            }
        }
        if (ev_attrs != NULL) {
            PyObject *k, *v;
            Py_ssize_t pos = 0;
            while (PyDict_Next(ev_attrs, &pos, &k, &v)) {
                if (PyDict_SetDefault(attrs, k, v) == NULL)
                    goto fail;
            }
            Py_DECREF(ev_attrs);
        }
        continue;
    fail:
        Py_XDECREF(ev_attrs);
        return FAIL;
    }
    return 0;
}

static int append_problem(PyObject *facts, PyObject *problem)
{
    PyObject *lst = PyObject_GetAttr(facts, str_problems);
    if (lst == NULL)
        return FAIL;
    int rc = PyList_Append(lst, problem);
    Py_DECREF(lst);
    return rc;
}

static int span(ctx_t *c, PyObject *service, ptr p, ptr end, int depth)
{
    ptr tid = NULL, sid = NULL, pid = NULL, name = NULL;
    Py_ssize_t tid_n = 0, sid_n = 0, pid_n = 0, name_n = 0;
    uint64_t start = 0, stop = 0;
    PyObject *attrs = NULL, *facts = NULL;
    ptr ev[MAX_EVENT_SEGMENTS];
    Py_ssize_t ev_n[MAX_EVENT_SEGMENTS];
    int n_ev = 0;
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            goto fail;
        if (wt == 2 && (field == 1 || field == 2 || field == 4 || field == 5 || field == 9 || field == 11)) {
            if (read_len(&p, end, &body, &n))
                goto fail;
            switch (field) {
            case 1: tid = body; tid_n = n; break;
            case 2: sid = body; sid_n = n; break;
            case 4: pid = body; pid_n = n; break;
            case 5:
                if (!utf8_ok(body, n))
                    goto fail;
                name = body;
                name_n = n;
                break;
            case 9:
                if (take_attribute(body, body + n, &attrs, depth + 1))
                    goto fail;
                break;
            case 11:
                if (n_ev == MAX_EVENT_SEGMENTS || validate_msg(M_EVENT, body, body + n, depth + 1))
                    goto fail;
                ev[n_ev] = body;
                ev_n[n_ev++] = n;
                break;
            }
        }
        else if (wt == 1 && (field == 7 || field == 8)) {
            if (read_fixed64(&p, end, field == 7 ? &start : &stop))
                goto fail;
        }
        else if (skip_field(M_SPAN, field, wt, &p, end, depth)) {
            goto fail;
        }
    }
    if (tid_n != 16 || sid_n != 8 || (pid_n && pid_n != 8) || all_zero(tid, 16) || all_zero(sid, 8)) {
        c->dropped++;
        Py_XDECREF(attrs);
        return 0;
    }
    /* end < start or start < now - past or end > now + future: times dropped, span kept */
    int bad_times = stop < start || (c->lo > 0 && start < (uint64_t)c->lo) || c->hi < 0 || stop > (uint64_t)c->hi;
    PyObject *args[7] = {NULL};
    args[0] = hex(tid, 16);
    args[1] = hex(sid, 8);
    args[2] = hex(pid, pid_n);
    args[3] = name_n ? PyUnicode_DecodeUTF8((const char *)name, name_n, NULL) : (Py_INCREF(empty_str), empty_str);
    args[4] = service;
    args[5] = PyLong_FromUnsignedLongLong(bad_times ? 0 : start);
    args[6] = PyLong_FromUnsignedLongLong(bad_times ? 0 : stop);
    if (args[0] && args[1] && args[2] && args[3] && args[5] && args[6])
        facts = PyObject_Vectorcall(span_facts_cls, args, 7, NULL);
    for (int i = 0; i < 7; i++)
        if (i != 4)
            Py_XDECREF(args[i]);
    if (facts == NULL)
        goto fail;
    if (bad_times && append_problem(facts, bad_timestamp))
        goto fail;
    int mapped = attrs != NULL;
    if (mapped) {
        if (n_ev) {
            PyObject *w = PyObject_CallOneArg(wants_events_fn, attrs);
            int wants = w == NULL ? -1 : PyObject_IsTrue(w);
            Py_XDECREF(w);
            if (wants < 0 || (wants && merge_events(attrs, ev, ev_n, n_ev, depth + 1)))
                goto fail;
        }
        PyObject *r = PyObject_CallFunctionObjArgs(apply_fn, facts, attrs, NULL);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        Py_CLEAR(attrs);
    }
    else if (pid_n == 0 && PyObject_SetAttr(facts, str_role, role_root)) {
        goto fail; /* apply(facts, {}): ROOT without a parent, else OTHER (the default) */
    }
    if (bad_times || mapped) { /* facts.problems may hold something: the message's list gets it */
        PyObject *lst = PyObject_GetAttr(facts, str_problems);
        if (lst == NULL)
            goto fail;
        Py_ssize_t end_ = PyList_GET_SIZE(c->problems);
        int rc = PyList_GET_SIZE(lst) ? PyList_SetSlice(c->problems, end_, end_, lst) : 0;
        Py_DECREF(lst);
        if (rc)
            goto fail;
    }
    if (PyList_Append(c->spans, facts))
        goto fail;
    Py_DECREF(facts);
    return 0;
fail:
    Py_XDECREF(attrs);
    Py_XDECREF(facts);
    return FAIL;
}

static int scope_spans(ctx_t *c, PyObject *service, ptr p, ptr end, int depth)
{
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            return FAIL;
        if (field == 2 && wt == 2) {
            if (read_len(&p, end, &body, &n) || span(c, service, body, body + n, depth + 1))
                return FAIL;
        }
        else if (skip_field(M_SCOPE_SPANS, field, wt, &p, end, depth)) {
            return FAIL;
        }
    }
    return 0;
}

/* The resource's service.name: the first `service.name` attribute decides, as in decode.py. */
static int resource(ptr p, ptr end, PyObject **service, int *bad, int depth)
{
    int found = 0;
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            return FAIL;
        if (field == 1 && wt == 2) {
            kv_t kv;
            if (read_len(&p, end, &body, &n) || read_kv(body, body + n, &kv, depth + 1))
                return FAIL;
            if (kv.has_val && validate_msg(M_ANY_VALUE, kv.val, kv.val + kv.val_n, depth + 2))
                return FAIL;
            if (found || kv.key_n != 12 || memcmp(kv.key, "service.name", 12) != 0)
                continue;
            found = 1;
            PyObject *v = kv.has_val ? any_value(kv.val, kv.val + kv.val_n, depth + 2) : NO_VALUE;
            if (v == NULL)
                return FAIL;
            if (v != NO_VALUE && PyUnicode_Check(v) && PyUnicode_GET_LENGTH(v) > 0) {
                *service = v;
            }
            else {
                *bad = 1; /* string_value is "" for any other member, and for an empty string */
                if (v != NO_VALUE)
                    Py_DECREF(v);
            }
        }
        else if (skip_field(M_RESOURCE, field, wt, &p, end, depth)) {
            return FAIL;
        }
    }
    return 0;
}

#define MAX_SCOPES 256

static int resource_spans(ctx_t *c, ptr p, ptr end, int depth)
{
    ptr scopes[MAX_SCOPES];
    Py_ssize_t scopes_n[MAX_SCOPES];
    int n_scopes = 0, seen_resource = 0, bad = 0;
    PyObject *service = NULL;
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            goto fail;
        if (field == 1 && wt == 2) {
            /* a second `resource` would be merged by upb: the reference path's case */
            if (seen_resource++ || read_len(&p, end, &body, &n) || resource(body, body + n, &service, &bad, depth + 1))
                goto fail;
        }
        else if (field == 2 && wt == 2) {
            if (n_scopes == MAX_SCOPES || read_len(&p, end, &body, &n))
                goto fail;
            scopes[n_scopes] = body;
            scopes_n[n_scopes++] = n;
        }
        else if (skip_field(M_RESOURCE_SPANS, field, wt, &p, end, depth)) {
            goto fail;
        }
    }
    if (bad && PyList_Append(c->problems, bad_attribute))
        goto fail;
    if (service == NULL) {
        service = unknown_service;
        Py_INCREF(service);
    }
    for (int i = 0; i < n_scopes; i++)
        if (scope_spans(c, service, scopes[i], scopes[i] + scopes_n[i], depth + 1))
            goto fail;
    Py_DECREF(service);
    return 0;
fail:
    Py_XDECREF(service);
    return FAIL;
}

static PyObject *decode_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_wire.init was not called");
        return NULL;
    }
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_spans(value: bytes, now_ns: int)");
        return NULL;
    }
    int overflow = 0;
    long long now = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (now == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || now > (1LL << 62) || now < -(1LL << 62))
        Py_RETURN_NONE;
    ctx_t c;
    c.lo = now - 30LL * 86400 * 1000000000LL; /* decode._PAST_NS */
    c.hi = now + 3600LL * 1000000000LL;       /* decode._FUTURE_NS */
    c.dropped = 0;
    c.spans = PyList_New(0);
    c.problems = PyList_New(0);
    if (c.spans == NULL || c.problems == NULL)
        goto fail;
    ptr p = (ptr)PyBytes_AS_STRING(args[0]);
    ptr end = p + PyBytes_GET_SIZE(args[0]);
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            goto fallback;
        if (field == 1 && wt == 2) {
            if (read_len(&p, end, &body, &n) || resource_spans(&c, body, body + n, 1))
                goto fallback;
        }
        else if (skip_field(M_TRACES, field, wt, &p, end, 0)) {
            goto fallback;
        }
    }
    return Py_BuildValue("(NNl)", c.spans, c.problems, c.dropped);
fallback:
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            goto fail; /* KeyboardInterrupt and the like go on up */
        PyErr_Clear();
    }
    Py_DECREF(c.spans);
    Py_DECREF(c.problems);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(c.spans);
    Py_XDECREF(c.problems);
    return NULL;
}

/* --- set-up ------------------------------------------------------------------------------ */

static int fill_keys(key_t_ *out, int cap, PyObject *seq, int *count, int hashed)
{
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of str");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > cap / (hashed ? 2 : 1)) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "too many keys");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(fast, i);
        Py_ssize_t len;
        const char *u = PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &len) : NULL;
        if (u == NULL || len == 0) {
            Py_DECREF(fast);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "keys must be non-empty str");
            return -1;
        }
        key_t_ *slot = &out[i];
        if (hashed) {
            uint32_t h = key_hash((ptr)u, len);
            while (out[h & (cap - 1)].obj != NULL)
                h++;
            slot = &out[h & (cap - 1)];
        }
        Py_INCREF(s);
        PyUnicode_InternInPlace(&s);
        slot->obj = s;
        slot->s = PyUnicode_AsUTF8AndSize(s, &slot->n);
        first_byte[(uint8_t)u[0]] = 1;
    }
    if (count)
        *count = (int)n;
    Py_DECREF(fast);
    return 0;
}

PyDoc_STRVAR(init_doc, "init(schema, keys, prefixes, merged_events, span_facts, root, bad_attribute, "
                       "bad_timestamp, apply, wants_events, unknown_service)\n\n"
                       "schema: one list per message (TracesData, ResourceSpans, Resource, ScopeSpans, Span, "
                       "Span.Event, KeyValue, AnyValue, ArrayValue, KeyValueList, then any other) of "
                       "(field number, kind, child message index).");

static PyObject *init(PyObject *self, PyObject *args)
{
    PyObject *sch, *k, *pre, *ev, *cls, *root, *ba, *bt, *ap, *we, *us;
    if (ready) {
        PyErr_SetString(PyExc_RuntimeError, "_wire.init called twice");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOU", &sch, &k, &pre, &ev, &cls, &root, &ba, &bt, &ap, &we, &us))
        return NULL;
    PyObject *msgs = PySequence_Fast(sch, "schema must be a sequence");
    if (msgs == NULL)
        return NULL;
    n_messages = (int)PySequence_Fast_GET_SIZE(msgs);
    if (n_messages < M_FIXED || n_messages > MAX_MESSAGES) {
        Py_DECREF(msgs);
        PyErr_SetString(PyExc_ValueError, "schema: wrong number of messages");
        return NULL;
    }
    for (int m = 0; m < n_messages; m++) {
        PyObject *fields = PySequence_Fast(PySequence_Fast_GET_ITEM(msgs, m), "fields must be a sequence");
        if (fields == NULL) {
            Py_DECREF(msgs);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fields); i++) {
            int number, kind, child;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fields, i), "iii", &number, &kind, &child)
                || number <= 0 || number >= MAX_FIELD || kind < 0 || kind > K_MESSAGE || child < 0
                || child >= n_messages) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "schema: unsupported field %d", number);
                Py_DECREF(fields);
                Py_DECREF(msgs);
                return NULL;
            }
            schema[m][number] = (field_t){(uint8_t)kind, (uint8_t)child};
        }
        Py_DECREF(fields);
    }
    Py_DECREF(msgs);
    if (fill_keys(keys, KEY_SLOTS, k, NULL, 1) || fill_keys(prefixes, MAX_PREFIXES, pre, &n_prefixes, 0)
        || fill_keys(merged_events, MAX_EVENTS, ev, &n_merged, 0))
        return NULL;
    PyObject **refs[] = {&span_facts_cls, &role_root, &bad_attribute, &bad_timestamp, &apply_fn,
                         &wants_events_fn, &unknown_service};
    PyObject *vals[] = {cls, root, ba, bt, ap, we, us};
    for (int i = 0; i < 7; i++) {
        Py_INCREF(vals[i]);
        *refs[i] = vals[i];
    }
    str_role = PyUnicode_InternFromString("role");
    str_problems = PyUnicode_InternFromString("problems");
    empty_str = PyUnicode_New(0, 0);
    if (str_role == NULL || str_problems == NULL || empty_str == NULL)
        return NULL;
    ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", init, METH_VARARGS, init_doc},
    {"decode_spans", (PyCFunction)(void (*)(void))decode_spans, METH_FASTCALL,
     "decode_spans(value, now_ns) -> (spans, problems, dropped), or None: use the reference path"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wire", "Compiled OTLP protobuf span decoder (see decode.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    return PyModule_Create(&module);
}
