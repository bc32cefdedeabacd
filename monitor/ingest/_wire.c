/* Compiled OTLP protobuf span decoder: the fast path of monitor/ingest/decode.py.
 *
 * One walk over the wire bytes of a TracesData / ExportTraceServiceRequest yields, per span, what
 * `SpanFacts` needs: ids (as hex), name, service, release, times, and the attributes `dialects.apply` may
 * read, as a dict with only those keys (`dialects.ATTRIBUTE_KEYS`, `dialects.INDEXED_PREFIXES`).
 * Every other attribute is validated, never materialised; a span with no such attribute gets its
 * role without any Python call (ROOT without a parent, else OTHER: what `apply` says for `{}`).
 * With `lean` (decode's `for_assembly`), such a span with a parent is not materialised at all
 * unless it is its trace's first in the message: it is counted per trace (`others`), and so is
 * any mapped span `dialects.is_inert` finds nothing in.
 *
 * It accepts a message only when it is sure upb would parse it to the same values: the whole
 * message is checked against the installed schema (wire types, lengths, UTF-8 of every `string`
 * field, nesting), and anything outside the canonical shape every SDK and the Collector write
 * (a singular message field repeated and so merged, two members of a oneof, groups, deep nesting,
 * an AnyValue field this file does not know) makes `decode_spans` return None. The caller then
 * runs the pure-Python reference path, which also produces every reject reason: errors are rare,
 * exactness is not negotiable, and so the difficult cases have one implementation only.
 *
 * The release (`decode.set_release_keys`) is read here from the resource's attributes, where
 * `service.version` lives; a span that carries a release key among its own attributes (a prompt
 * or index version set per span) is such a case too: the message goes to the reference path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

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
#define KEY_SLOTS 2048 /* the exact keys, and the indexed ones map_span probes (interned, hashed) */
typedef struct {
    const char *s;
    Py_ssize_t n;
    PyObject *obj;
    int slot; /* the exact keys: 0, 1, … in the order added (a span's attributes are indexed by it) */
} key_t_;
static key_t_ keys[KEY_SLOTS];
static int n_keys = 0;
/* The first two bytes of every key and prefix, as a bitmap: most attribute keys of the spans around
 * a RAG request (`http.*`, `db.*`, `url.*`, `net.*`) are turned away here, before any hashing of
 * the whole key or prefix comparison. */
static uint8_t first_byte[256];
static uint8_t lead2[65536 / 8]; /* bit (s[0] << 8 | s[1]) */

static inline int lead_in(const uint8_t *s)
{
    unsigned lead = (unsigned)s[0] << 8 | s[1];
    return lead2[lead >> 3] >> (lead & 7) & 1;
}
#define MAX_PREFIXES 16
static key_t_ prefixes[MAX_PREFIXES];
static int n_prefixes = 0;
#define MAX_EVENTS 8
static key_t_ merged_events[MAX_EVENTS];
static int n_merged = 0;

static PyObject *bad_attribute = NULL, *bad_timestamp = NULL;
static PyObject *apply_fn = NULL, *wants_events_fn = NULL, *is_inert_fn = NULL, *finish_fn = NULL;
static PyObject *unknown_service = NULL;
/* The release keys, in order (`set_release_keys`; the strings are owned by `release_objs`). */
#define MAX_RELEASE_KEYS 8
static const char *release_keys[MAX_RELEASE_KEYS];
static Py_ssize_t release_keys_n[MAX_RELEASE_KEYS];
static PyObject *release_objs = NULL;
static int n_release = 0;

static inline int release_index(const uint8_t *key, Py_ssize_t n)
{
    for (int i = 0; i < n_release; i++)
        if (release_keys_n[i] == n && memcmp(release_keys[i], key, (size_t)n) == 0)
            return i;
    return -1;
}
static PyObject *str_role = NULL, *str_problems = NULL, *empty_str = NULL;
static int ready = 0;

typedef const uint8_t *ptr;

/* Any failure: return -1 and let the reference path decide (it may be an error, or a shape we
 * do not handle). A Python exception may be set; the entry point clears it. */
#define FAIL (-1)

/* --- wire primitives --------------------------------------------------------------------- */

/* Two bytes, the first in the low half (as x86 and every little-endian host loads them). */
static inline unsigned load16(ptr s)
{
    return s[0] | (unsigned)s[1] << 8;
}

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

/* A length prefix as upb reads it: at most 5 bytes (a longer one is corrupt, whatever its value). */
static inline int read_len(ptr *pp, ptr end, ptr *body, Py_ssize_t *n)
{
    ptr start = *pp;
    uint64_t len;
    if (start < end && *start < 0x80) { /* a length under 128: most of them */
        len = *start;
        if ((Py_ssize_t)len > end - start - 1)
            return FAIL;
        *body = start + 1;
        *n = (Py_ssize_t)len;
        *pp = start + 1 + len;
        return 0;
    }
    if (read_varint(pp, end, &len) || *pp - start > 5 || len > 0x7fffffffu || len > (uint64_t)(end - *pp))
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
static int utf8_checked(ptr s, Py_ssize_t n)
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

/* Keys and most values are short ASCII strings: one OR over their words (the last one
 * overlapping) or bytes says so without a branch a byte; anything else is checked in full. */
static inline int utf8_ok(ptr s, Py_ssize_t n)
{
    uint64_t acc = 0, w;
    if (n >= 8) {
        for (Py_ssize_t i = 0; i + 8 <= n; i += 8) {
            memcpy(&w, s + i, 8);
            acc |= w;
        }
        memcpy(&w, s + n - 8, 8);
        acc |= w;
    }
    else if (n >= 4) { /* two words of four, overlapping */
        uint32_t lo, hi;
        memcpy(&lo, s, 4);
        memcpy(&hi, s + n - 4, 4);
        acc = lo | hi;
    }
    else if (n > 0) {
        acc = s[0] | s[n / 2] | s[n - 1]; /* every byte of 1 to 3 */
    }
    return !(acc & 0x8080808080808080ULL) || utf8_checked(s, n);
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

/* A KeyValue the general way (see read_kv). */
static int read_kv_slow(ptr p, ptr end, kv_t *kv, int depth)
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

/* A KeyValue: its key (validated; the last one wins, as in upb) and its value's bytes (not yet
 * validated). Two `value` fields would be merged by upb: left to the reference path. Inline, for
 * the span walk's ~8 attributes a span. */
static inline int read_kv(ptr p, ptr end, kv_t *kv, int depth)
{
    /* As the SDKs write nearly every attribute: the key, then the value, each with a one-byte
     * length, and nothing else. What the loop would find, without it. */
    Py_ssize_t n = end - p;
    if (n >= 4 && (load16(p) & 0x80ff) == 0x000a) { /* tag 1, length 0..127 */
        Py_ssize_t key_n = p[1];
        if (key_n + 4 <= n && (load16(p + key_n + 2) & 0x80ff) == 0x0012 && key_n + 4 + p[key_n + 3] == n) {
            kv->key = p + 2;
            kv->key_n = key_n;
            kv->val = p + key_n + 4;
            kv->val_n = p[key_n + 3];
            kv->has_val = 1;
            return utf8_ok(kv->key, key_n) ? 0 : FAIL;
        }
    }
    return read_kv_slow(p, end, kv, depth);
}

static PyObject NONE_SENTINEL_OBJ; /* address only: "the AnyValue has no value set" */
#define NO_VALUE (&NONE_SENTINEL_OBJ)

static PyObject *any_value(ptr p, ptr end, int depth);
static PyObject *cached_str(ptr s, Py_ssize_t n);

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
        out = cached_str(body, n);
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

static inline uint64_t load64(ptr s)
{
    uint64_t w;
    memcpy(&w, s, 8);
    return w;
}

/* 0 to 7 bytes as one word, without a variable-length copy (distinct strings of one length
 * give distinct words up to 3 bytes; beyond, overlapping halves). */
static inline uint64_t load_short(ptr s, Py_ssize_t n)
{
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, s, 4);
        memcpy(&hi, s + n - 4, 4);
        return lo | (uint64_t)hi << 32;
    }
    return n == 0 ? 0 : s[0] | (uint64_t)s[n / 2] << 8 | (uint64_t)s[n - 1] << 16;
}

#define MIX(h, w, k) (h = ((h) ^ (w)) * (k), h ^= (h) >> 29)

/* Sixteen bytes a step in two independent lanes, the tail read as the last (overlapping) word(s):
 * attribute keys run to ~40 bytes, and every key of a RAG span and most short values are hashed. */
static inline uint32_t key_hash(ptr s, Py_ssize_t n)
{
    const uint64_t ka = 0xFF51AFD7ED558CCDULL, kb = 0xC4CEB9FE1A85EC53ULL;
    uint64_t a = (uint64_t)n * 0x9E3779B97F4A7C15ULL, b = ~a;
    if (n < 8) {
        MIX(a, load_short(s, n), ka);
    }
    else {
        Py_ssize_t i = 0;
        for (; i + 16 <= n; i += 16) {
            MIX(a, load64(s + i), ka);
            MIX(b, load64(s + i + 8), kb);
        }
        if (i < n) {
            MIX(a, load64(s + (n >= 16 ? n - 16 : 0)), ka);
            MIX(b, load64(s + n - 8), kb);
        }
    }
    uint64_t h = (a ^ (b << 31 | b >> 33)) * ka;
    return (uint32_t)(h ^ (h >> 32));
}

/* One object per distinct short ASCII string: span names, kinds, roles, model names, query types
 * and service names are few by convention (OpenTelemetry asks for low-cardinality span names), so
 * most are found here instead of being decoded, allocated and freed again for every span, and
 * their hash, computed once, serves every dict they key. A direct-mapped cache: a new value
 * replaces the one in its slot. */
#define STR_CACHE 512
#define STR_CACHE_MAX_LEN 48
static PyObject *str_cache[STR_CACHE];

static PyObject *cached_str(ptr s, Py_ssize_t n)
{
    if (n > STR_CACHE_MAX_LEN)
        return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    PyObject **slot = &str_cache[key_hash(s, n) & (STR_CACHE - 1)];
    PyObject *o = *slot;
    if (o != NULL && PyUnicode_GET_LENGTH(o) == n && memcmp(PyUnicode_DATA(o), s, (size_t)n) == 0)
        return Py_NewRef(o);
    o = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (o != NULL && PyUnicode_IS_COMPACT_ASCII(o)) /* so that its data are the bytes compared above */
        Py_XSETREF(*slot, Py_NewRef(o));
    return o;
}

