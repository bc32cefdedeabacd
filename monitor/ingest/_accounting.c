/* The ingest stage's per-record accounting, its common path compiled: the twin of
 * monitor/ingest/accounting.py's `RecordAccounting` (read that module's docstring first).
 *
 * `RecordAccounting` here has the reference's constructor, attributes and methods. `count` counts
 * as `account` does where that is the common path, else calls the same objects' own methods the
 * reference calls, then the sampler's `decide`. `account` runs the stage's `_finish` for the
 * records that take its common path: a record with a query type whose bounded labels are cached
 * and allowed, whose retrieval-drift slice is collecting its reference (and this record does not
 * complete it) or is frozen and not due a check, and which the sampler's current window leaves
 * unsampled (the trace-id draw at or above the window's bound, or below it and above the
 * probability the signals and floor give). It stops at the first record that is anything else —
 * no record, replay traffic, no query type, a label not cached or outside the allow-list, a slice
 * to create, freeze, check or roll, a record the sampler samples — and the stage's `_finish` takes
 * that one. Both work on the same Python objects, so there is no second copy of any state; this
 * file writes only what `count` would write, through the attributes their classes declare as the
 * C seam. Each record's reads and checks come first, with every new value allocated, and only then
 * are the attributes written, so a record is either counted here entirely or not touched.
 *
 * The sampler's draw (`sampler.trace_fraction`, BLAKE2b-64 of the trace id), its refusal check
 * (`sampler.looks_like_refusal`) and the offset tracker's `new_refs` are here too.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

/* --- the sampler's draw ------------------------------------------------------------------ */

/* The first 8 bytes of BLAKE2b-64 (RFC 7693, no key) of the id's UTF-8, big-endian, over 2**64. */
static const uint64_t blake2b_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};
static const uint8_t blake2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

#define B2B_G(a, b, c, d, x, y)                                                                              \
    do {                                                                                                   \
        v[a] = v[a] + v[b] + (x);                                                                          \
        v[d] = rotr64(v[d] ^ v[a], 32);                                                                    \
        v[c] = v[c] + v[d];                                                                                \
        v[b] = rotr64(v[b] ^ v[c], 24);                                                                    \
        v[a] = v[a] + v[b] + (y);                                                                          \
        v[d] = rotr64(v[d] ^ v[a], 16);                                                                    \
        v[c] = v[c] + v[d];                                                                                \
        v[b] = rotr64(v[b] ^ v[c], 63);                                                                    \
    } while (0)

static void blake2b_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last)
{
    uint64_t v[16], m[16];
    for (int i = 0; i < 16; i++) {
        uint64_t w = 0;
        for (int j = 7; j >= 0; j--)
            w = (w << 8) | block[8 * i + j];
        m[i] = w;
    }
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = blake2b_iv[i];
    }
    v[12] ^= t; /* inputs here stay far below 2**64 bytes */
    if (last)
        v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = blake2b_sigma[r];
        B2B_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        B2B_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        B2B_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        B2B_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        B2B_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        B2B_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        B2B_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        B2B_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
}

/* -1.0 with an exception set when `id` is not a str that encodes as UTF-8 */
static double fraction_of(PyObject *id)
{
    Py_ssize_t n;
    const char *s = PyUnicode_Check(id) ? PyUnicode_AsUTF8AndSize(id, &n) : NULL;
    if (s == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "trace_fraction() takes a str");
        return -1.0;
    }
    uint64_t h[8];
    memcpy(h, blake2b_iv, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8; /* fanout 1, depth 1, no key, 8-byte digest */
    uint8_t block[128];
    uint64_t t = 0;
    const uint8_t *p = (const uint8_t *)s;
    while (n > 128) {
        t += 128;
        blake2b_compress(h, p, t, 0);
        p += 128;
        n -= 128;
    }
    memset(block, 0, sizeof block);
    memcpy(block, p, (size_t)n);
    blake2b_compress(h, block, t + (uint64_t)n, 1);
    uint64_t be = 0; /* the digest is h[0]'s bytes little-endian; read them big-endian */
    for (int i = 0; i < 8; i++)
        be = (be << 8) | ((h[0] >> (8 * i)) & 0xff);
    return (double)be / 18446744073709551616.0;
}

static PyObject *trace_fraction(PyObject *self, PyObject *id)
{
    double u = fraction_of(id);
    return u < 0.0 ? NULL : PyFloat_FromDouble(u);
}

/* --- the sampler's refusal check -------------------------------------------------------- */

/* sampler.looks_like_refusal: whether the lowered first `refusal_scan` characters of the answer
 * hold a mark, looked for only under a gate the text holds, as the sampler's `_REFUSAL_INDEX`
 * says (given by `refusal_marks`). Python's lower() and several substring scans were ~12,000
 * instructions a call. The marks are ASCII, so the text is lowered into bytes: each character
 * lowered as str.lower() does (U+0130 to "i" and a combining dot, the one character whose full
 * lowercase differs from its simple one; U+2019 to "'", as the sampler replaces it), any
 * non-ASCII result as 0x80, which no mark holds. */
#define MAX_NEEDLE 32
#define MAX_GATES 16
#define MAX_MARKS 64
#define MAX_SCAN 4096
typedef struct {
    char s[MAX_NEEDLE];
    size_t n;
} needle_t;
static needle_t gates[MAX_GATES], marks[MAX_MARKS];
static int n_gates = 0, gate_end[MAX_GATES]; /* gate g's marks: marks[gate_end[g - 1]..gate_end[g]) */
static Py_ssize_t refusal_scan = -1;         /* -1: refusal_marks not called */

static int needle(PyObject *o, needle_t *into)
{
    if (!PyUnicode_Check(o) || !PyUnicode_IS_ASCII(o) || PyUnicode_GET_LENGTH(o) < 1
        || PyUnicode_GET_LENGTH(o) >= MAX_NEEDLE) {
        PyErr_SetString(PyExc_ValueError, "a gate or mark: a non-empty ASCII str of at most 31 characters");
        return -1;
    }
    into->n = (size_t)PyUnicode_GET_LENGTH(o);
    memcpy(into->s, PyUnicode_DATA(o), into->n);
    return 0;
}

static PyObject *refusal_marks(PyObject *self, PyObject *args)
{
    PyObject *index;
    Py_ssize_t scan;
    if (!PyArg_ParseTuple(args, "O!n", &PyTuple_Type, &index, &scan))
        return NULL;
    if (scan < 0 || scan > MAX_SCAN || PyTuple_GET_SIZE(index) > MAX_GATES) {
        PyErr_SetString(PyExc_ValueError, "at most 16 gates and 4096 characters scanned");
        return NULL;
    }
    refusal_scan = -1;
    int m = 0;
    for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(index); g++) {
        PyObject *entry = PyTuple_GET_ITEM(index, g), *ms;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || !PyTuple_Check(ms = PyTuple_GET_ITEM(entry, 1))
            || m + PyTuple_GET_SIZE(ms) > MAX_MARKS) {
            PyErr_SetString(PyExc_ValueError, "index: (gate, (mark, ...)) pairs, at most 64 marks");
            return NULL;
        }
        if (needle(PyTuple_GET_ITEM(entry, 0), &gates[g]))
            return NULL;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ms); i++)
            if (needle(PyTuple_GET_ITEM(ms, i), &marks[m++]))
                return NULL;
        gate_end[g] = m;
    }
    n_gates = (int)PyTuple_GET_SIZE(index);
    refusal_scan = scan;
    Py_RETURN_NONE;
}