/* The exact key s..s+n in the table, or NULL. */
static key_t_ *exact_key(ptr s, Py_ssize_t n)
{
    uint32_t h = key_hash(s, n);
    for (uint32_t i = 0; i < KEY_SLOTS; i++) {
        key_t_ *k = &keys[(h + i) & (KEY_SLOTS - 1)];
        if (k->obj == NULL)
            break;
        if (k->n == n && memcmp(k->s, s, n) == 0)
            return k;
    }
    return NULL;
}

/* Whether `dialects.apply` may look this attribute up: 1 with *key the str it does (a new
 * reference) and *slot the exact key's (-1 for a prefixed one), 0 if it never does, FAIL on
 * failure (an error set). */
static inline int relevant_key(ptr s, Py_ssize_t n, PyObject **key, int *slot)
{
    if (n < 3 || !first_byte[s[0]] || !lead_in(s))
        return 0; /* every key and prefix is longer than two bytes (add_key) */
    key_t_ *k = exact_key(s, n);
    if (k != NULL) {
        *slot = k->slot;
        *key = Py_NewRef(k->obj);
        return 1;
    }
    *slot = -1;
    for (int i = 0; i < n_prefixes; i++) {
        k = &prefixes[i];
        if (n > k->n && k->s[0] == (char)s[0] && memcmp(k->s, s, k->n) == 0)
            return (*key = PyUnicode_DecodeUTF8((const char *)s, n, NULL)) == NULL ? FAIL : 1;
    }
    return 0;
}

/* What this file builds (spans, chunks, their lists) only ever refers to strings, numbers and
 * more of the same, so it can never be part of a reference cycle: taken out of the cyclic
 * garbage collector, which would otherwise traverse every span of every open trace again at each
 * collection (~12 % of a rag3 message's CPU). Reference counting still frees them. */
static PyObject *untracked(PyObject *obj)
{
    if (obj != NULL && PyObject_IS_GC(obj))
        PyObject_GC_UnTrack(obj);
    return obj;
}

/* --- chunk text left undecoded ---------------------------------------------------------- */

/* With `lean`, a retrieved document's text is not decoded: `Chunk.raw` gets a RawText, its
 * (validated) UTF-8 bytes where they lie in the message, and `content` stays None
 * (decode._raw_text). One small object, no copy, no collector tracking: what the few sampled
 * records decode (`Chunk.text`) the others never pay for. It reads as bytes (buffer protocol) and
 * compares equal to the bytes it holds. */
typedef struct {
    PyObject_HEAD
    PyObject *msg; /* the message's bytes */
    Py_ssize_t off, len;
} raw_text_t;

static int raw_text_buffer(PyObject *self, Py_buffer *view, int flags)
{
    raw_text_t *r = (raw_text_t *)self;
    return PyBuffer_FillInfo(view, self, PyBytes_AS_STRING(r->msg) + r->off, r->len, 1, flags);
}

static void raw_text_dealloc(PyObject *self)
{
    Py_DECREF(((raw_text_t *)self)->msg);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *raw_text_compare(PyObject *a, PyObject *b, int op)
{
    Py_buffer x, y;
    if ((op != Py_EQ && op != Py_NE) || !PyObject_CheckBuffer(a) || !PyObject_CheckBuffer(b))
        Py_RETURN_NOTIMPLEMENTED;
    if (PyObject_GetBuffer(a, &x, PyBUF_SIMPLE))
        return NULL;
    if (PyObject_GetBuffer(b, &y, PyBUF_SIMPLE)) {
        PyBuffer_Release(&x);
        return NULL;
    }
    int eq = x.len == y.len && memcmp(x.buf, y.buf, (size_t)x.len) == 0;
    PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyObject *raw_text_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<RawText, %zd bytes>", ((raw_text_t *)self)->len);
}

static PyBufferProcs raw_text_as_buffer = {raw_text_buffer, NULL};

static PyTypeObject RawText = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "monitor.ingest._wire.RawText",
    .tp_basicsize = sizeof(raw_text_t),
    .tp_dealloc = raw_text_dealloc,
    .tp_repr = raw_text_repr,
    .tp_as_buffer = &raw_text_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "UTF-8 text left undecoded where it lies in a message: str(raw, 'utf-8') decodes it",
    .tp_richcompare = raw_text_compare,
};

typedef struct {
    PyObject *value; /* the message's bytes; NULL: decode text as usual */
} source_t;

static const char doc_prefix[] = "retrieval.documents.", doc_suffix[] = ".document.content";
#define DOC_PREFIX_N (sizeof doc_prefix - 1)
#define DOC_SUFFIX_N (sizeof doc_suffix - 1)

static int is_doc_content(ptr k, Py_ssize_t n)
{
    return n > (Py_ssize_t)(DOC_PREFIX_N + DOC_SUFFIX_N) && memcmp(k, doc_prefix, DOC_PREFIX_N) == 0
           && memcmp(k + n - DOC_SUFFIX_N, doc_suffix, DOC_SUFFIX_N) == 0;
}

/* The AnyValue at p..end when it is exactly one string: a RawText of it; NO_VALUE when it is
 * anything else (decode it as usual); NULL on failure. */
static PyObject *raw_string(source_t *src, ptr p, ptr end)
{
    uint32_t field;
    int wt;
    ptr body;
    Py_ssize_t n;
    if (read_tag(&p, end, &field, &wt) || field != 1 || wt != 2 || read_len(&p, end, &body, &n) || p != end)
        return NO_VALUE;
    if (!utf8_ok(body, n)) {
        PyErr_SetString(PyExc_ValueError, "invalid UTF-8"); /* what decoding it would have raised */
        return NULL;
    }
    raw_text_t *r = PyObject_New(raw_text_t, &RawText);
    if (r == NULL)
        return NULL;
    r->msg = Py_NewRef(src->value);
    r->off = body - (ptr)PyBytes_AS_STRING(src->value);
    r->len = n;
    return (PyObject *)r;
}

/* --- a span's relevant attributes ----------------------------------------------------------
 *
 * `dialects.apply` takes them as a dict, but map_span, the common shapes, only probes ~25 known
 * keys: so they are kept in arrival order in an array, found through an index by the key's slot
 * in the table, and a dict is built only for apply, for a prefixed key (not in the table) or past
 * MAX_ATTRS. Building, probing and freeing a dict per kept span was ~10 % of the ingest stage.
 * The index serves one span at a time (a stamp per slot marks the current span's); a span whose
 * walk began while another held it (through Python code, in theory) keeps a dict throughout. */
#define MAX_ATTRS 128
#define N_KEY_INDEX (KEY_SLOTS / 2) /* the table is at most half full */
typedef struct {
    PyObject *dict; /* the attributes as apply takes them, once built (owned) */
    int complete;   /* the array holds every attribute */
    int indexed;    /* this span holds the index */
    int n;
    PyObject *key[MAX_ATTRS]; /* borrowed: the table's */
    PyObject *val[MAX_ATTRS];
} attrs_t;
static uint32_t slot_stamp[N_KEY_INDEX], stamp_now;
static uint16_t slot_at[N_KEY_INDEX];
static int index_busy;

static void attrs_begin(attrs_t *a, int dict_only)
{
    a->dict = NULL;
    a->n = 0;
    a->indexed = a->complete = !dict_only && !index_busy;
    if (a->indexed) {
        index_busy = 1;
        if (++stamp_now == 0) {
            memset(slot_stamp, 0, sizeof slot_stamp);
            stamp_now = 1;
        }
    }
}

static void attrs_end(attrs_t *a)
{
    for (int i = 0; i < a->n; i++)
        Py_DECREF(a->val[i]);
    a->n = 0;
    Py_CLEAR(a->dict);
    if (a->indexed)
        index_busy = a->indexed = 0;
}

static inline int attrs_any(const attrs_t *a)
{
    return a->n > 0 || a->dict != NULL;
}

/* attrs.get(key) for the key with this slot (-1: none in the table, so never there), borrowed;
 * only while the array is complete. */
static inline PyObject *attr(const attrs_t *a, int slot)
{
    return slot >= 0 && slot_stamp[slot] == stamp_now ? a->val[slot_at[slot]] : NULL;
}

/* The dict apply takes, built on first use (the array stays as it was): borrowed, NULL on failure. */
static PyObject *attrs_dict(attrs_t *a)
{
    if (a->dict != NULL)
        return a->dict;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (int i = 0; i < a->n; i++) {
        if (PyDict_SetItem(d, a->key[i], a->val[i])) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return a->dict = d;
}

/* attrs[key] = v, v stolen; `slot` as relevant_key gave it. A repeated key keeps its place. */
static int attrs_set(attrs_t *a, PyObject *key, int slot, PyObject *v)
{
    if (a->complete && a->dict == NULL && slot >= 0) {
        if (slot_stamp[slot] == stamp_now) {
            Py_SETREF(a->val[slot_at[slot]], v);
            return 0;
        }
        if (a->n < MAX_ATTRS) {
            slot_stamp[slot] = stamp_now;
            slot_at[slot] = (uint16_t)a->n;
            a->key[a->n] = key;
            a->val[a->n++] = v;
            return 0;
        }
    }
    a->complete = 0;
    PyObject *d = attrs_dict(a);
    int rc = d == NULL ? FAIL : PyDict_SetItem(d, key, v);
    Py_DECREF(v);
    return rc;
}

/* The value of a relevant attribute into attrs (kv.has_val) and the key's reference released:
 * take_attribute's rarer half, out of line. */
static int keep_attribute(source_t *src, const kv_t *kv, PyObject *key, int slot, attrs_t *attrs, int depth)
{
    int rc = 0;
    if (kv->has_val) {
        PyObject *v = NO_VALUE;
        if (src != NULL && src->value != NULL && is_doc_content(kv->key, kv->key_n))
            v = raw_string(src, kv->val, kv->val + kv->val_n);
        if (v == NO_VALUE)
            v = any_value(kv->val, kv->val + kv->val_n, depth + 1);
        if (v == NULL)
            rc = FAIL;
        else if (v != NO_VALUE)
            rc = attrs_set(attrs, key, slot, v);
    }
    Py_DECREF(key);
    return rc;
}

/* Read one attribute KeyValue; if its key is relevant, store its value in attrs; otherwise only
 * validate the value. `src`: see source_t (NULL for events). Inline: most of a span's attributes
 * (`http.*`, `db.*`, ...) are turned away here, in a few instructions. */
static inline __attribute__((always_inline)) int take_attribute(source_t *src, ptr p, ptr end, attrs_t *attrs,
                                                                int depth)
{
    kv_t kv;
    if (read_kv(p, end, &kv, depth))
        return FAIL;
    if (n_release && release_index(kv.key, kv.key_n) >= 0)
        return FAIL; /* a span's own release: the reference path's case (see the top) */
    int slot;
    PyObject *key;
    int relevant = relevant_key(kv.key, kv.key_n, &key, &slot);
    if (relevant)
        return relevant == FAIL ? FAIL : keep_attribute(src, &kv, key, slot, attrs, depth);
    if (!kv.has_val)
        return 0;
    ptr v = kv.val;
    Py_ssize_t vn = kv.val_n;
    if (vn >= 2 && v[0] == 0x0a && v[1] < 0x80 && v[1] + 2 == vn) /* one short string */
        return utf8_ok(v + 2, v[1]) ? 0 : FAIL;
    if (vn >= 2 && v[0] < 0x80 && v[0] >= 8 && depth + 1 <= MAX_DEPTH) {
        /* one scalar with a one-byte tag, as the SDKs write an int, bool or double: what
         * validate_msg does with it, without the call */
        field_t f = schema[M_ANY_VALUE][v[0] >> 3]; /* v[0] >> 3 < 16 <= MAX_FIELD */
        if ((v[0] & 7) == 0 && (f.kind == K_VARINT || f.kind == K_UNKNOWN)) {
            ptr q = v + 1;
            uint64_t x;
            if (read_varint(&q, v + vn, &x) == 0 && q == v + vn)
                return 0;
        }
        else if ((v[0] & 7) == 1 && vn == 9 && (f.kind == K_FIXED64 || f.kind == K_UNKNOWN)) {
            return 0;
        }
    }
    return validate_msg(M_ANY_VALUE, v, v + vn, depth + 1);
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

/* The traces of one message (with `lean`): open addressing on the id, load at most 1/2. */
typedef struct {
    uint8_t id[16];
    PyObject *str;          /* the id as hex, from the trace's first span; NULL: a free slot */
    Py_ssize_t n_inert;     /* inert spans after the first, counted into `others` */
} trace_t;

#define TRACE_SLOTS 16

typedef struct {
    int64_t lo, hi; /* plausible span times */
    PyObject *spans, *problems, *others;
    long dropped;
    int lean;
    trace_t *traces;
    Py_ssize_t n_traces, cap;
    Py_ssize_t n_inert; /* the counted spans in `others`, all traces */
    source_t src;       /* with `lean`: the message, for chunk text left undecoded */
    PyObject *scope;    /* the instrumentation scope's name of the spans being walked, or NULL */
    ptr scope_p, scope_end; /* their ScopeSpans, until `current_scope` reads the name from it */
    trace_t first_traces[TRACE_SLOTS];
} ctx_t;

static int grow_traces(ctx_t *c)
{
    Py_ssize_t cap = 2 * c->cap;
    trace_t *t = PyMem_Calloc((size_t)cap, sizeof(trace_t));
    if (t == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    for (Py_ssize_t i = 0; i < c->cap; i++) {
        trace_t *old = &c->traces[i];
        if (old->str == NULL)
            continue;
        uint64_t a;
        memcpy(&a, old->id + 8, 8);
        Py_ssize_t j = (Py_ssize_t)(a & (uint64_t)(cap - 1));
        while (t[j].str != NULL)
            j = (j + 1) & (cap - 1);
        t[j] = *old;
    }
    if (c->traces != c->first_traces)
        PyMem_Free(c->traces);
    c->traces = t;
    c->cap = cap;
    return 0;
}

/* The slot of trace `id` in this message: its entry, or the free slot to fill. */
static trace_t *trace_slot(ctx_t *c, ptr id)
{
    if (2 * (c->n_traces + 1) > c->cap && grow_traces(c))
        return NULL;
    uint64_t a;
    memcpy(&a, id + 8, 8); /* random bits of the id (W3C: the low half at least) */
    Py_ssize_t i = (Py_ssize_t)(a & (uint64_t)(c->cap - 1));
    while (c->traces[i].str != NULL && memcmp(c->traces[i].id, id, 16) != 0)
        i = (i + 1) & (c->cap - 1);
    return &c->traces[i];
}

/* An inert span after its trace's first: counted, not kept. `others` gets the trace's key at its
 * first such span (the order the reference path's dict has) and the count at the end. */
static int count_inert(ctx_t *c, trace_t *t)
{
    if (t->n_inert++)
        return 0;
    if (c->others == NULL && (c->others = PyDict_New()) == NULL)
        return FAIL;
    return PyDict_SetItem(c->others, t->str, Py_None);
}

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
        attrs_t ev_attrs;
        attrs_begin(&ev_attrs, 1);
        for (p = ev[e]; p < end;) {
            if (read_tag(&p, end, &field, &wt))
                goto fail;
            if (field == 3 && wt == 2) {
                if (read_len(&p, end, &body, &n) || take_attribute(NULL, body, body + n, &ev_attrs, depth + 1))
                    goto fail;
            }
            else if (skip_field(M_EVENT, field, wt, &p, end, depth)) {
                goto fail;
            }
        }
        if (ev_attrs.dict != NULL) {
            PyObject *k, *v;
            Py_ssize_t pos = 0;
            while (PyDict_Next(ev_attrs.dict, &pos, &k, &v)) {
                if (PyDict_SetDefault(attrs, k, v) == NULL)
                    goto fail;
            }
        }
        attrs_end(&ev_attrs);
        continue;
    fail:
        attrs_end(&ev_attrs);
        return FAIL;
    }
    return 0;
}

/* --- SpanFacts, Chunk and Decoded ------------------------------------------------------------
 *
 * All three are slots dataclasses whose generated __init__ only stores its arguments and the
 * defaults in the slots. Given their layout (compiled.slots_layout: each field's name, and whether
 * it is required, has a default, or is a new list or dict), an instance is allocated and its
 * slots filled here, without running that __init__; without a layout the class is called.
 */

#define MAX_SLOTS 24
enum { F_REQUIRED, F_DEFAULT, F_NEW_LIST, F_NEW_DICT };
typedef struct {
    PyObject *cls;
    int n_fields, n_required; /* 0 fields: call the class */
    Py_ssize_t offset[MAX_SLOTS];
    int kind[MAX_SLOTS];
    PyObject *value[MAX_SLOTS]; /* F_DEFAULT's */
    PyObject *name[MAX_SLOTS];  /* interned */
    int plain_setattr;          /* no __setattr__ of its own: a slot may be written directly */
} layout_t;
static layout_t span_facts, chunk, decoded;

/* cls(*args): the first `nargs` fields from args, the others their defaults */
static PyObject *make(layout_t *l, PyObject *const *args, int nargs)
{
    if (l->n_fields == 0 || nargs < l->n_required || nargs > l->n_fields)
        return PyObject_Vectorcall(l->cls, args, nargs, NULL);
    PyTypeObject *type = (PyTypeObject *)l->cls;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL)
        return NULL;
    int i = 0;
    for (; i < nargs; i++) { /* the given fields, then the defaults: no per-field test of which */
        Py_INCREF(args[i]);
        *(PyObject **)((char *)obj + l->offset[i]) = args[i];
    }
    for (; i < l->n_fields; i++) {
        PyObject *v = l->value[i];
        if (l->kind[i] == F_DEFAULT)
            Py_INCREF(v);
        else if ((v = l->kind[i] == F_NEW_DICT ? PyDict_New() : untracked(PyList_New(0))) == NULL) {
            Py_DECREF(obj);
            return NULL;
        }
        *(PyObject **)((char *)obj + l->offset[i]) = v;
    }
    return untracked(obj);
}

/* `layout` is None or a list of (name, kind, default): kind F_REQUIRED (first, in order),
 * F_DEFAULT, F_NEW_LIST or F_NEW_DICT. */
static int set_layout(layout_t *l, PyObject *cls, PyObject *layout)
{
    Py_INCREF(cls);
    l->cls = cls;
    l->n_fields = l->n_required = 0;
    if (layout == Py_None)
        return 0;
    PyObject *fast = PySequence_Fast(layout, "layout must be a sequence");
    if (fast == NULL)
        return FAIL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int rc = PyType_Check(cls) && n <= MAX_SLOTS ? 0 : FAIL;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *name, *deflt, *descr;
        int kind;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "UiO", &name, &kind, &deflt)
            || (descr = PyObject_GetAttr(cls, name)) == NULL) {
            rc = FAIL;
            break;
        }
        PyMemberDef *m = Py_IS_TYPE(descr, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)descr)->d_member : NULL;
        if (m == NULL || m->type != T_OBJECT_EX || (kind == F_REQUIRED && i != l->n_required) || kind < F_REQUIRED
            || kind > F_NEW_DICT)
            rc = FAIL;
        else {
            l->offset[i] = m->offset;
            l->kind[i] = kind;
            l->value[i] = kind == F_DEFAULT ? deflt : NULL;
            Py_XINCREF(l->value[i]);
            Py_INCREF(name);
            PyUnicode_InternInPlace(&name);
            l->name[i] = name;
            l->n_required += kind == F_REQUIRED;
        }
        Py_DECREF(descr);
    }
    Py_DECREF(fast);
    if (rc) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%R: not a plain slots dataclass", cls);
        return FAIL;
    }
    l->n_fields = (int)n;
    l->plain_setattr = ((PyTypeObject *)cls)->tp_setattro == PyObject_GenericSetAttr;
    return 0;
}

/* The slot of field `name` (interned) of `obj`, an instance of l's class built from its layout;
 * NULL: use the attribute protocol. Reading and writing a span's fields so skips the descriptor
 * lookups, a few per RAG span. */
static PyObject **field_slot(layout_t *l, PyObject *obj, PyObject *name)
{
    if (Py_TYPE(obj) != (PyTypeObject *)l->cls || !l->plain_setattr)
        return NULL;
    for (int i = 0; i < l->n_fields; i++)
        if (l->name[i] == name)
            return (PyObject **)((char *)obj + l->offset[i]);
    return NULL;
}

/* facts_set for a field near the end of SpanFacts' layout (the RED fields, set on every LLM span):
 * its index found once per name instead of scanned for per span. */