/* whether text[0..k) holds the needle: memchr for its first byte, then the rest compared in line
 * (glibc's memmem cost more on 400-byte texts and needles of 3-16 bytes) */
static int holds(const char *text, size_t k, const needle_t *nd)
{
    if (nd->n > k)
        return 0;
    const char *p = text, *end = text + (k - nd->n) + 1; /* where a match can start */
    while ((p = memchr(p, nd->s[0], (size_t)(end - p))) != NULL) {
        size_t j = 1;
        while (j < nd->n && p[j] == nd->s[j])
            j++;
        if (j == nd->n)
            return 1;
        if (++p == end)
            break;
    }
    return 0;
}

/* 1 the answer looks like a refusal, 0 not, -1 with an error */
static int refuses(PyObject *answer)
{
    if (refusal_scan < 0) {
        PyErr_SetString(PyExc_RuntimeError, "_accounting.refusal_marks was not called");
        return -1;
    }
    if (!PyUnicode_Check(answer)) {
        PyErr_SetString(PyExc_TypeError, "looks_like_refusal() takes a str");
        return -1;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(answer), k = 0;
    if (n > refusal_scan)
        n = refusal_scan;
    char text[2 * MAX_SCAN];
    int kind = PyUnicode_KIND(answer);
    const void *data = PyUnicode_DATA(answer);
    if (kind == PyUnicode_1BYTE_KIND) { /* Latin-1: nothing outside ASCII lowers into it */
        const unsigned char *b = data;
        for (; k < n; k++)
            text[k] = (char)(b[k] >= 128 ? 0x80 : b[k] >= 'A' && b[k] <= 'Z' ? b[k] + 32 : b[k]);
        n = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 128)
            text[k++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        else if (c == 0x2019)
            text[k++] = '\'';
        else if (c == 0x130) {
            text[k++] = 'i';
            text[k++] = (char)0x80;
        } else {
            Py_UCS4 lower = Py_UNICODE_TOLOWER(c);
            text[k++] = (char)(lower < 128 ? lower : 0x80);
        }
    }
    for (int g = 0, m = 0; g < n_gates; m = gate_end[g++]) {
        if (!holds(text, (size_t)k, &gates[g]))
            continue;
        for (int i = m; i < gate_end[g]; i++)
            if (holds(text, (size_t)k, &marks[i]))
                return 1;
    }
    return 0;
}

static PyObject *looks_like_refusal(PyObject *self, PyObject *answer)
{
    int r = refuses(answer);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* --- the objects' slots ------------------------------------------------------------------ */

enum {
    T_RECORD, T_CHUNK, T_FINISHED, T_REF, T_SERIES, T_RED, T_PRICES, T_TALLY, T_DRIFT, T_SLICE, T_FROZEN, N_TYPES
};
static const char *const type_names[N_TYPES] = {"RagRecord",  "Chunk",          "Finished",   "MessageRef",
                                                "RecordSeries", "ServiceSeries", "PriceBook",  "HistogramTally",
                                                "RecordWindow", "SliceState",     "FrozenWindow"};
enum {
    R_TRACE_ID, R_SERVICE, R_QUERY_TYPE, R_CHUNKS, R_ANSWER, R_START, R_END, R_REPLAY,
    R_MODEL, R_RELEASE, R_RETRIEVAL, R_GENERATION, R_ERROR, R_IN_TOKENS, R_OUT_TOKENS,
    V_BOUNDS, V_VALUES, P_CACHE,
    C_SCORE,
    F_RECORD, F_REFS,
    M_HOLDS, M_PARTITION, M_OFFSET, M_TRACES, M_SIZE,
    S_RECORDS, S_CHUNKS, S_TOP,
    H_BOUNDS, H_COUNTS, H_SUM, H_N,
    D_FROZEN, D_MAX_COUNT, D_EDGES, D_CRING, D_SRING, D_CBINS, D_SBINS, D_POS, D_UNTIL, D_NEED, D_COUNTS_SEEN,
    D_SCORES_SEEN,
    L_WINDOW_END, L_CUR, L_PREV, L_UNKNOWN, L_SEEN, L_MEDIAN, L_RATE,
    Z_BOUND, Z_FLOOR, Z_MEDIAN,
    N_SLOTS
};
static const struct {
    int type;
    const char *name;
} slot_spec[N_SLOTS] = {
    {T_RECORD, "trace_id"},  {T_RECORD, "service"},    {T_RECORD, "query_type"}, {T_RECORD, "chunks"},
    {T_RECORD, "answer"},    {T_RECORD, "start_ns"},   {T_RECORD, "end_ns"},     {T_RECORD, "replay"},
    {T_RECORD, "model"},     {T_RECORD, "release"},    {T_RECORD, "retrieval_ns"}, {T_RECORD, "generation_ns"},
    {T_RECORD, "error"},     {T_RECORD, "input_tokens"}, {T_RECORD, "output_tokens"},
    {T_RED, "bounds"},       {T_RED, "values"},        {T_PRICES, "cache"},
    {T_CHUNK, "score"},      {T_FINISHED, "record"},   {T_FINISHED, "refs"},     {T_REF, "holds"},
    {T_REF, "partition"},    {T_REF, "offset"},        {T_REF, "traces"},        {T_REF, "size"},
    {T_SERIES, "records"},   {T_SERIES, "chunks"},     {T_SERIES, "top_score"},  {T_TALLY, "bounds"},
    {T_TALLY, "counts"},     {T_TALLY, "sum"},         {T_TALLY, "n"},          {T_DRIFT, "frozen"},
    {T_DRIFT, "max_count"},  {T_DRIFT, "edges"},       {T_DRIFT, "count_ring"},  {T_DRIFT, "score_ring"},
    {T_DRIFT, "count_bins"},  {T_DRIFT, "score_bins"},  {T_DRIFT, "pos"},        {T_DRIFT, "until_check"},
    {T_DRIFT, "need"},       {T_DRIFT, "counts_seen"}, {T_DRIFT, "scores_seen"},
    {T_SLICE, "window_end"}, {T_SLICE, "cur"},        {T_SLICE, "prev"},        {T_SLICE, "unknown"},
    {T_SLICE, "seen"},       {T_SLICE, "median"},     {T_SLICE, "rate"},        {T_FROZEN, "bound"},
    {T_FROZEN, "floor_p"},   {T_FROZEN, "median"},
};

static PyTypeObject *types[N_TYPES];
static Py_ssize_t offsets[N_SLOTS];
static PyObject *str_slices = NULL, *str_windows = NULL, *str_c_seam = NULL, *str_offset = NULL,
                *str_policy = NULL, *str_observe = NULL, *str_decide = NULL;
static PyObject *refusal_fn = NULL; /* sampler.looks_like_refusal */
static int ready = 0;

#define SLOT(obj, s) (*(PyObject **)((char *)(obj) + offsets[s]))
#define IS(obj, t) (Py_TYPE(obj) == types[t])

/* `cls` as type t: a plain class whose fields named in slot_spec are slots (their offsets noted);
 * 0, or -1 with an error (ValueError: not such a class). */
static int learn(int t, PyObject *cls)
{
    if (!PyType_Check(cls) || ((PyTypeObject *)cls)->tp_setattro != PyObject_GenericSetAttr) {
        PyErr_Format(PyExc_ValueError, "%s: not a plain class", type_names[t]);
        return -1;
    }
    Py_ssize_t found[N_SLOTS];
    for (int s = 0; s < N_SLOTS; s++) {
        if (slot_spec[s].type != t)
            continue;
        PyObject *descr = PyObject_GetAttrString(cls, slot_spec[s].name);
        if (descr == NULL)
            return -1;
        PyMemberDef *m = Py_IS_TYPE(descr, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)descr)->d_member : NULL;
        int ok = m != NULL && m->type == T_OBJECT_EX;
        if (ok)
            found[s] = m->offset;
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "%s.%s: not a slot", type_names[t], slot_spec[s].name);
            return -1;
        }
    }
    for (int s = 0; s < N_SLOTS; s++)
        if (slot_spec[s].type == t)
            offsets[s] = found[s];
    Py_INCREF(cls);
    Py_XSETREF(types[t], (PyTypeObject *)cls);
    return 0;
}