static int facts_set_late(PyObject *facts, PyObject *name, int *at, PyObject *v)
{
    layout_t *l = &span_facts;
    if (*at < 0)
        for (int i = 0; i < l->n_fields; i++)
            if (l->name[i] == name)
                *at = i;
    if (*at < 0 || *at >= l->n_fields || Py_TYPE(facts) != (PyTypeObject *)l->cls || !l->plain_setattr)
        return PyObject_SetAttr(facts, name, v);
    PyObject **slot = (PyObject **)((char *)facts + l->offset[*at]);
    Py_INCREF(v);
    Py_XSETREF(*slot, v);
    return 0;
}
static int at_error = -1, at_input_tokens = -1, at_output_tokens = -1, at_scope = -1; /* reset by init */

static int facts_set(PyObject *facts, PyObject *name, PyObject *v)
{
    PyObject **slot = field_slot(&span_facts, facts, name);
    if (slot == NULL)
        return PyObject_SetAttr(facts, name, v);
    Py_INCREF(v);
    Py_XSETREF(*slot, v);
    return 0;
}

/* getattr, a new reference */
static PyObject *facts_get(PyObject *facts, PyObject *name)
{
    PyObject **slot = field_slot(&span_facts, facts, name);
    if (slot == NULL || *slot == NULL)
        return PyObject_GetAttr(facts, name);
    return Py_NewRef(*slot);
}

static int append_problem(PyObject *facts, PyObject *problem)
{
    PyObject *lst = facts_get(facts, str_problems);
    if (lst == NULL)
        return FAIL;
    int rc = PyList_Append(lst, problem);
    Py_DECREF(lst);
    return rc;
}

/* --- the dialects' common shapes ------------------------------------------------------------
 *
 * `dialects.apply` step by step for the shapes OpenInference instrumentations write: an explicit
 * `openinference.span.kind` of CHAIN, AGENT, RETRIEVER, LLM or a kind without a role; plain text
 * (not JSON-looking) and string fields; documents with a non-empty string id, string content and
 * a finite float score; indexed messages with string content. Each step reads the same keys of
 * the same dict `apply` would, and the first that would take another branch (a JSON value to
 * unwrap, a number to convert, a problem to note, another dialect's key) gives the whole span to
 * `apply` instead; nothing is written to the span before the mapping is complete.
 */

#define UNSUPPORTED 1
#define MAX_INDEX 64 /* indexed keys probed here; a longer list is apply's */

enum { R_ROOT, R_RETRIEVER, R_RERANKER, R_LLM, R_OTHER, N_ROLES };
static PyObject *roles[N_ROLES];
static PyObject *str_query, *str_answer, *str_chunks, *str_model, *str_query_type, *str_replay, *str_content, *str_raw,
    *str_release, *str_error, *str_input_tokens, *str_output_tokens, *str_scope;
static unsigned long long mapped_native = 0, mapped_apply = 0;

enum { K_KIND, K_INPUT, K_OUTPUT, K_TL_INPUT, K_TL_OUTPUT, K_RETRIEVAL_QUERY, K_GENAI_DOCS, K_QUERY_TYPE,
       K_METADATA, K_REPLAY, K_MODEL, K_MODEL_END = K_MODEL + 5, K_JSON_IN = K_MODEL_END, K_JSON_OUT = K_JSON_IN + 2,
       K_LEGACY_IN = K_JSON_OUT + 2, K_LEGACY_OUT, K_IN_TOKENS, K_OUT_TOKENS = K_IN_TOKENS + 3,
       K_IDS = K_OUT_TOKENS + 3, N_KEYS = K_IDS + 6 };
static const char *const key_names[N_KEYS] = {
    "openinference.span.kind", "input.value", "output.value", "traceloop.entity.input",
    "traceloop.entity.output", "gen_ai.retrieval.query.text", "gen_ai.retrieval.documents", "rag.query_type",
    "metadata", "rag.replay",
    /* _model's order */
    "llm.model_name", "gen_ai.response.model", "gen_ai.request.model", "llm.response.model", "llm.request.model",
    /* _MESSAGE_KEYS */
    "gen_ai.input.messages", "gen_ai.prompt", "gen_ai.output.messages", "gen_ai.completion",
    "gen_ai.prompt.0.content", "gen_ai.completion.0.content",
    /* dialects.INPUT_TOKEN_KEYS, OUTPUT_TOKEN_KEYS */
    "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt",
    "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion",
    /* dialects.SESSION_KEYS, USER_KEYS: a span naming either is apply's */
    "session.id", "gen_ai.conversation.id", "traceloop.association.properties.session_id",
    "user.id", "enduser.id", "traceloop.association.properties.user_id",
};
#define MAX_TOKENS 10000000LL /* dialects.MAX_TOKENS */
static int key_slot[N_KEYS]; /* -1: not in the table, so never among a span's attributes */

/* Indexed families: "{prefix}{i}{suffix}", built once per index. */
enum { F_DOC_ID, F_DOC_CONTENT, F_DOC_SCORE, F_DOC_METADATA, F_IN_ROLE, F_IN_CONTENT, F_OUT_ROLE, F_OUT_CONTENT,
       N_FAMILIES };
static const char *const family_fmt[N_FAMILIES] = {
    "retrieval.documents.%d.document.id",      "retrieval.documents.%d.document.content",
    "retrieval.documents.%d.document.score",   "retrieval.documents.%d.document.metadata",
    "llm.input_messages.%d.message.role",      "llm.input_messages.%d.message.content",
    "llm.output_messages.%d.message.role",     "llm.output_messages.%d.message.content",
};
static int indexed_slots[N_FAMILIES][MAX_INDEX]; /* added to the relevant keys' table */

static inline int indexed_key(int family, int i)
{
    return indexed_slots[family][i];
}

/* `key in attrs` (1 is UNSUPPORTED where a key takes apply elsewhere) */
static inline int has(const attrs_t *attrs, int slot)
{
    return attr(attrs, slot) != NULL;
}

/* `_text_attr` for a string that does not look like JSON (its first non-space character is none
 * of `{["`): the string itself. *out is NULL when absent (borrowed otherwise). */
static int plain_text(const attrs_t *attrs, int key, PyObject **out)
{
    PyObject *v = attr(attrs, key_slot[key]);
    *out = NULL;
    if (v == NULL)
        return 0;
    if (!PyUnicode_CheckExact(v))
        return UNSUPPORTED; /* _scalar_text: converted or a problem */
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    int kind = PyUnicode_KIND(v);
    const void *data = PyUnicode_DATA(v);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (Py_UNICODE_ISSPACE(ch)) /* what str.lstrip() strips */
            continue;
        if (ch == '{' || ch == '[' || ch == '"')
            return UNSUPPORTED;
        break;
    }
    *out = v;
    return 0;
}

/* `_model`: the first non-empty string among its keys. */
static int model_of(const attrs_t *attrs, PyObject **out)
{
    *out = NULL;
    for (int k = K_MODEL; k < K_MODEL_END; k++) {
        PyObject *v = attr(attrs, key_slot[k]);
        if (v == NULL)
            continue;
        if (!PyUnicode_CheckExact(v))
            return UNSUPPORTED;
        if (PyUnicode_GET_LENGTH(v)) {
            *out = v;
            return 0;
        }
    }
    return 0;
}

/* Is an ASCII string, lowercased, one of `words`? -1: not ASCII (str.lower() is apply's then). */
static int ascii_lower_in(PyObject *s, const char *const *words)
{
    if (!PyUnicode_IS_ASCII(s))
        return -1;
    const char *d = (const char *)PyUnicode_1BYTE_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    for (; *words; words++) {
        if ((Py_ssize_t)strlen(*words) != n)
            continue;
        Py_ssize_t i = 0;
        while (i < n && Py_TOLOWER(d[i]) == (*words)[i])
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

static const char *const user_roles[] = {"user", "human", NULL};
static const char *const assistant_roles[] = {"assistant", "ai", "model", "bot", NULL};

/* `_messages_text` when the messages are OpenInference's indexed ones with string content (or
 * there are none of any dialect). `output`: 1 for llm.output_messages, 0 for llm.input_messages. */
static int messages_text(const attrs_t *attrs, int output, PyObject **out)
{
    int f_role = output ? F_OUT_ROLE : F_IN_ROLE, f_content = output ? F_OUT_CONTENT : F_IN_CONTENT;
    const char *const *words = output ? assistant_roles : user_roles;
    *out = NULL;
    if (has(attrs, indexed_key(f_content, 0)) || has(attrs, indexed_key(f_role, 0))) {
        PyObject *last = NULL;
        for (int i = 0;; i++) {
            if (i == MAX_INDEX)
                return UNSUPPORTED;
            PyObject *content = attr(attrs, indexed_key(f_content, i)), *role = attr(attrs, indexed_key(f_role, i));
            if (content == NULL) {
                if (role == NULL)
                    break;
                return UNSUPPORTED; /* multimodal content parts, or a message without text */
            }
            if (!PyUnicode_CheckExact(content))
                return UNSUPPORTED;
            int match = 1; /* a message without a (string) role counts as matching */
            if (role != NULL && PyUnicode_Check(role) && (match = ascii_lower_in(role, words)) < 0)
                return UNSUPPORTED;
            if (match)
                last = content;
        }
        if (last != NULL) {
            *out = last;
            return 0;
        }
    }
    int json0 = output ? K_JSON_OUT : K_JSON_IN;
    int others[3] = {json0, json0 + 1, output ? K_LEGACY_OUT : K_LEGACY_IN};
    for (int k = 0; k < 3; k++)
        if (has(attrs, key_slot[others[k]]))
            return UNSUPPORTED; /* GenAI JSON or legacy indexed messages */
    return 0;
}

/* `_has_oi_docs(attrs, "retrieval.documents.")` */
static int has_documents(const attrs_t *attrs)
{
    for (int f = F_DOC_ID; f <= F_DOC_SCORE; f++)
        if (has(attrs, indexed_key(f, 0)))
            return 1;
    return 0;
}

/* text.encode(): a chunk's text as `Chunk.raw` holds it when it was a str already. */
static PyObject *raw_of(PyObject *text)
{
    return PyUnicode_AsUTF8String(text);
}

/* The attributes' undecoded text decoded after all, for `apply`. */
static int text_again(PyObject *attrs)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(attrs, &pos, &k, &v)) { /* values replaced, keys unchanged: allowed */
        if (!Py_IS_TYPE(v, &RawText))
            continue;
        raw_text_t *r = (raw_text_t *)v;
        PyObject *s = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(r->msg) + r->off, r->len, NULL);
        int rc = s == NULL ? -1 : PyDict_SetItem(attrs, k, s);
        Py_XDECREF(s);
        if (rc)
            return FAIL;
    }
    return 0;
}

/* decode._raw_text for a span `apply` mapped: each chunk's str `content` moved to `raw`. */
static int raw_chunks(PyObject *facts)
{
    PyObject *chunks = facts_get(facts, str_chunks);
    if (chunks == NULL)
        return FAIL;
    int t = PyObject_IsTrue(chunks);
    PyObject *it = t > 0 ? PyObject_GetIter(chunks) : NULL;
    Py_DECREF(chunks);
    if (t <= 0)
        return t;
    if (it == NULL)
        return FAIL;
    PyObject *ch;
    int rc = 0;
    while (rc == 0 && (ch = PyIter_Next(it)) != NULL) {
        PyObject *content = PyObject_GetAttr(ch, str_content);
        if (content == NULL) {
            rc = FAIL;
        }
        else if (PyUnicode_Check(content)) {
            PyObject *raw = raw_of(content);
            rc = raw == NULL || PyObject_SetAttr(ch, str_raw, raw) || PyObject_SetAttr(ch, str_content, Py_None) ? FAIL : 0;
            Py_XDECREF(raw);
        }
        Py_XDECREF(content);
        Py_DECREF(ch);
    }
    Py_DECREF(it);
    return rc == 0 && PyErr_Occurred() ? FAIL : rc;
}

/* `_retrieved` when the documents are OpenInference's, each well formed (apply's fast case). */
static int documents(const attrs_t *attrs, int lean, PyObject **out)
{
    *out = NULL;
    if (!has_documents(attrs))
        return has(attrs, key_slot[K_GENAI_DOCS]) ? UNSUPPORTED : 0;
    PyObject *list = untracked(PyList_New(0));
    if (list == NULL)
        return FAIL;
    int rc = 0;
    for (int i = 0;; i++) {
        if (i == MAX_INDEX) {
            rc = UNSUPPORTED;
            break;
        }
        PyObject *id = attr(attrs, indexed_key(F_DOC_ID, i)), *content = attr(attrs, indexed_key(F_DOC_CONTENT, i)),
                 *score = attr(attrs, indexed_key(F_DOC_SCORE, i));
        if (id == NULL && content == NULL && score == NULL) {
            if (has(attrs, indexed_key(F_DOC_METADATA, i)))
                continue;
            break;
        }
        if (!(id != NULL && PyUnicode_CheckExact(id) && PyUnicode_GET_LENGTH(id) && content != NULL
              && (PyUnicode_CheckExact(content) || Py_IS_TYPE(content, &RawText)) && score != NULL
              && PyFloat_CheckExact(score) && isfinite(PyFloat_AS_DOUBLE(score)))) {
            rc = UNSUPPORTED; /* make_chunk's cases */
            break;
        }
        PyObject *c = NULL;
        if (lean) { /* Chunk(id, None, score, raw) */
            PyObject *raw = Py_IS_TYPE(content, &RawText) ? Py_NewRef(content) : raw_of(content); /* from an event */
            PyObject *args[4] = {id, Py_None, score, raw};
            c = raw == NULL ? NULL : make(&chunk, args, 4);
            Py_XDECREF(raw);
        }
        else {
            PyObject *args[3] = {id, content, score};
            c = make(&chunk, args, 3);
        }
        if (c == NULL || PyList_Append(list, c)) {
            Py_XDECREF(c);
            rc = FAIL;
            break;
        }
        Py_DECREF(c);
    }
    if (rc) {
        Py_DECREF(list);
        return rc;
    }
    *out = list;
    return 0;
}

/* The role `_OI_ROLES.get(kind.upper(), OTHER)` gives; -1 when kind is not ASCII. */
static int oi_role(PyObject *kind)
{
    static const char *const chain[] = {"chain", "agent", NULL}, *const retriever[] = {"retriever", NULL},
                             *const reranker[] = {"reranker", NULL}, *const llm[] = {"llm", NULL};
    static const char *const *const by_role[] = {chain, retriever, reranker, llm};
    for (int r = R_ROOT; r <= R_LLM; r++) {
        int m = ascii_lower_in(kind, by_role[r]);
        if (m)
            return m < 0 ? -1 : r;
    }
    return R_OTHER;
}

/* `_tokens(attrs, keys)` for the three keys from `first`: *out the first present (borrowed), an
 * int within [0, MAX_TOKENS]; anything else is apply's (which notes the problem). */
static int tokens_of(const attrs_t *attrs, int first, PyObject **out)
{
    for (int k = first; k < first + 3; k++) {
        PyObject *v = attr(attrs, key_slot[k]);
        if (v == NULL)
            continue;
        if (!PyLong_CheckExact(v))
            return UNSUPPORTED;
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || x < 0 || x > MAX_TOKENS)
            return UNSUPPORTED;
        *out = v;
        return 0;
    }
    return 0;
}

/* `dialects.apply(facts, attrs)` for the shapes above: 0 done (*role_out: the role set),
 * UNSUPPORTED (facts untouched), FAIL with an error. */
static int map_span(PyObject *facts, const attrs_t *attrs, int lean, int *role_out)
{
    PyObject *kind = attr(attrs, key_slot[K_KIND]), *query = NULL, *answer = NULL, *model = NULL, *chunks = NULL,
             *qt = NULL, *replay = NULL, *tokens_in = NULL, *tokens_out = NULL;
    if (kind == NULL || !PyUnicode_CheckExact(kind))
        return UNSUPPORTED; /* another dialect's role, or one inferred */
    int role = oi_role(kind), rc;
    switch (role) {
    case R_ROOT:
        if ((rc = plain_text(attrs, K_INPUT, &query)) || (query == NULL && (rc = has(attrs, key_slot[K_TL_INPUT]))))
            break;
        if ((query == NULL && (rc = has(attrs, key_slot[K_RETRIEVAL_QUERY])))
            || (query == NULL && (rc = messages_text(attrs, 0, &query))))
            break;
        if ((rc = plain_text(attrs, K_OUTPUT, &answer)) || (answer == NULL && (rc = has(attrs, key_slot[K_TL_OUTPUT]))))
            break;
        if ((answer == NULL && (rc = messages_text(attrs, 1, &answer))) || (rc = model_of(attrs, &model)))
            break;
        rc = documents(attrs, lean, &chunks);
        break;
    case R_RETRIEVER:
        if ((rc = has(attrs, key_slot[K_RETRIEVAL_QUERY])) || (rc = plain_text(attrs, K_INPUT, &query)))
            break;
        if (query == NULL && (rc = has(attrs, key_slot[K_TL_INPUT])))
            break;
        rc = documents(attrs, lean, &chunks);
        break;
    case R_LLM:
        if ((rc = messages_text(attrs, 1, &answer)) || (answer == NULL && (rc = plain_text(attrs, K_OUTPUT, &answer))))
            break;
        if ((rc = messages_text(attrs, 0, &query)) || (rc = model_of(attrs, &model)))
            break;
        if ((rc = tokens_of(attrs, K_IN_TOKENS, &tokens_in)))
            break;
        rc = tokens_of(attrs, K_OUT_TOKENS, &tokens_out);
        break;
    case R_OTHER: /* a kind without a role: only a traceloop retriever task could change that */
        rc = has(attrs, key_slot[K_TL_OUTPUT]);
        break;
    default: /* a reranker, or a kind that is not ASCII */
        rc = UNSUPPORTED;
    }
    /* an empty query or answer on the request span: apply looks further (and gives None) */
    if (rc == 0 && role == R_ROOT
        && ((query != NULL && PyUnicode_GET_LENGTH(query) == 0) || (answer != NULL && PyUnicode_GET_LENGTH(answer) == 0)))
        rc = UNSUPPORTED;
    /* has() is 1 (UNSUPPORTED) where it finds a key that takes apply elsewhere */
    if (rc == 0) {
        qt = attr(attrs, key_slot[K_QUERY_TYPE]);
        if (qt == NULL)
            rc = has(attrs, key_slot[K_METADATA]); /* a query type in metadata */
        else if (!PyUnicode_CheckExact(qt))
            rc = UNSUPPORTED;
    }
    if (rc == 0 && (replay = attr(attrs, key_slot[K_REPLAY])) != NULL && !PyBool_Check(replay))
        rc = UNSUPPORTED; /* parse_bool of a string or number */
    for (int k = K_IDS; rc == 0 && k < N_KEYS; k++)
        rc = has(attrs, key_slot[k]); /* a session or a user */
    if (rc == 0) {
        *role_out = role;
        rc = facts_set(facts, str_role, roles[role]);
        if (rc == 0 && query != NULL)
            rc = facts_set(facts, str_query, query);
        if (rc == 0 && answer != NULL)
            rc = facts_set(facts, str_answer, answer);
        if (rc == 0 && chunks != NULL)
            rc = facts_set(facts, str_chunks, chunks);
        if (rc == 0 && model != NULL)
            rc = facts_set(facts, str_model, model);
        if (rc == 0 && qt != NULL)
            rc = facts_set(facts, str_query_type, qt);
        if (rc == 0 && replay != NULL)
            rc = facts_set(facts, str_replay, replay);
        if (rc == 0 && tokens_in != NULL)
            rc = facts_set_late(facts, str_input_tokens, &at_input_tokens, tokens_in);
        if (rc == 0 && tokens_out != NULL)
            rc = facts_set_late(facts, str_output_tokens, &at_output_tokens, tokens_out);
    }
    Py_XDECREF(chunks);
    return rc;
}

/* The code of a Status message (validated), as upb reads it into the int32 enum: the last one
 * given wins, as when a repeated singular message is merged. *code is left as it is without one. */
static int status_code(ptr p, ptr end, int32_t *code)
{
    while (p < end) {
        uint32_t field;
        int wt;
        uint64_t v;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            return FAIL;
        if (wt == 0) {
            if (read_varint(&p, end, &v))
                return FAIL;
            if (field == 3)
                *code = (int32_t)v;
        }
        else if (wt == 2) {
            if (read_len(&p, end, &body, &n))
                return FAIL;
        }
        else if (wt == 1) {
            if (read_fixed64(&p, end, &v))
                return FAIL;
        }
        else if (wt == 5 && end - p >= 4)
            p += 4;
        else
            return FAIL;
    }
    return 0;
}