/* 0 when every field of type t this file uses is named in `cls.C_SEAM` (the fields its owner
 * declares as the seam), or -1 with a ValueError naming the first that is not. */
static int declared(int t, PyObject *cls)
{
    PyObject *seam = PyObject_GetAttr(cls, str_c_seam);
    if (seam == NULL || !PyTuple_Check(seam)) {
        Py_XDECREF(seam);
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: no C_SEAM tuple", type_names[t]);
        return -1;
    }
    for (int s = 0; s < N_SLOTS; s++) {
        if (slot_spec[s].type != t)
            continue;
        int found = 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seam) && !found; i++) {
            PyObject *name = PyTuple_GET_ITEM(seam, i);
            found = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, slot_spec[s].name) == 0;
        }
        if (!found) {
            Py_DECREF(seam);
            PyErr_Format(PyExc_ValueError, "%s.C_SEAM does not name %s", type_names[t], slot_spec[s].name);
            return -1;
        }
    }
    Py_DECREF(seam);
    return 0;
}

/* The drift stage's `RecordWindow` (a slice's records, its C seam), learnt from the first window
 * met (the ingest stage does not import the drift stage), its fields found by the names its
 * `C_SEAM` declares: 0 when `d` is of it, 1 when not (Python observes it). */
static int drift_type(PyObject *d)
{
    if (types[T_DRIFT] != NULL)
        return IS(d, T_DRIFT) ? 0 : 1;
    if (declared(T_DRIFT, (PyObject *)Py_TYPE(d)) == 0 && learn(T_DRIFT, (PyObject *)Py_TYPE(d)) == 0)
        return 0;
    PyErr_Clear(); /* not such a class: left to Python, asked again at the next window */
    return 1;
}

static const char init_doc[] =
    "init(*, record, chunk, finished, message_ref, record_series, service_series, price_book, histogram_tally, "
    "slice_state, frozen_window, looks_like_refusal): the classes whose public fields RecordAccounting reads and writes (ValueError "
    "when one is not a slot), and the sampler's refusal check";

static PyObject *init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"record",         "chunk",       "finished",        "message_ref",   "record_series",
                             "service_series", "price_book",  "histogram_tally", "slice_state",   "frozen_window",
                             "looks_like_refusal", NULL};
    PyObject *cls[N_TYPES] = {NULL}, *refusal = NULL;
    /* keyword-only; CPython's "$" makes them optional: all required here */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOOOOOOOO:init", kwlist, &cls[T_RECORD], &cls[T_CHUNK],
                                     &cls[T_FINISHED], &cls[T_REF], &cls[T_SERIES], &cls[T_RED], &cls[T_PRICES],
                                     &cls[T_TALLY], &cls[T_SLICE], &cls[T_FROZEN], &refusal))
        return NULL;
    {
        PyObject *const given[] = {cls[T_RECORD], cls[T_CHUNK],  cls[T_FINISHED], cls[T_REF],
                                   cls[T_SERIES], cls[T_RED],    cls[T_PRICES],   cls[T_TALLY],
                                   cls[T_SLICE],  cls[T_FROZEN], refusal};
        for (int i = 0; i < 11; i++)
            if (given[i] == NULL) {
                PyErr_Format(PyExc_TypeError, "init() missing required keyword argument '%s'", kwlist[i]);
                return NULL;
            }
    }
    if (!PyCallable_Check(refusal)) {
        PyErr_SetString(PyExc_TypeError, "looks_like_refusal must be callable");
        return NULL;
    }
    ready = 0;
    for (int t = 0; t < N_TYPES; t++)
        if (t != T_DRIFT && learn(t, cls[t]))
            return NULL;
    Py_INCREF(refusal);
    Py_XSETREF(refusal_fn, refusal);
    if (str_slices == NULL && ((str_slices = PyUnicode_InternFromString("slices")) == NULL
                               || (str_windows = PyUnicode_InternFromString("windows")) == NULL
                               || (str_c_seam = PyUnicode_InternFromString("C_SEAM")) == NULL
                               || (str_offset = PyUnicode_InternFromString("offset")) == NULL
                               || (str_policy = PyUnicode_InternFromString("policy")) == NULL
                               || (str_observe = PyUnicode_InternFromString("observe")) == NULL
                               || (str_decide = PyUnicode_InternFromString("decide")) == NULL))
        return NULL;
    ready = 1;
    Py_RETURN_NONE;
}

/* --- one record -------------------------------------------------------------------------- */

/* The writes of one record, made after every check passed: each slot gets its new value (a new
 * reference, allocated beforehand) and its old one is released; each staged append fills the
 * room made for it. */
#define MAX_WRITES 48
#define MAX_APPENDS 2
#define MAX_REFS 32
typedef struct {
    PyObject **slot[MAX_WRITES];
    PyObject *value[MAX_WRITES];
    int n;
    PyObject *app_list[MAX_APPENDS], *app_value[MAX_APPENDS];
    int n_app;
} writes_t;

static int put(writes_t *w, PyObject **slot, PyObject *value)
{
    if (value == NULL)
        return -1;
    if (w->n == MAX_WRITES) {
        Py_DECREF(value);
        return 1;
    }
    w->slot[w->n] = slot;
    w->value[w->n++] = value;
    return 0;
}

/* lst.append(value), staged: the room is made now (a None appended, the one step that can
 * fail), the value put there on commit; dropped, the list is cut back. One append a list. */
static int append(writes_t *w, PyObject *lst, PyObject *value)
{
    if (value == NULL)
        return -1;
    if (w->n_app == MAX_APPENDS) {
        Py_DECREF(value);
        return 1;
    }
    if (PyList_Append(lst, Py_None)) {
        Py_DECREF(value);
        return -1;
    }
    w->app_list[w->n_app] = lst;
    w->app_value[w->n_app++] = value;
    return 0;
}

static void drop(writes_t *w)
{
    for (int i = 0; i < w->n; i++)
        Py_DECREF(w->value[i]);
    w->n = 0;
    for (int i = 0; i < w->n_app; i++) {
        PyObject *lst = w->app_list[i];
        Py_SET_SIZE(lst, PyList_GET_SIZE(lst) - 1); /* never reallocates, cannot fail */
        Py_DECREF(Py_None);
        Py_DECREF(w->app_value[i]);
    }
    w->n_app = 0;
}