/* A scope name as a str: the last one's object when the bytes are the same (a service's messages
 * come from a handful of instrumentations, usually one), else `cached_str`'s. */
static PyObject *scope_str(ptr s, Py_ssize_t n)
{
    static char last[STR_CACHE_MAX_LEN];
    static Py_ssize_t last_n = 0;
    static PyObject *last_obj = NULL;
    if (last_obj != NULL && n == last_n && memcmp(last, s, (size_t)n) == 0)
        return Py_NewRef(last_obj);
    PyObject *o = cached_str(s, n);
    if (o != NULL && n <= STR_CACHE_MAX_LEN) {
        memcpy(last, s, (size_t)n);
        last_n = n;
        Py_XSETREF(last_obj, Py_NewRef(o));
    }
    return o;
}

/* The name of a ScopeSpans' InstrumentationScope (a new reference; NULL without an error when it
 * has none, or an empty or malformed one: the walk below validates, and refuses, the message).
 * As upb reads it: every occurrence of the scope field merged, the last name field given wins. */
static PyObject *scope_name(ptr p, ptr end)
{
    uint32_t field;
    int wt;
    ptr body, name = NULL;
    Py_ssize_t n, name_n = 0;
    uint64_t v;
    while (p < end) {
        if (read_tag(&p, end, &field, &wt))
            return NULL;
        if (wt == 2) {
            if (read_len(&p, end, &body, &n))
                return NULL;
            if (field != 1)
                continue;
            for (ptr q = body, qe = body + n; q < qe;) { /* InstrumentationScope: name is field 1 */
                if (read_tag(&q, qe, &field, &wt))
                    return NULL;
                if (wt == 0) {
                    if (read_varint(&q, qe, &v))
                        return NULL;
                }
                else if (wt != 2 || read_len(&q, qe, &body, &n))
                    return NULL;
                else if (field == 1) {
                    name = body;
                    name_n = n;
                }
            }
        }
        else if (wt != 0 || read_varint(&p, end, &v))
            return NULL;
    }
    return name_n && utf8_ok(name, name_n) ? scope_str(name, name_n) : NULL;
}

/* The scope name of the spans being walked, read from their ScopeSpans on first use (only the
 * spans materialised need it): a new reference, or NULL (no error) when there is none. */
static PyObject *current_scope(ctx_t *c)
{
    if (c->scope_p != NULL) {
        Py_XSETREF(c->scope, scope_name(c->scope_p, c->scope_end));
        c->scope_p = NULL;
    }
    return c->scope;
}

static int span(ctx_t *c, PyObject *service, PyObject *release, ptr p, ptr end, int depth)
{
    ptr tid = NULL, sid = NULL, pid = NULL, name = NULL;
    Py_ssize_t tid_n = 0, sid_n = 0, pid_n = 0, name_n = 0;
    uint64_t start = 0, stop = 0;
    int32_t status = 0;
    PyObject *facts = NULL;
    attrs_t attrs;
    ptr ev[MAX_EVENT_SEGMENTS];
    Py_ssize_t ev_n[MAX_EVENT_SEGMENTS];
    int n_ev = 0;
    attrs_begin(&attrs, 0);
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            goto fail;
        switch (field << 3 | wt) { /* the tag as read: one jump a field */
        case 1 << 3 | 2:
            if (read_len(&p, end, &tid, &tid_n))
                goto fail;
            break;
        case 2 << 3 | 2:
            if (read_len(&p, end, &sid, &sid_n))
                goto fail;
            break;
        case 4 << 3 | 2:
            if (read_len(&p, end, &pid, &pid_n))
                goto fail;
            break;
        case 5 << 3 | 2:
            if (read_len(&p, end, &name, &name_n) || !utf8_ok(name, name_n))
                goto fail;
            break;
        case 9 << 3 | 2:
            if (read_len(&p, end, &body, &n) || take_attribute(&c->src, body, body + n, &attrs, depth + 1))
                goto fail;
            break;
        case 11 << 3 | 2:
            if (read_len(&p, end, &body, &n) || n_ev == MAX_EVENT_SEGMENTS
                || validate_msg(M_EVENT, body, body + n, depth + 1))
                goto fail;
            ev[n_ev] = body;
            ev_n[n_ev++] = n;
            break;
        case 7 << 3 | 1:
            if (read_fixed64(&p, end, &start))
                goto fail;
            break;
        case 8 << 3 | 1:
            if (read_fixed64(&p, end, &stop))
                goto fail;
            break;
        case 15 << 3 | 2: { /* status: validated as any field, then its code read */
            ptr q = p;
            if (skip_field(M_SPAN, field, wt, &p, end, depth) || read_len(&q, end, &body, &n)
                || status_code(body, body + n, &status))
                goto fail;
            break;
        }
        default:
            if (skip_field(M_SPAN, field, wt, &p, end, depth))
                goto fail;
        }
    }
    if (tid_n != 16 || sid_n != 8 || (pid_n && pid_n != 8) || all_zero(tid, 16) || all_zero(sid, 8)) {
        c->dropped++;
        attrs_end(&attrs);
        return 0;
    }
    /* end < start or start < now - past or end > now + future: times dropped, span kept */
    int bad_times = stop < start || (c->lo > 0 && start < (uint64_t)c->lo) || c->hi < 0 || stop > (uint64_t)c->hi;
    trace_t *trace = NULL;
    int seen = 0;
    if (c->lean) {
        if ((trace = trace_slot(c, tid)) == NULL)
            goto fail;
        seen = trace->str != NULL;
        if (seen && !attrs_any(&attrs) && pid_n != 0) { /* what apply(facts, {}) leaves inert */
            attrs_end(&attrs);
            if (bad_times && PyList_Append(c->problems, bad_timestamp))
                return FAIL;
            return count_inert(c, trace);
        }
    }
    PyObject *args[7] = {NULL};
    if (seen) { /* the trace's id, as its first span in the message has it */
        Py_INCREF(trace->str);
        args[0] = trace->str;
    }
    else {
        args[0] = hex(tid, 16);
    }
    args[1] = hex(sid, 8);
    args[2] = hex(pid, pid_n);
    args[3] = name_n ? cached_str(name, name_n) : (Py_INCREF(empty_str), empty_str);
    args[4] = service;
    args[5] = PyLong_FromUnsignedLongLong(bad_times ? 0 : start);
    args[6] = PyLong_FromUnsignedLongLong(bad_times ? 0 : stop);
    if (args[0] && args[1] && args[2] && args[3] && args[5] && args[6])
        facts = make(&span_facts, args, 7);
    if (facts != NULL && trace != NULL && !seen) {
        memcpy(trace->id, tid, 16);
        Py_INCREF(args[0]);
        trace->str = args[0];
        c->n_traces++;
    }
    for (int i = 0; i < 7; i++)
        if (i != 4)
            Py_XDECREF(args[i]);
    if (facts == NULL)
        goto fail;
    if (bad_times && append_problem(facts, bad_timestamp))
        goto fail;
    if (release != NULL && facts_set(facts, str_release, release))
        goto fail;
    if (status == 2 && facts_set_late(facts, str_error, &at_error, Py_True)) /* STATUS_CODE_ERROR */
        goto fail;
    PyObject *scope = current_scope(c);
    if (scope == NULL ? PyErr_Occurred() != NULL : facts_set_late(facts, str_scope, &at_scope, scope) != 0)
        goto fail;
    int mapped = attrs_any(&attrs), role = R_OTHER;
    if (mapped) {
        if (n_ev) {
            PyObject *d = attrs_dict(&attrs), *w = d == NULL ? NULL : PyObject_CallOneArg(wants_events_fn, d);
            int wants = w == NULL ? -1 : PyObject_IsTrue(w);
            Py_XDECREF(w);
            if (wants < 0 || (wants && merge_events(d, ev, ev_n, n_ev, depth + 1)))
                goto fail;
            if (wants)
                attrs.complete = 0; /* the dict has more */
        }
        int rc = attrs.complete ? map_span(facts, &attrs, c->lean, &role) : UNSUPPORTED;
        if (rc == UNSUPPORTED) {
            PyObject *d = attrs_dict(&attrs);
            if (d == NULL || (c->lean && text_again(d))) /* apply reads text as str */
                goto fail;
            PyObject *r = PyObject_CallFunctionObjArgs(apply_fn, facts, d, NULL);
            if (r == NULL)
                goto fail;
            Py_DECREF(r);
            if (c->lean && raw_chunks(facts))
                goto fail;
            mapped_apply++;
        }
        else if (rc) {
            goto fail;
        }
        else {
            mapped_native++;
        }
    }
    else if (pid_n == 0) { /* apply(facts, {}): ROOT without a parent, else OTHER (the default) */
        if (facts_set(facts, str_role, roles[R_ROOT]))
            goto fail;
        role = R_ROOT;
    }
    attrs_end(&attrs);
    if (bad_times || mapped) { /* facts.problems may hold something: the message's list gets it */
        PyObject *lst = facts_get(facts, str_problems);
        if (lst == NULL)
            goto fail;
        Py_ssize_t end_ = PyList_GET_SIZE(c->problems);
        int rc = PyList_GET_SIZE(lst) ? PyList_SetSlice(c->problems, end_, end_, lst) : 0;
        Py_DECREF(lst);
        if (rc)
            goto fail;
    }
    if (seen && role == R_OTHER) { /* not its trace's first: kept unless `is_inert` (never
                                    * inert with another role, as set here) */
        PyObject *r = PyObject_CallOneArg(is_inert_fn, facts);
        int inert = r == NULL ? -1 : PyObject_IsTrue(r);
        Py_XDECREF(r);
        if (inert < 0 || (inert && count_inert(c, trace)))
            goto fail;
        if (inert) {
            Py_DECREF(facts);
            return 0;
        }
    }
    if (PyList_Append(c->spans, facts))
        goto fail;
    Py_DECREF(facts);
    return 0;
fail:
    attrs_end(&attrs);
    Py_XDECREF(facts);
    return FAIL;
}

static int scope_spans(ctx_t *c, PyObject *service, PyObject *release, ptr p, ptr end, int depth)
{
    Py_CLEAR(c->scope);
    c->scope_p = p;
    c->scope_end = end;
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            return FAIL;
        if (field == 2 && wt == 2) {
            if (read_len(&p, end, &body, &n) || span(c, service, release, body, body + n, depth + 1))
                return FAIL;
        }
        else if (skip_field(M_SCOPE_SPANS, field, wt, &p, end, depth)) {
            return FAIL;
        }
    }
    return 0;
}

/* The resource's service.name: the first `service.name` attribute decides, as in decode.py; and
 * its release: the value of the first release key (in their order) whose first attribute is a
 * non-empty string (`*release`, a new reference, or left NULL). */
static int resource(ptr p, ptr end, PyObject **service, PyObject **release, int *bad, int depth)
{
    int found = 0, best = n_release;
    unsigned seen_release = 0;
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
            int ri = n_release ? release_index(kv.key, kv.key_n) : -1;
            if (ri >= 0 && !(seen_release & (1u << ri))) {
                seen_release |= 1u << ri;
                PyObject *v = kv.has_val ? any_value(kv.val, kv.val + kv.val_n, depth + 2) : NO_VALUE;
                if (v == NULL)
                    return FAIL;
                if (v != NO_VALUE && ri < best && PyUnicode_Check(v) && PyUnicode_GET_LENGTH(v) > 0) {
                    Py_XSETREF(*release, v);
                    best = ri;
                }
                else if (v != NO_VALUE) {
                    Py_DECREF(v);
                }
            }
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
    PyObject *service = NULL, *release = NULL;
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            goto fail;
        if (field == 1 && wt == 2) {
            /* a second `resource` would be merged by upb: the reference path's case */
            if (seen_resource++ || read_len(&p, end, &body, &n) || resource(body, body + n, &service, &release, &bad, depth + 1))
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
        if (scope_spans(c, service, release, scopes[i], scopes[i] + scopes_n[i], depth + 1))
            goto fail;
    Py_DECREF(service);
    Py_XDECREF(release);
    return 0;
fail:
    Py_XDECREF(service);
    Py_XDECREF(release);
    return FAIL;
}

/* One message's walk into `c` (which `ctx_open` set up and `ctx_close` releases): 0 when the
 * compiled path took it, 1 when the reference path must (the error cleared), FAIL with an
 * exception set (KeyboardInterrupt and the like). */
static void ctx_open(ctx_t *c, long long now, int lean)
{
    c->lo = now - 30LL * 86400 * 1000000000LL; /* decode._PAST_NS */
    c->hi = now + 3600LL * 1000000000LL;       /* decode._FUTURE_NS */
    c->dropped = 0;
    c->lean = lean;
    c->others = NULL;
    c->traces = c->first_traces;
    c->n_traces = 0;
    c->cap = TRACE_SLOTS;
    memset(c->first_traces, 0, sizeof c->first_traces);
    c->spans = NULL;
    c->problems = NULL;
    c->src.value = NULL;
    c->scope = NULL;
    c->scope_p = c->scope_end = NULL;
}

static void ctx_close(ctx_t *c)
{
    for (Py_ssize_t i = 0; i < c->cap; i++)
        Py_XDECREF(c->traces[i].str);
    if (c->traces != c->first_traces)
        PyMem_Free(c->traces);
    Py_XDECREF(c->spans);
    Py_XDECREF(c->others);
    Py_XDECREF(c->problems);
    Py_XDECREF(c->scope);
}

static int walk(ctx_t *c, PyObject *value)
{
    if (c->lean)
        c->src.value = value;
    c->spans = PyList_New(0);
    c->problems = PyList_New(0);
    if (c->spans == NULL || c->problems == NULL)
        return FAIL;
    ptr p = (ptr)PyBytes_AS_STRING(value);
    ptr end = p + PyBytes_GET_SIZE(value);
    while (p < end) {
        uint32_t field;
        int wt;
        ptr body;
        Py_ssize_t n;
        if (read_tag(&p, end, &field, &wt))
            goto fallback;
        if (field == 1 && wt == 2) {
            if (read_len(&p, end, &body, &n) || resource_spans(c, body, body + n, 1))
                goto fallback;
        }
        else if (skip_field(M_TRACES, field, wt, &p, end, 0)) {
            goto fallback;
        }
    }
    c->n_inert = 0;
    for (Py_ssize_t i = 0; c->others != NULL && i < c->cap; i++) {
        trace_t *t = &c->traces[i];
        if (t->n_inert) {
            PyObject *n = PyLong_FromSsize_t(t->n_inert);
            int rc = n == NULL ? -1 : PyDict_SetItem(c->others, t->str, n);
            Py_XDECREF(n);
            if (rc)
                return FAIL;
            c->n_inert += t->n_inert;
        }
    }
    if (c->others == NULL && (c->others = PyDict_New()) == NULL)
        return FAIL;
    return 0;
fallback:
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception))
        return FAIL;
    PyErr_Clear();
    return 1;
}

/* now_ns as a C number, or 1 (use the reference path) when absurd; FAIL on a type error. */
static int now_of(PyObject *obj, long long *now)
{
    int overflow = 0;
    *now = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (*now == -1 && PyErr_Occurred())
        return FAIL;
    return overflow || *now > (1LL << 62) || *now < -(1LL << 62);
}

static PyObject *decode_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_wire.init was not called");
        return NULL;
    }
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_spans(value: bytes, now_ns: int, lean: bool)");
        return NULL;
    }
    int lean = PyObject_IsTrue(args[2]);
    if (lean < 0)
        return NULL;
    long long now;
    int rc = now_of(args[1], &now);
    if (rc)
        return rc == FAIL ? NULL : Py_NewRef(Py_None);
    ctx_t c;
    ctx_open(&c, now, lean);
    PyObject *out = NULL;
    rc = walk(&c, args[0]);
    if (rc == 1) {
        out = Py_NewRef(Py_None);
    }
    else if (rc == 0) {
        if (PyList_GET_SIZE(c.spans) && !PyList_GET_SIZE(c.problems) && !c.dropped) {
            PyObject *a[2] = {c.spans, c.others}; /* Decoded(spans, others): nothing to report */
            out = make(&decoded, a, 2);
        }
        else {
            out = PyObject_CallFunction(finish_fn, "OOOl", c.spans, c.others, c.problems, c.dropped);
        }
    }
    ctx_close(&c);
    return out;
}

/* --- the ingest stage's loop ------------------------------------------------------------- */

static PyObject *str_value = NULL, *str_holds = NULL, *one = NULL;

/* With encoding `auto`, decode.py sends a message to the protobuf path when, after an optional
 * BOM and JSON whitespace (`_JSON_START`), something other than "{" follows; anything else is
 * for it to decide. */
static int maybe_json(ptr p, Py_ssize_t n)
{
    Py_ssize_t i = n >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF ? 3 : 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
        i++;
    return i == n || p[i] == '{';
}

/* What `IngestStage._process` does with one message, for the plain ones: decode (lean) and hand
 * the spans to the assembler, then drop the consumer's hold. Anything else — no value or too
 * large, a value JSON may start (with `auto`), a message the reference path must decode, one with
 * problems or malformed spans — stops the loop there for the stage's own path. */
/* feed's keyword names, interned once (init): matched by identity first, a call's names being
 * interned literals, then by value */
#define FEED_ARGS 9
static const char *const feed_names[FEED_ARGS] = {"messages", "refs",      "start", "now_ns",  "auto",
                                                   "max_bytes", "add_spans", "now",   "finished"};
static PyObject *feed_keys[FEED_ARGS];

/* feed's arguments, by keyword only, into args[0..FEED_ARGS): 0, or -1 with a TypeError */
static int feed_kwargs(PyObject *const *stack, Py_ssize_t nargs, PyObject *kwnames, PyObject **args)
{
    Py_ssize_t nk = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs != 0 || nk != FEED_ARGS)
        goto usage;
    for (int j = 0; j < FEED_ARGS; j++)
        args[j] = NULL;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        int j = 0;
        while (j < FEED_ARGS && feed_keys[j] != name)
            j++;
        if (j == FEED_ARGS)
            for (j = 0; j < FEED_ARGS && !(PyUnicode_Check(name) && PyUnicode_Compare(name, feed_keys[j]) == 0); j++)
                ;
        if (j == FEED_ARGS || args[j] != NULL)
            goto usage;
        args[j] = stack[i];
    }
    return 0;
usage:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError,
                        "feed(*, messages: list, refs: list, start: int, now_ns: int, auto: bool, max_bytes: int, "
                        "add_spans, now: float, finished: list): every argument by keyword");
    return -1;
}

static PyObject *feed(PyObject *self, PyObject *const *stack, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *args[FEED_ARGS];
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_wire.init was not called");
        return NULL;
    }
    if (feed_kwargs(stack, PyVectorcall_NARGS(nargs), kwnames, args))
        return NULL;
    if (!PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "feed: messages, refs and finished must be lists");
        return NULL;
    }
    PyObject *messages = args[0], *refs = args[1], *add_spans = args[6];
    Py_ssize_t i = PyLong_AsSsize_t(args[2]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    long long now;
    int rc = now_of(args[3], &now);
    if (rc)
        return rc == FAIL ? NULL : PyLong_FromSsize_t(i);
    int auto_ = PyObject_IsTrue(args[4]);
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[5]);
    if (auto_ < 0 || (max_bytes == -1 && PyErr_Occurred()))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(refs);
    if (PyList_GET_SIZE(messages) < n)
        n = PyList_GET_SIZE(messages);
    for (; i < n; i++) {
        PyObject *value = PyObject_GetAttr(PyList_GET_ITEM(messages, i), str_value);
        if (value == NULL)
            return NULL;
        Py_ssize_t size = PyBytes_Check(value) ? PyBytes_GET_SIZE(value) : 0;
        if (size == 0 || size > max_bytes || (auto_ && maybe_json((ptr)PyBytes_AS_STRING(value), size))) {
            Py_DECREF(value);
            break;
        }
        ctx_t c;
        ctx_open(&c, now, 1);
        rc = walk(&c, value);
        Py_DECREF(value);
        if (rc == 0 && (!PyList_GET_SIZE(c.spans) || PyList_GET_SIZE(c.problems) || c.dropped))
            rc = 1;
        if (rc) {
            ctx_close(&c);
            if (rc == FAIL)
                return NULL;
            break;
        }
        PyObject *ref = PyList_GET_ITEM(refs, i);
        PyObject *size_obj = PyLong_FromSsize_t(size); /* charged once, whole, while a trace holds it */
        PyObject *r = NULL;
        if (size_obj != NULL) {
            PyObject *a[6] = {c.spans, ref, size_obj, args[7], args[8], c.n_inert ? c.others : Py_None};
            r = PyObject_Vectorcall(add_spans, a, 6, NULL);
            Py_DECREF(size_obj);
        }
        ctx_close(&c);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        /* ref.release() */
        PyObject *holds = PyObject_GetAttr(ref, str_holds);
        PyObject *less = holds == NULL ? NULL : PyNumber_Subtract(holds, one);
        Py_XDECREF(holds);
        if (less == NULL)
            return NULL;
        rc = PyObject_SetAttr(ref, str_holds, less);
        Py_DECREF(less);
        if (rc)
            return NULL;
    }
    return PyLong_FromSsize_t(i);
}