static void commit(writes_t *w)
{
    for (int i = 0; i < w->n; i++) {
        PyObject *old = *w->slot[i];
        *w->slot[i] = w->value[i];
        Py_XDECREF(old);
    }
    w->n = 0;
    for (int i = 0; i < w->n_app; i++) {
        PyObject *lst = w->app_list[i];
        PyList_SET_ITEM(lst, PyList_GET_SIZE(lst) - 1, w->app_value[i]); /* over the None */
        Py_DECREF(Py_None);
    }
    w->n_app = 0;
}

/* Checks give 1 (not the common path: no error), -1 (an error), 0 (go on). */
static int long_of(PyObject *o, long *v)
{
    if (o == NULL || !PyLong_CheckExact(o))
        return 1;
    int overflow;
    *v = PyLong_AsLongAndOverflow(o, &overflow);
    return overflow || (*v == -1 && PyErr_Occurred()) ? 1 : 0;
}

static int float_of(PyObject *o, double *v)
{
    if (o == NULL || !PyFloat_CheckExact(o))
        return 1;
    *v = PyFloat_AS_DOUBLE(o);
    return 0;
}

/* bisect_left (right = 0) or bisect_right over a list of floats, as the bisect module compares
 * them (`<`); 1 when an item is not a float. */
static int bisect(PyObject *lst, double x, int right, Py_ssize_t *at)
{
    if (!PyList_CheckExact(lst))
        return 1;
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(lst);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        double a;
        if (float_of(PyList_GET_ITEM(lst, mid), &a))
            return 1;
        if (right ? x < a : !(a < x))
            hi = mid;
        else
            lo = mid + 1;
    }
    *at = lo;
    return 0;
}

/* lst[i] += delta, staged; `i` checked */
static int add_item(writes_t *w, PyObject *lst, Py_ssize_t i, long delta)
{
    long v;
    if (lst == NULL || !PyList_CheckExact(lst) || i < 0 || i >= PyList_GET_SIZE(lst))
        return 1;
    int rc = long_of(PyList_GET_ITEM(lst, i), &v);
    return rc ? rc : put(w, &PyList_GET_ITEM(lst, i), PyLong_FromLong(v + delta));
}

static int add_long(writes_t *w, PyObject *obj, int s, long delta)
{
    long v;
    int rc = long_of(SLOT(obj, s), &v);
    return rc ? rc : put(w, &SLOT(obj, s), PyLong_FromLong(v + delta));
}

/* HistogramTally.observe(value), staged */
static int tally(writes_t *w, PyObject *t, double value)
{
    Py_ssize_t i;
    double sum;
    int rc;
    if (t == NULL || !IS(t, T_TALLY) || SLOT(t, H_BOUNDS) == NULL || bisect(SLOT(t, H_BOUNDS), value, 0, &i)
        || float_of(SLOT(t, H_SUM), &sum))
        return 1;
    if ((rc = add_item(w, SLOT(t, H_COUNTS), i, 1)) || (rc = put(w, &SLOT(t, H_SUM), PyFloat_FromDouble(sum + value))))
        return rc;
    return add_long(w, t, H_N, 1);
}

/* RecordWindow.push, staged, where it returns False: a window collecting its slice's reference
 * (one more record that does not complete it), or a frozen one not due a check. `d` is the
 * retrieval observer's window of the record's query type (its `windows`). */
static int drift(writes_t *w, PyObject *d, long n_chunks, PyObject *top)
{
    long pos, k, until, old_c, old_s, need;
    int rc;
    if (drift_type(d))
        return 1;
    if (SLOT(d, D_FROZEN) == Py_False) {
        PyObject *counts = SLOT(d, D_COUNTS_SEEN), *scores = SLOT(d, D_SCORES_SEEN);
        if (counts == NULL || scores == NULL || !PyList_CheckExact(counts) || !PyList_CheckExact(scores)
            || counts == scores || long_of(SLOT(d, D_NEED), &need))
            return 1;
        if (PyList_GET_SIZE(counts) + 1 >= need)
            return 1; /* this record completes the reference: Python freezes it and exports */
        if ((rc = append(w, counts, PyLong_FromLong(n_chunks))))
            return rc;
        Py_INCREF(top);
        return append(w, scores, top);
    }
    if (SLOT(d, D_FROZEN) != Py_True || long_of(SLOT(d, D_UNTIL), &until) || until <= 1
        || long_of(SLOT(d, D_POS), &pos) || long_of(SLOT(d, D_MAX_COUNT), &k))
        return 1;
    PyObject *cr = SLOT(d, D_CRING), *sr = SLOT(d, D_SRING), *cb = SLOT(d, D_CBINS), *sb = SLOT(d, D_SBINS);
    if (cr == NULL || sr == NULL || cb == NULL || sb == NULL || !PyList_CheckExact(cr) || !PyList_CheckExact(sr)
        || pos < 0 || pos >= PyList_GET_SIZE(cr) || pos >= PyList_GET_SIZE(sr))
        return 1;
    long c = n_chunks <= k ? n_chunks : k + 1;
    Py_ssize_t s = 0;
    if (top != Py_None) {
        if (SLOT(d, D_EDGES) == NULL || bisect(SLOT(d, D_EDGES), PyFloat_AS_DOUBLE(top), 1, &s))
            return 1;
        s += 1;
    }
    if (long_of(PyList_GET_ITEM(cr, pos), &old_c) || long_of(PyList_GET_ITEM(sr, pos), &old_s))
        return 1;
    if (old_c != c && ((rc = add_item(w, cb, old_c, -1)) || (rc = add_item(w, cb, c, 1))))
        return rc;
    if (old_c == c && (c < 0 || c >= PyList_GET_SIZE(cb)))
        return 1;
    if (old_s != (long)s && ((rc = add_item(w, sb, old_s, -1)) || (rc = add_item(w, sb, s, 1))))
        return rc;
    if (old_s == (long)s && (s < 0 || s >= PyList_GET_SIZE(sb)))
        return 1;
    if ((rc = put(w, &PyList_GET_ITEM(cr, pos), PyLong_FromLong(c)))
        || (rc = put(w, &PyList_GET_ITEM(sr, pos), PyLong_FromSsize_t(s))))
        return rc;
    long next = pos + 1 == PyList_GET_SIZE(cr) ? 0 : pos + 1;
    if ((rc = put(w, &SLOT(d, D_POS), PyLong_FromLong(next))))
        return rc;
    return put(w, &SLOT(d, D_UNTIL), PyLong_FromLong(until - 1));
}

/* The sampler's settings `Sampler.decide` reads, read once per `account` call. */
typedef struct {
    PyObject *slices;
    double window, no_chunks, low_score, low_score_mult, refusal, len_factor, len_mult;
    int has_low_score;
} sampler_t;

/* Sampler.decide when it returns None without rolling a window: the slice's count and running
 * median, staged. Past the bound (no signal or floor could sample it) after the draw alone; below
 * it, with the whole decision: signals (the refusal check is the sampler's own function), length,
 * floor. A record the decision samples is left to `_finish`, which decides again, alike. */
static int unsampled(writes_t *w, const sampler_t *sp, PyObject *record, PyObject *qt, double now, long n_chunks,
                     PyObject *top)
{
    long start, seen;
    double t = now, end, median, bound;
    if (long_of(SLOT(record, R_START), &start))
        return 1;
    if (start)
        t = (double)start / 1e9;
    if (t > now)
        t = now;
    PyObject *s = PyDict_GetItemWithError(sp->slices, qt);
    if (s == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (!IS(s, T_SLICE) || float_of(SLOT(s, L_WINDOW_END), &end) || !(t < end))
        return 1; /* a window to roll */
    PyObject *frozen = SLOT(s, L_CUR);
    if (t < end - sp->window)
        frozen = t >= end - 2 * sp->window ? SLOT(s, L_PREV) : SLOT(s, L_UNKNOWN);
    if (frozen == NULL || !IS(frozen, T_FROZEN) || float_of(SLOT(frozen, Z_BOUND), &bound))
        return 1;
    PyObject *answer = SLOT(record, R_ANSWER), *id = SLOT(record, R_TRACE_ID);
    if (answer == NULL || !PyUnicode_CheckExact(answer) || id == NULL || !PyUnicode_CheckExact(id)
        || long_of(SLOT(s, L_SEEN), &seen) || float_of(SLOT(s, L_MEDIAN), &median))
        return 1;
    /* A bound of 0 (a rate of 0, no floor) samples no draw: an ASCII id, whose hash cannot fail,
     * need not be hashed (~2,400 instructions). */
    double u = bound <= 0.0 && PyUnicode_IS_ASCII(id) ? 1.0 : fraction_of(id);
    if (u < 0.0)
        return -1;
    double n = (double)PyUnicode_GET_LENGTH(answer);
    if (u < bound) {
        double rate, mult = 1.0, m, floor_p;
        if (float_of(SLOT(s, L_RATE), &rate) || float_of(SLOT(frozen, Z_MEDIAN), &m)
            || float_of(SLOT(frozen, Z_FLOOR), &floor_p))
            return 1;
        if (n_chunks == 0)
            mult = sp->no_chunks;
        else if (sp->has_low_score && top != Py_None && PyFloat_AS_DOUBLE(top) < sp->low_score)
            mult = sp->low_score_mult;
        if (sp->refusal > mult && u < rate * sp->refusal) {
            PyObject *r = PyObject_CallOneArg(refusal_fn, answer);
            int refuses = r == NULL ? -1 : PyObject_IsTrue(r);
            Py_XDECREF(r);
            if (refuses < 0)
                return -1;
            if (refuses)
                mult = sp->refusal;
        }
        if (sp->len_mult > mult && m != 0.0 && (n > m * sp->len_factor || n * sp->len_factor < m))
            mult = sp->len_mult;
        double p = rate * mult;
        if (p > 1.0)
            p = 1.0;
        if (floor_p > p)
            p = floor_p;
        if (u < p)
            return 1; /* sampled: `_finish` decides again and produces it */
    }
    double m = median != 0.0 ? (n > median ? median * 1.02 : median * 0.98) : (n > 1.0 ? n : 1.0);
    int rc = put(w, &SLOT(s, L_SEEN), PyLong_FromLong(seen + 1));
    return rc ? rc : put(w, &SLOT(s, L_MEDIAN), PyFloat_FromDouble(m));
}

/* --- the RED series ---------------------------------------------------------------------- */

/* ServiceSeries.observe(record, prices), staged: the additions to its `values` (a writable buffer
 * of doubles, held from the staging to the commit), made only once the record is counted. */
#define MAX_RED 12
typedef struct {
    Py_buffer view;
    int held, n;
    Py_ssize_t at[MAX_RED];
    double add[MAX_RED];
} red_t;

static void red_release(red_t *r)
{
    if (r->held)
        PyBuffer_Release(&r->view);
    r->held = r->n = 0;
}

static void red_commit(red_t *r)
{
    double *v = (double *)r->view.buf;
    for (int i = 0; i < r->n; i++)
        v[r->at[i]] += r->add[i];
    red_release(r);
}

static inline void red_add(red_t *r, Py_ssize_t at, double x)
{
    r->at[r->n] = at;
    r->add[r->n++] = x;
}

/* A token count: 0 none (None, or negative: ServiceSeries.observe ignores it), 1 *x, -1 not the
 * common path (not an int within a long) */
static int figure(PyObject *o, long *x, int none_ok)
{
    if (o == Py_None && none_ok)
        return 0;
    if (long_of(o, x))
        return -1;
    if (*x < 0) {
        *x = 0;
        return 0;
    }
    return 1;
}

/* A series' `bounds` (a list of floats, one object every series shares) as doubles, read once
 * per `account` call rather than bisected as objects per record. */
#define MAX_BOUNDS 32
typedef struct {
    PyObject *obj; /* borrowed: the list last read (0: none) */
    Py_ssize_t n;
    double v[MAX_BOUNDS];
} bounds_t;

/* 0 with b holding `bounds`' values; 1 when it is not a list of at most MAX_BOUNDS floats */
static int read_bounds(bounds_t *b, PyObject *bounds)
{
    if (bounds == b->obj)
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(bounds);
    if (n > MAX_BOUNDS)
        return 1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (float_of(PyList_GET_ITEM(bounds, i), &b->v[i])) {
            b->obj = NULL;
            return 1;
        }
    b->obj = bounds;
    b->n = n;
    return 0;
}

/* bisect_left over b's values (as `bisect`) */
static inline Py_ssize_t bisect_bounds(const bounds_t *b, double x)
{
    Py_ssize_t lo = 0, hi = b->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (!(b->v[mid] < x))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* A record's RED additions to `red`, priced from `cache` (PriceBook.cache): 0 staged in r (its
 * buffer held), 1 (not the common path: a model not in the cache, a field of another type), -1. */
static int red_stage(red_t *r, bounds_t *bc, PyObject *red, PyObject *record, PyObject *cache)
{
    r->held = r->n = 0;
    if (!IS(red, T_RED) || !IS(record, T_RECORD))
        return 1;
    PyObject *bounds = SLOT(red, V_BOUNDS), *values = SLOT(red, V_VALUES), *error = SLOT(record, R_ERROR);
    if (bounds == NULL || values == NULL || !PyList_CheckExact(bounds) || (error != Py_True && error != Py_False)
        || read_bounds(bc, bounds))
        return 1;
    long start, end, stage[2], tin = 0, tout = 0;
    int has_in, has_out;
    if (long_of(SLOT(record, R_START), &start) || long_of(SLOT(record, R_END), &end)
        || long_of(SLOT(record, R_RETRIEVAL), &stage[0]) || long_of(SLOT(record, R_GENERATION), &stage[1])
        || (has_in = figure(SLOT(record, R_IN_TOKENS), &tin, 1)) < 0
        || (has_out = figure(SLOT(record, R_OUT_TOKENS), &tout, 1)) < 0)
        return 1;
    long request = -1; /* end - start, as Python's ints give it: beyond a long, Python's path */
    if (start && __builtin_sub_overflow(end, start, &request))
        return 1;
    PyObject *price = NULL;
    if (has_in || has_out) {
        PyObject *model = SLOT(record, R_MODEL);
        if (model == NULL || cache == NULL)
            return 1;
        if ((price = PyDict_GetItemWithError(cache, model)) == NULL)
            return PyErr_Occurred() ? -1 : 1; /* not priced yet: PriceBook.price */
        if (price != Py_None
            && (!PyTuple_CheckExact(price) || PyTuple_GET_SIZE(price) != 2 || !PyFloat_CheckExact(PyTuple_GET_ITEM(price, 0))
                || !PyFloat_CheckExact(PyTuple_GET_ITEM(price, 1))))
            return 1;
    }
    Py_ssize_t b = PyList_GET_SIZE(bounds), step = b + 1, at;
    if (PyObject_GetBuffer(values, &r->view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 1;
    }
    r->held = 1;
    if (r->view.itemsize != 8 || r->view.format == NULL || strcmp(r->view.format, "d") != 0
        || r->view.len != (3 * step + 6) * 8) {
        red_release(r);
        return 1;
    }
    long ns[3] = {request, stage[0], stage[1]};
    for (int k = 0; k < 3; k++) {
        if (ns[k] < 0)
            continue;
        double d = (double)ns[k] / 1e9;
        at = bisect_bounds(bc, d);
        red_add(r, k * step + at, 1.0);
        red_add(r, k * step + step - 1, d);
    }
    Py_ssize_t q = 3 * step;
    red_add(r, q, 1.0);
    if (error == Py_True)
        red_add(r, q + 1, 1.0);
    if (has_in)
        red_add(r, q + 2, (double)tin);
    if (has_out)
        red_add(r, q + 3, (double)tout);
    if (price == Py_None)
        red_add(r, q + 5, 1.0);
    else if (price != NULL)
        red_add(r, q + 4, (double)tin * PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(price, 0))
                              + (double)tout * PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(price, 1)));
    return 0;
}