/* --- set-up ------------------------------------------------------------------------------ */

/* Into the entry `out` (or the hashed table of exact keys when NULL): the str `s`, interned.
 * Returns the entry (the one there already for a repeated exact key), NULL on failure. */
static key_t_ *add_key(key_t_ *out, PyObject *s)
{
    Py_ssize_t len;
    const char *u = PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &len) : NULL;
    if (u == NULL || len < 3) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "keys must be str of 3 bytes or more");
        return NULL;
    }
    if (out == NULL) {
        if (2 * (n_keys + 1) > KEY_SLOTS) {
            PyErr_SetString(PyExc_ValueError, "too many keys");
            return NULL;
        }
        uint32_t h = key_hash((ptr)u, len);
        for (; keys[h & (KEY_SLOTS - 1)].obj != NULL; h++)
            if (keys[h & (KEY_SLOTS - 1)].n == len && memcmp(keys[h & (KEY_SLOTS - 1)].s, u, len) == 0)
                return &keys[h & (KEY_SLOTS - 1)];
        out = &keys[h & (KEY_SLOTS - 1)];
        out->slot = n_keys++;
    }
    else {
        out->slot = -1;
    }
    Py_INCREF(s);
    PyUnicode_InternInPlace(&s);
    out->obj = s;
    out->s = PyUnicode_AsUTF8AndSize(s, &out->n);
    unsigned lead = (unsigned)(uint8_t)out->s[0] << 8 | (uint8_t)out->s[1];
    lead2[lead >> 3] |= (uint8_t)(1 << (lead & 7));
    first_byte[(uint8_t)out->s[0]] = 1;
    return out;
}

/* The str items of `seq` into the table `out` (hashed: NULL) of `cap` entries. */
static int fill_keys(key_t_ *out, int cap, PyObject *seq, int *count)
{
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of str");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (out != NULL && n > cap) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "too many keys");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (add_key(out == NULL ? NULL : &out[i], PySequence_Fast_GET_ITEM(fast, i)) == NULL) {
            Py_DECREF(fast);
            return -1;
        }
    }
    if (count)
        *count = (int)n;
    Py_DECREF(fast);
    return 0;
}

PyDoc_STRVAR(init_doc, "init(*, schema, keys, prefixes, merged_events, span_facts, span_facts_layout, chunk, "
                       "chunk_layout, decoded, decoded_layout, span_role, bad_attribute, bad_timestamp, apply, "
                       "wants_events, is_inert, finish, unknown_service)\n\n"
                       "schema: one list per message (TracesData, ResourceSpans, Resource, ScopeSpans, Span, "
                       "Span.Event, KeyValue, AnyValue, ArrayValue, KeyValueList, then any other) of "
                       "(field number, kind, child message index).");

static PyObject *init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"schema",      "keys",          "prefixes",       "merged_events", "span_facts",
                             "span_facts_layout", "chunk",   "chunk_layout",   "decoded",       "decoded_layout",
                             "span_role",   "bad_attribute", "bad_timestamp",  "apply",         "wants_events",
                             "is_inert",    "finish",        "unknown_service", NULL};
    PyObject *sch = NULL, *k = NULL, *pre = NULL, *ev = NULL, *facts_cls = NULL, *facts_layout = NULL,
             *chunk_cls = NULL, *chunk_layout = NULL, *decoded_cls = NULL, *decoded_layout = NULL, *span_role = NULL,
             *ba = NULL, *bt = NULL, *ap = NULL, *we = NULL, *ii = NULL, *fin = NULL, *us = NULL;
    if (ready) {
        PyErr_SetString(PyExc_RuntimeError, "_wire.init called twice");
        return NULL;
    }
    /* keyword-only (named fields, not 18 positions); CPython's "$" makes them optional: all required here */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOOOOOOOOOOOOOOU:init", kwlist, &sch, &k, &pre, &ev,
                                     &facts_cls, &facts_layout, &chunk_cls, &chunk_layout, &decoded_cls,
                                     &decoded_layout, &span_role, &ba, &bt, &ap, &we, &ii, &fin, &us))
        return NULL;
    {
        PyObject *const given[] = {sch, k,  pre, ev, facts_cls, facts_layout, chunk_cls, chunk_layout, decoded_cls,
                                   decoded_layout, span_role, ba, bt, ap, we, ii, fin, us};
        for (int i = 0; i < 18; i++)
            if (given[i] == NULL) {
                PyErr_Format(PyExc_TypeError, "init() missing required keyword argument '%s'", kwlist[i]);
                return NULL;
            }
    }
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
    if (fill_keys(NULL, KEY_SLOTS, k, NULL) || fill_keys(prefixes, MAX_PREFIXES, pre, &n_prefixes)
        || fill_keys(merged_events, MAX_EVENTS, ev, &n_merged))
        return NULL;
    for (int f = 0; f < N_FAMILIES; f++) {
        for (int i = 0; i < MAX_INDEX; i++) {
            PyObject *key = PyUnicode_FromFormat(family_fmt[f], i);
            key_t_ *entry = key == NULL ? NULL : add_key(NULL, key);
            Py_XDECREF(key);
            if (entry == NULL)
                return NULL;
            indexed_slots[f][i] = entry->slot;
        }
    }
    at_error = at_input_tokens = at_output_tokens = at_scope = -1;
    if (set_layout(&span_facts, facts_cls, facts_layout) || set_layout(&chunk, chunk_cls, chunk_layout)
        || set_layout(&decoded, decoded_cls, decoded_layout))
        return NULL;
    PyObject **refs[] = {&bad_attribute, &bad_timestamp, &apply_fn, &wants_events_fn, &is_inert_fn, &finish_fn,
                         &unknown_service};
    PyObject *vals[] = {ba, bt, ap, we, ii, fin, us};
    for (int i = 0; i < 7; i++) {
        Py_INCREF(vals[i]);
        *refs[i] = vals[i];
    }
    static const char *const role_names[N_ROLES] = {"ROOT", "RETRIEVER", "RERANKER", "LLM", "OTHER"};
    for (int r = 0; r < N_ROLES; r++)
        if ((roles[r] = PyObject_GetAttrString(span_role, role_names[r])) == NULL)
            return NULL;
    for (int i = 0; i < N_KEYS; i++) {
        key_t_ *entry = exact_key((ptr)key_names[i], (Py_ssize_t)strlen(key_names[i]));
        key_slot[i] = entry == NULL ? -1 : entry->slot;
    }
    PyObject **names[] = {&str_role, &str_problems, &str_query, &str_answer, &str_chunks, &str_model,
                          &str_query_type, &str_replay, &str_value, &str_holds, &str_content, &str_raw,
                          &str_release, &str_error, &str_input_tokens, &str_output_tokens, &str_scope};
    const char *const name_strs[] = {"role",       "problems", "query", "answer", "chunks",  "model",
                                     "query_type", "replay",   "value", "holds",  "content", "raw", "release",
                                     "error",      "input_tokens", "output_tokens", "scope"};
    for (int i = 0; i < 17; i++)
        if ((*names[i] = PyUnicode_InternFromString(name_strs[i])) == NULL)
            return NULL;
    empty_str = PyUnicode_New(0, 0);
    one = PyLong_FromLong(1);
    if (empty_str == NULL || one == NULL)
        return NULL;
    for (int i = 0; i < FEED_ARGS; i++)
        if (feed_keys[i] == NULL && (feed_keys[i] = PyUnicode_InternFromString(feed_names[i])) == NULL)
            return NULL;
    ready = 1;
    Py_RETURN_NONE;
}

static PyObject *set_release_keys(PyObject *self, PyObject *keys)
{
    PyObject *t = PySequence_Tuple(keys);
    if (t == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    if (n > MAX_RELEASE_KEYS) {
        Py_DECREF(t);
        PyErr_SetString(PyExc_ValueError, "too many release keys");
        return NULL;
    }
    const char *s[MAX_RELEASE_KEYS];
    Py_ssize_t len[MAX_RELEASE_KEYS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(t, i);
        if (!PyUnicode_Check(k) || (s[i] = PyUnicode_AsUTF8AndSize(k, &len[i])) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "release keys must be str");
            Py_DECREF(t);
            return NULL;
        }
    }
    n_release = 0;
    Py_XSETREF(release_objs, t);
    for (Py_ssize_t i = 0; i < n; i++) {
        release_keys[i] = s[i];
        release_keys_n[i] = len[i];
    }
    n_release = (int)n;
    Py_RETURN_NONE;
}

static PyObject *counts(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(KK)", mapped_native, mapped_apply);
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)(void (*)(void))init, METH_VARARGS | METH_KEYWORDS, init_doc},
    {"set_release_keys", set_release_keys, METH_O,
     "set_release_keys(keys): the attribute keys a span's release is read from, in order (see decode.py)"},
    {"counts", counts, METH_NOARGS,
     "counts() -> (native, apply): spans with dialect attributes mapped here, and by dialects.apply, so far"},
    {"decode_spans", (PyCFunction)(void (*)(void))decode_spans, METH_FASTCALL,
     "decode_spans(value, now_ns, lean) -> Decoded (finish(spans, others, problems, dropped) when there is "
     "something to report), or None: use the reference path. With lean, inert spans after their trace's "
     "first are only counted, per trace, in others"},
    {"feed", (PyCFunction)(void (*)(void))feed, METH_FASTCALL | METH_KEYWORDS,
     "feed(*, messages, refs, start, now_ns, auto, max_bytes, add_spans, now, finished) -> index: from start, "
     "each plain message decoded (lean), add_spans(spans, ref, size, now, finished, others or None) called "
     "and ref.holds released, up to the first message the caller's own path must take"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wire", "Compiled OTLP protobuf span decoder (see decode.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    if (PyType_Ready(&RawText) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "RawText", (PyObject *)&RawText) < 0)
        Py_CLEAR(m);
    return m;
}