/* `count`'s series, retrieval-drift slice `d` (NULL: none) and lag tally, staged in w: 0, 1 (not
 * the common path), -1 (an error). */
static int counted(writes_t *w, PyObject *series, PyObject *d, PyObject *lag, double now, long n_chunks,
                   PyObject *top, long end)
{
    int rc;
    if ((rc = add_long(w, series, S_RECORDS, 1)) || (rc = tally(w, SLOT(series, S_CHUNKS), (double)n_chunks))
        || (top != Py_None && (rc = tally(w, SLOT(series, S_TOP), PyFloat_AS_DOUBLE(top))))
        || (d != NULL && (rc = drift(w, d, n_chunks, top))))
        return rc;
    if (end) {
        double x = now - (double)end / 1e9;
        return tally(w, lag, x > 0.0 ? x : 0.0);
    }
    return 0;
}

/* A record's chunk count and top score (a float or None): 0, or 1 when a chunk or score is of
 * another kind. */
static int chunks_of(PyObject *record, long *n_chunks, PyObject **top)
{
    PyObject *chunks = SLOT(record, R_CHUNKS);
    if (chunks == NULL || !PyList_CheckExact(chunks))
        return 1;
    *n_chunks = (long)PyList_GET_SIZE(chunks);
    *top = Py_None;
    if (*n_chunks) {
        PyObject *first = PyList_GET_ITEM(chunks, 0);
        if (!IS(first, T_CHUNK) || (*top = SLOT(first, C_SCORE)) == NULL
            || (*top != Py_None && !PyFloat_CheckExact(*top)))
            return 1;
    }
    return 0;
}

/* One finished trace through `_finish`'s common path, staged in w: 0 (commit w), 1 (not the
 * common path), -1 (an error). */
static int one(writes_t *w, red_t *red, bounds_t *bc, PyObject *fin, double now, PyObject *labels,
               const sampler_t *sp, PyObject *drifts, PyObject *lag, PyObject *cache)
{
    int rc;
    if (!IS(fin, T_FINISHED))
        return 1;
    PyObject *record = SLOT(fin, F_RECORD), *refs = SLOT(fin, F_REFS);
    if (record == NULL || !IS(record, T_RECORD) || refs == NULL || !PyList_CheckExact(refs)
        || PyList_GET_SIZE(refs) > MAX_REFS || SLOT(record, R_REPLAY) != Py_False)
        return 1;
    PyObject *service = SLOT(record, R_SERVICE), *raw_qt = SLOT(record, R_QUERY_TYPE), *release = SLOT(record, R_RELEASE);
    if (service == NULL || raw_qt == NULL || release == NULL || !PyUnicode_CheckExact(raw_qt)
        || PyUnicode_GET_LENGTH(raw_qt) == 0)
        return 1; /* no query type: the classifier's */
    PyObject *key = PyTuple_Pack(3, service, raw_qt, release);
    if (key == NULL)
        return -1;
    PyObject *bounded = PyDict_GetItemWithError(labels, key);
    Py_DECREF(key);
    if (bounded == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (!PyTuple_CheckExact(bounded) || PyTuple_GET_SIZE(bounded) != 5 || PyTuple_GET_ITEM(bounded, 2) != Py_False)
        return 1;
    PyObject *qt = PyTuple_GET_ITEM(bounded, 1), *series = PyTuple_GET_ITEM(bounded, 3), *top;
    long n_chunks;
    if (!IS(series, T_SERIES) || chunks_of(record, &n_chunks, &top))
        return 1;
    PyObject *d = NULL; /* no retrieval observer: nothing to observe */
    if (drifts != NULL && (d = PyDict_GetItemWithError(drifts, qt)) == NULL)
        return PyErr_Occurred() ? -1 : 1;
    long end;
    if (long_of(SLOT(record, R_END), &end))
        return 1;
    /* the order of _finish: labels, series, drift, lag, decide, release */
    Py_INCREF(qt);
    if ((rc = put(w, &SLOT(record, R_QUERY_TYPE), qt)) || (rc = counted(w, series, d, lag, now, n_chunks, top, end))
        || (rc = unsampled(w, sp, record, qt, now, n_chunks, top)))
        return rc;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(refs); i++) {
        PyObject *ref = PyList_GET_ITEM(refs, i);
        long holds;
        if (!IS(ref, T_REF) || long_of(SLOT(ref, M_HOLDS), &holds) || holds < 1 || holds > 256)
            return 1; /* released after the commit: holds - 1 is a cached small int, which cannot fail */
        for (Py_ssize_t j = 0; j < i; j++)
            if (PyList_GET_ITEM(refs, j) == ref)
                return 1;
    }
    return red_stage(red, bc, PyTuple_GET_ITEM(bounded, 4), record, cache); /* last: it holds a buffer */
}

/* --- the type ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *labels, *sampler, *retrieval, *lag, *prices;
    sampler_t sp; /* the sampler's policy, read once (a Sampler's never changes); sp.slices unused */
} Accounting;

/* policy.<name> as a number: 0; 1 for None where none_ok; -1 with an error (not a number) */
static int number_attr(PyObject *policy, const char *name, double *v, int none_ok)
{
    PyObject *o = PyObject_GetAttrString(policy, name);
    if (o == NULL)
        return -1;
    int rc = o == Py_None && none_ok ? 1 : (*v = PyFloat_AsDouble(o)) == -1.0 && PyErr_Occurred() ? -1 : 0;
    Py_DECREF(o);
    return rc;
}

/* The sampler's policy (its public `SamplingPolicy`) into *sp: 0, or -1 with an error. */
static int read_policy(PyObject *sampler, sampler_t *sp)
{
    static const char *const names[] = {"window_seconds",      "no_chunks_multiplier",  "low_score_multiplier",
                                        "refusal_multiplier",  "unusual_length_factor", "unusual_length_multiplier"};
    double *into[] = {&sp->window, &sp->no_chunks, &sp->low_score_mult, &sp->refusal, &sp->len_factor,
                      &sp->len_mult};
    PyObject *policy = PyObject_GetAttr(sampler, str_policy);
    if (policy == NULL)
        return -1;
    int rc = 0;
    for (int i = 0; i < 6 && rc == 0; i++)
        rc = number_attr(policy, names[i], into[i], 0);
    if (rc == 0) {
        rc = number_attr(policy, "low_score_threshold", &sp->low_score, 1);
        sp->has_low_score = rc == 0;
        rc = rc < 0 ? -1 : 0;
    }
    Py_DECREF(policy);
    return rc;
}

static int acc_init(Accounting *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"sampler", "retrieval", "lag", "prices", NULL};
    PyObject *sampler, *retrieval, *lag, *prices, *labels;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_accounting.init() was not called");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO", kwlist, &sampler, &retrieval, &lag, &prices))
        return -1;
    sampler_t sp = {.slices = NULL};
    if (read_policy(sampler, &sp) || (labels = PyDict_New()) == NULL)
        return -1;
    self->sp = sp;
    Py_XSETREF(self->labels, labels);
    Py_XSETREF(self->sampler, Py_NewRef(sampler));
    Py_XSETREF(self->retrieval, Py_NewRef(retrieval));
    Py_XSETREF(self->lag, Py_NewRef(lag));
    Py_XSETREF(self->prices, Py_NewRef(prices));
    return 0;
}

static int acc_traverse(Accounting *self, visitproc visit, void *arg)
{
    Py_VISIT(self->labels);
    Py_VISIT(self->sampler);
    Py_VISIT(self->retrieval);
    Py_VISIT(self->lag);
    Py_VISIT(self->prices);
    return 0;
}

static int acc_clear(Accounting *self)
{
    Py_CLEAR(self->labels);
    Py_CLEAR(self->sampler);
    Py_CLEAR(self->retrieval);
    Py_CLEAR(self->lag);
    Py_CLEAR(self->prices);
    return 0;
}

static void acc_dealloc(Accounting *self)
{
    PyObject_GC_UnTrack(self);
    acc_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* obj.observe(a[, b[, c]]) */
static PyObject *call_observe(PyObject *obj, PyObject *a, PyObject *b, PyObject *c)
{
    PyObject *args[] = {obj, a, b, c};
    return PyObject_VectorcallMethod(str_observe, args, b == NULL ? 2 : c == NULL ? 3 : 4, NULL);
}

/* `count` up to the decision, as `account` counts (the record sampled, or its window to roll):
 * 0 counted, 1 not the common path (nothing written), -1 an error. */
static int count_staged(Accounting *self, PyObject *record, PyObject *series, PyObject *red, PyObject *now)
{
    PyObject *top, *d = NULL, *qt = IS(record, T_RECORD) ? SLOT(record, R_QUERY_TYPE) : NULL;
    PyObject *cache = IS(self->prices, T_PRICES) ? SLOT(self->prices, P_CACHE) : NULL;
    long n_chunks, end;
    if (qt == NULL || !PyUnicode_CheckExact(qt) || !IS(series, T_SERIES) || !PyFloat_CheckExact(now)
        || chunks_of(record, &n_chunks, &top) || long_of(SLOT(record, R_END), &end)
        || (cache != NULL && !PyDict_CheckExact(cache)))
        return 1;
    if (self->retrieval != Py_None) {
        PyObject *drifts = PyObject_GetAttr(self->retrieval, str_windows);
        if (drifts == NULL)
            return -1;
        /* borrowed: the observer keeps its dict, and nothing but this runs until the commit */
        d = PyDict_CheckExact(drifts) ? PyDict_GetItemWithError(drifts, qt) : NULL;
        Py_DECREF(drifts);
        if (d == NULL)
            return PyErr_Occurred() ? -1 : 1; /* a slice to create: the observer's */
    }
    writes_t w = {.n = 0};
    red_t r = {.held = 0};
    bounds_t bc = {.obj = NULL};
    int rc = counted(&w, series, d, self->lag, PyFloat_AS_DOUBLE(now), n_chunks, top, end);
    if (rc == 0)
        rc = red_stage(&r, &bc, red, record, cache);
    if (rc) {
        drop(&w);
        red_release(&r);
        return rc;
    }
    commit(&w);
    red_commit(&r);
    return 0;
}

/* The reference's `count`: counted as `account` counts where that is the common path (a sampled
 * record's observe calls were ~30,000 instructions), else the same objects' own methods, called
 * alike; then the sampler's `decide`. */
static PyObject *acc_count(Accounting *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "count(record, series, red, now)");
        return NULL;
    }
    PyObject *record = args[0], *series = args[1], *red = args[2], *now = args[3], *r = NULL;
    int staged = count_staged(self, record, series, red, now);
    if (staged < 0)
        return NULL;
    if (staged == 0) {
        PyObject *dargs[] = {self->sampler, record, now};
        return PyObject_VectorcallMethod(str_decide, dargs, 3, NULL);
    }
    PyObject *chunks = NULL, *n = NULL, *top = NULL, *end = NULL, *scaled = NULL, *lag = NULL, *qt = NULL;
    Py_ssize_t len;
    if ((chunks = PyObject_GetAttrString(record, "chunks")) == NULL || (len = PyObject_Length(chunks)) < 0
        || (n = PyLong_FromSsize_t(len)) == NULL)
        goto done;
    if (len) {
        PyObject *first = PySequence_GetItem(chunks, 0);
        top = first == NULL ? NULL : PyObject_GetAttrString(first, "score");
        Py_XDECREF(first);
        if (top == NULL)
            goto done;
    } else
        top = Py_NewRef(Py_None);
    if ((r = call_observe(series, n, top, NULL)) == NULL)
        goto done;
    Py_CLEAR(r);
    if ((r = call_observe(red, record, self->prices, NULL)) == NULL)
        goto done;
    Py_CLEAR(r);
    if (self->retrieval != Py_None) {
        if ((qt = PyObject_GetAttrString(record, "query_type")) == NULL
            || (r = call_observe(self->retrieval, qt, n, top)) == NULL)
            goto done;
        Py_CLEAR(r);
    }
    int truth;
    if ((end = PyObject_GetAttrString(record, "end_ns")) == NULL || (truth = PyObject_IsTrue(end)) < 0)
        goto done;
    if (truth) {
        PyObject *billion = PyFloat_FromDouble(1e9);
        scaled = billion == NULL ? NULL : PyNumber_TrueDivide(end, billion);
        Py_XDECREF(billion);
        PyObject *x = scaled == NULL ? NULL : PyNumber_Subtract(now, scaled);
        double v = x == NULL ? -1.0 : PyFloat_AsDouble(x);
        Py_XDECREF(x);
        if (x == NULL || (v == -1.0 && PyErr_Occurred()) || (lag = PyFloat_FromDouble(v > 0.0 ? v : 0.0)) == NULL
            || (r = call_observe(self->lag, lag, NULL, NULL)) == NULL)
            goto done;
        Py_CLEAR(r);
    }
    PyObject *dargs[] = {self->sampler, record, now};
    r = PyObject_VectorcallMethod(str_decide, dargs, 3, NULL);
done:
    Py_XDECREF(chunks);
    Py_XDECREF(n);
    Py_XDECREF(top);
    Py_XDECREF(qt);
    Py_XDECREF(end);
    Py_XDECREF(scaled);
    Py_XDECREF(lag);
    return r;
}

static PyObject *acc_account(Accounting *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    double now;
    if (nargs != 3 || !PyList_CheckExact(args[0]) || (start = PyLong_AsSsize_t(args[1])) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "account(finished: list, start, now)");
        return NULL;
    }
    if ((now = PyFloat_AsDouble(args[2])) == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *finished = args[0], *labels = self->labels, *lag = self->lag;
    sampler_t sp = self->sp;
    PyObject *drifts = NULL;
    PyObject *cache = IS(self->prices, T_PRICES) ? SLOT(self->prices, P_CACHE) : NULL;
    Py_ssize_t i = start;
    writes_t w = {.n = 0};
    red_t red = {.held = 0};
    bounds_t bc = {.obj = NULL};
    if ((sp.slices = PyObject_GetAttr(self->sampler, str_slices)) == NULL
        || (self->retrieval != Py_None && (drifts = PyObject_GetAttr(self->retrieval, str_windows)) == NULL))
        goto fail;
    if (!PyDict_CheckExact(sp.slices) || (drifts != NULL && !PyDict_CheckExact(drifts)) || !PyDict_CheckExact(labels)
        || (cache != NULL && !PyDict_CheckExact(cache))) {
        i = start; /* not the shapes this was written for: Python counts them all */
        goto done;
    }
    for (; i < PyList_GET_SIZE(finished); i++) {
        PyObject *fin = PyList_GET_ITEM(finished, i);
        int rc = one(&w, &red, &bc, fin, now, labels, &sp, drifts, lag, cache);
        if (rc) {
            drop(&w);
            red_release(&red);
            if (rc < 0)
                goto fail;
            break;
        }
        commit(&w);
        red_commit(&red);
        PyObject *refs = SLOT(fin, F_REFS);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(refs); j++) { /* release_all */
            PyObject **holds = &SLOT(PyList_GET_ITEM(refs, j), M_HOLDS);
            PyObject *old = *holds;
            *holds = PyLong_FromLong(PyLong_AsLong(old) - 1); /* 0..255: cached, never fails */
            Py_DECREF(old);
        }
    }
done:
    Py_XDECREF(sp.slices);
    Py_XDECREF(drifts);
    return PyLong_FromSsize_t(i);
fail:
    Py_XDECREF(sp.slices);
    Py_XDECREF(drifts);
    return NULL;
}

static PyMemberDef acc_members[] = {
    {"labels", T_OBJECT_EX, offsetof(Accounting, labels), READONLY,
     "raw (service, query_type, release) -> bounded labels and their series, filled by the stage"},
    {"sampler", T_OBJECT_EX, offsetof(Accounting, sampler), READONLY, NULL},
    {"retrieval", T_OBJECT_EX, offsetof(Accounting, retrieval), READONLY, NULL},
    {"lag", T_OBJECT_EX, offsetof(Accounting, lag), READONLY, NULL},
    {"prices", T_OBJECT_EX, offsetof(Accounting, prices), READONLY, NULL},
    {NULL},
};

static PyMethodDef acc_methods[] = {
    {"count", (PyCFunction)(void (*)(void))acc_count, METH_FASTCALL,
     "count(record, series, red, now) -> float | None: as accounting.RecordAccounting.count"},
    {"account", (PyCFunction)(void (*)(void))acc_account, METH_FASTCALL,
     "account(finished, start, now) -> index: from start, each finished trace on the common path counted as "
     "IngestStage._finish counts it and its messages released, up to the first that is not"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AccountingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "monitor.ingest._accounting.RecordAccounting",
    .tp_doc = PyDoc_STR("RecordAccounting(sampler, retrieval, lag, prices): accounting.RecordAccounting's compiled twin"),
    .tp_basicsize = sizeof(Accounting),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)acc_init,
    .tp_dealloc = (destructor)acc_dealloc,
    .tp_traverse = (traverseproc)acc_traverse,
    .tp_clear = (inquiry)acc_clear,
    .tp_members = acc_members,
    .tp_methods = acc_methods,
};

/* --- holds on messages ------------------------------------------------------------------ */

/* `offsets.new_refs`: a MessageRef (partition, offset, one hold, nothing charged) for each leading message whose
 * offset is at least `last` (None: any), up to the first that is not (a re-delivery). Built
 * without calling the class, whose __init__ only stores those slots. */
static PyObject *new_refs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "new_refs(partition, messages: list, last)");
        return NULL;
    }
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "_accounting.init was not called");
        return NULL;
    }
    PyObject *partition = args[0], *messages = args[1];
    long long last = 0;
    int bounded = args[2] != Py_None;
    if (bounded && (!PyLong_CheckExact(args[2]) || ((last = PyLong_AsLongLong(args[2])) == -1 && PyErr_Occurred())))
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_TypeError, "last: an int or None"), NULL);
    Py_ssize_t n = PyList_GET_SIZE(messages);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    PyObject *one_hold = PyLong_FromLong(1);
    if (one_hold == NULL)
        goto fail;
    PyTypeObject *cls = types[T_REF];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *offset = PyObject_GetAttr(PyList_GET_ITEM(messages, i), str_offset);
        if (offset == NULL)
            goto fail;
        long long off = PyLong_CheckExact(offset) ? PyLong_AsLongLong(offset) : -1;
        if (!PyLong_CheckExact(offset) || (off == -1 && PyErr_Occurred())) {
            Py_DECREF(offset);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a message offset that is not an int");
            goto fail;
        }
        if (bounded && off < last) {
            Py_DECREF(offset);
            break;
        }
        PyObject *ref = cls->tp_alloc(cls, 0);
        if (ref == NULL || PyList_Append(out, ref) < 0) {
            Py_XDECREF(ref);
            Py_DECREF(offset);
            goto fail;
        }
        SLOT(ref, M_PARTITION) = Py_NewRef(partition);
        SLOT(ref, M_OFFSET) = offset; /* our reference, now the ref's */
        SLOT(ref, M_HOLDS) = Py_NewRef(one_hold);
        SLOT(ref, M_TRACES) = PyLong_FromLong(0); /* cached: cannot fail */
        SLOT(ref, M_SIZE) = PyLong_FromLong(0);
        PyObject_GC_UnTrack(ref); /* refers to a partition and ints only: never in a cycle */
        Py_DECREF(ref);
        last = off + 1;
        bounded = 1;
    }
    Py_DECREF(one_hold);
    return out;
fail:
    Py_XDECREF(one_hold);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)(void (*)(void))init, METH_VARARGS | METH_KEYWORDS, init_doc},
    {"new_refs", (PyCFunction)(void (*)(void))new_refs, METH_FASTCALL,
     "new_refs(partition, messages, last) -> list[MessageRef]: offsets.new_refs, compiled"},
    {"trace_fraction", trace_fraction, METH_O,
     "trace_fraction(trace_id) -> float: sample.trace_fraction's uniform draw, computed here"},
    {"refusal_marks", refusal_marks, METH_VARARGS,
     "refusal_marks(index, scan_chars): the sampler's (gate, marks) index and how much of an answer to scan"},
    {"looks_like_refusal", looks_like_refusal, METH_O,
     "looks_like_refusal(answer) -> bool: sampler.looks_like_refusal, computed here"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_accounting", "The ingest stage's per-record accounting, compiled (see accounting.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__accounting(void)
{
    if (PyType_Ready(&AccountingType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "RecordAccounting", (PyObject *)&AccountingType) < 0)
        Py_CLEAR(m);
    return m;
}
