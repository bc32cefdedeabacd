/* Compiled trace assembly: the fast path of monitor/ingest/assemble.py.
 *
 * `Assembler` here does exactly what `assemble.PyAssembler` (the reference) does, call for call:
 * the same `Finished` objects (trace id, record, reason, the same `MessageRef` objects in the same
 * order), the same late spans, evictions and emission order, the same `open_traces` and
 * `open_bytes`, the same holds taken. What differs is only how the state is kept:
 *
 *   - open traces: a dict trace id -> `_OpenTrace` (a small C object holding the spans kept and
 *     the refs held, as lists), plus an intrusive doubly-linked list in insertion order: the
 *     oldest trace is found in O(1), never by iterating a dict that deletions left sparse;
 *   - traces whose root came: a ring buffer of (emit at, trace id), in time order;
 *   - emitted ids (late-span detection): a set plus a ring buffer of its insertion order.
 *
 * `build_record` runs in C inside `_finish`. Spans must be `SpanFacts` (or a subclass): their
 * fields are read through the slots' offsets (member descriptors), as `RagRecord` and `Finished`
 * are built by filling their slots when they are plain slots dataclasses (assemble._field_names;
 * otherwise the class is called). Byte counts are kept as 64-bit integers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <structmember.h>

/* --- set up once by assemble.py (`setup`) ----------------------------------------------------- */

static PyTypeObject *span_type = NULL, *chunk_type = NULL, *ref_type = NULL;
enum { S_TRACE_ID, S_SPAN_ID, S_PARENT, S_SERVICE, S_START, S_END, S_ROLE, S_QUERY, S_ANSWER, S_CHUNKS, S_MODEL,
       S_QUERY_TYPE, S_REPLAY, S_RELEASE, S_ERROR, S_IN_TOKENS, S_OUT_TOKENS, S_SESSION, S_USER, S_UNREAD,
       N_SPAN_FIELDS };
static const char *const span_field_names[N_SPAN_FIELDS] = {
    "trace_id", "span_id", "parent_span_id", "service", "start_ns", "end_ns", "role",
    "query", "answer", "chunks", "model", "query_type", "replay", "release", "error", "input_tokens",
    "output_tokens", "session_id", "user_id", "unread"};
static Py_ssize_t span_off[N_SPAN_FIELDS];
static Py_ssize_t chunk_id_off, holds_off, partition_off, traces_off, size_off;
static PyObject *role_root, *role_retriever, *role_reranker, *role_llm, *role_other;
static PyObject *rej_late, *rej_evicted, *rej_not_rag, *rej_missing_query, *rej_missing_answer, *rej_too_many;
static PyObject *sort_by_end, *sort_by_start, *max_by_end; /* fallbacks for keys that are not int64 */
static PyObject *stage_facts_fn;                          /* assemble.stage_facts, likewise */
static PyObject *build_record_fn; /* assemble.build_record: traces of the shapes left to the reference */
static long long trace_cost, span_cost; /* assemble.TRACE_COST, SPAN_COST: charged besides messages */
static PyObject *str_acquire, *str_append, *empty_str, *str_traces, *str_size;
static int ready = 0;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))
#define F(span, f) SLOT(span, span_off[f])

/* A class built by filling its slots (all fields given, in order), or by calling it. */
#define MAX_FIELDS 20
typedef struct {
    PyObject *cls;
    int n; /* 0: call the class */
    Py_ssize_t off[MAX_FIELDS];
} builder_t;
static builder_t record_b, finished_b;

/* An open trace, its lists of spans and message refs, a record, its chunk list and its `Finished`:
 * they only ever refer to spans, chunks, refs and strings, none of which refers back, so they
 * cannot be part of a cycle: kept out of the cyclic collector (as `_wire` does with spans), whose
 * young generation they would otherwise fill (traces stay open for the assembly grace). */
static PyObject *untracked(PyObject *obj)
{
    if (obj != NULL)
        PyObject_GC_UnTrack(obj);
    return obj;
}

static PyObject *build(builder_t *b, PyObject *const *args, int nargs)
{
    if (b->n != nargs)
        return PyObject_Vectorcall(b->cls, args, nargs, NULL);
    PyTypeObject *type = (PyTypeObject *)b->cls;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL)
        return NULL;
    for (int i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        SLOT(obj, b->off[i]) = args[i];
    }
    return untracked(obj);
}

/* The offset of `cls.name`'s slot; -1 with an exception set if it is not a plain object slot. */
static Py_ssize_t member_offset(PyObject *cls, PyObject *name)
{
    PyObject *descr = PyObject_GetAttr(cls, name);
    if (descr == NULL)
        return -1;
    Py_ssize_t off = -1;
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
            off = m->offset;
    }
    Py_DECREF(descr);
    if (off < 0)
        PyErr_Format(PyExc_TypeError, "%R.%U is not a slot", cls, name);
    return off;
}

static Py_ssize_t member_offset_str(PyObject *cls, const char *name)
{
    PyObject *s = PyUnicode_InternFromString(name);
    if (s == NULL)
        return -1;
    Py_ssize_t off = member_offset(cls, s);
    Py_DECREF(s);
    return off;
}

/* `fields` is None (call the class) or the names of all its fields, in __init__'s order. */
static int set_builder(builder_t *b, PyObject *cls, PyObject *fields, int nargs)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "a class is needed");
        return -1;
    }
    Py_INCREF(cls);
    Py_XSETREF(b->cls, cls);
    b->n = 0;
    if (fields == Py_None)
        return 0;
    PyObject *fast = PySequence_Fast(fields, "fields must be a sequence");
    if (fast == NULL)
        return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(fast) != nargs) {
        PyErr_Format(PyExc_ValueError, "%R: %d fields expected", cls, nargs);
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < nargs; i++) {
        PyObject *name = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyUnicode_Check(name) || (b->off[i] = member_offset(cls, name)) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "field names must be str");
            rc = -1;
        }
    }
    Py_DECREF(fast);
    if (rc == 0)
        b->n = nargs;
    return rc;
}

/* --- helpers ---------------------------------------------------------------------------------- */

/* Python truthiness, -1 on error; the common types without a call. */
static inline int truth(PyObject *o)
{
    if (o == Py_None || o == Py_False)
        return 0;
    if (o == Py_True)
        return 1;
    if (PyUnicode_CheckExact(o))
        return PyUnicode_GET_LENGTH(o) != 0;
    if (PyList_CheckExact(o))
        return PyList_GET_SIZE(o) != 0;
    return PyObject_IsTrue(o);
}

/* A SpanFacts with every field the assembler reads set; else an exception. */
static int check_span(PyObject *s)
{
    if (!PyObject_TypeCheck(s, span_type)) {
        PyErr_Format(PyExc_TypeError, "the compiled Assembler takes SpanFacts, not %.200s", Py_TYPE(s)->tp_name);
        return -1;
    }
    /* a field deleted (`del span.x`) is NULL in its slot: unrolled, the common case is one
     * load and test a field */
    int missing = 0;
#define CHECK_FIELD(f) missing |= F(s, f) == NULL
    CHECK_FIELD(0); CHECK_FIELD(1); CHECK_FIELD(2); CHECK_FIELD(3); CHECK_FIELD(4); CHECK_FIELD(5);
    CHECK_FIELD(6); CHECK_FIELD(7); CHECK_FIELD(8); CHECK_FIELD(9); CHECK_FIELD(10); CHECK_FIELD(11);
    CHECK_FIELD(12); CHECK_FIELD(13); CHECK_FIELD(14); CHECK_FIELD(15); CHECK_FIELD(16); CHECK_FIELD(17);
    CHECK_FIELD(18); CHECK_FIELD(19);
#undef CHECK_FIELD
    _Static_assert(N_SPAN_FIELDS == 20, "check_span checks every field");
    if (!missing)
        return 0;
    for (int f = 0; f < N_SPAN_FIELDS; f++)
        if (F(s, f) == NULL) {
            PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '%s'", Py_TYPE(s)->tp_name,
                         span_field_names[f]);
            return -1;
        }
    return 0;
}

/* `ref.acquire()`: holds += 1 in the slot for a plain MessageRef. */
static int acquire(PyObject *ref)
{
    if (Py_IS_TYPE(ref, ref_type)) {
        PyObject *h = SLOT(ref, holds_off);
        if (h != NULL && PyLong_CheckExact(h)) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(h, &overflow);
            if (!overflow && v < LLONG_MAX) {
                PyObject *nv = PyLong_FromLongLong(v + 1);
                if (nv == NULL)
                    return -1;
                SLOT(ref, holds_off) = nv;
                Py_DECREF(h);
                return 0;
            }
            PyErr_Clear();
        }
    }
    PyObject *r = PyObject_CallMethodNoArgs(ref, str_acquire);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static int as_int64(PyObject *o, long long *v);

/* A MessageRef's int slot (`traces`, `size`): read straight from a plain one (unset reads 0). */
static int ref_get(PyObject *ref, Py_ssize_t off, PyObject *name, long long *v)
{
    PyObject *o;
    if (Py_IS_TYPE(ref, ref_type)) {
        o = SLOT(ref, off);
        if (o == NULL) {
            *v = 0;
            return 0;
        }
        Py_INCREF(o);
    } else if ((o = PyObject_GetAttr(ref, name)) == NULL)
        return -1;
    int rc = as_int64(o, v);
    Py_DECREF(o);
    return rc;
}

static int ref_set(PyObject *ref, Py_ssize_t off, PyObject *name, long long v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL)
        return -1;
    if (Py_IS_TYPE(ref, ref_type)) {
        Py_XSETREF(SLOT(ref, off), o);
        return 0;
    }
    int rc = PyObject_SetAttr(ref, name, o);
    Py_DECREF(o);
    return rc;
}

static inline int out_append(PyObject *out, PyObject *item)
{
    if (PyList_CheckExact(out))
        return PyList_Append(out, item);
    PyObject *r = PyObject_CallMethodOneArg(out, str_append, item);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static PyObject *make_finished(PyObject *tid, PyObject *record, PyObject *reason, PyObject *refs, PyObject *spans)
{
    PyObject *args[5] = {tid, record, reason, refs, spans};
    return build(&finished_b, args, 5);
}

/* A span dropped for `reason` (late, past the cap): a Finished of its own, holding nothing. */
static PyObject *dropped_finished(PyObject *tid, PyObject *reason)
{
    PyObject *refs = untracked(PyList_New(0));
    if (refs == NULL)
        return NULL;
    PyObject *fin = make_finished(tid, Py_None, reason, refs, Py_None);
    Py_DECREF(refs);
    return fin;
}

/* Append `n` of them to `out`. */
static int drop_spans(PyObject *out, PyObject *tid, PyObject *reason, long long n);

/* Arguments of a METH_FASTCALL | METH_KEYWORDS method: `npos` may be positional, the first `nreq`
 * are required. */
static int parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int npos, int nreq, int ntotal, PyObject **out)
{
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)", fname, npos, nargs);
        return -1;
    }
    for (int i = 0; i < ntotal; i++)
        out[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int j = 0;
        while (j < ntotal && PyUnicode_CompareWithASCIIString(key, names[j]) != 0)
            j++;
        if (j == ntotal) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname, key);
            return -1;
        }
        if (out[j] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname, names[j]);
            return -1;
        }
        out[j] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++)
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname, names[i]);
            return -1;
        }
    return 0;
}

static int as_double(PyObject *o, double *v)
{
    *v = PyFloat_CheckExact(o) ? PyFloat_AS_DOUBLE(o) : PyFloat_AsDouble(o);
    return *v == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static int as_int64(PyObject *o, long long *v)
{
    *v = PyLong_AsLongLong(o);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* --- build_record ------------------------------------------------------------------------------ */

/* Stable sort of items by the int64 keys (merge sort; insertion below 16). */
static void sort_keys(long long *k, PyObject **o, long long *tk, PyObject **to, Py_ssize_t n)
{
    if (n <= 16) {
        for (Py_ssize_t i = 1; i < n; i++) {
            long long key = k[i];
            PyObject *obj = o[i];
            Py_ssize_t j = i;
            while (j > 0 && key < k[j - 1]) {
                k[j] = k[j - 1];
                o[j] = o[j - 1];
                j--;
            }
            k[j] = key;
            o[j] = obj;
        }
        return;
    }
    Py_ssize_t h = n / 2, i = 0, j = h, m = 0;
    sort_keys(k, o, tk, to, h);
    sort_keys(k + h, o + h, tk, to, n - h);
    while (i < h && j < n) {
        if (k[j] < k[i]) {
            tk[m] = k[j];
            to[m++] = o[j++];
        } else {
            tk[m] = k[i];
            to[m++] = o[i++];
        }
    }
    while (i < h) {
        tk[m] = k[i];
        to[m++] = o[i++];
    }
    /* the rest of the right half is in place already */
    memcpy(k, tk, m * sizeof(*k));
    memcpy(o, to, m * sizeof(*o));
}

/* The int64 value of each item's field `f`; 0 when one is not a plain int that fits. */
static int int_keys(PyObject **items, Py_ssize_t n, int f, long long *keys)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = F(items[i], f);
        if (!PyLong_CheckExact(v))
            return 0;
        int overflow;
        keys[i] = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return 0;
    }
    return 1;
}

/* Python's list of the items, for the fallbacks. */
static PyObject *as_list(PyObject **items, Py_ssize_t n)
{
    PyObject *lst = PyList_New(n);
    if (lst == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyList_SET_ITEM(lst, i, items[i]);
    }
    return lst;
}

/* `sorted(items, key=field)` in place: items stay borrowed (the trace's span list holds them). */
static int sort_by(PyObject **items, Py_ssize_t n, int f, PyObject *fallback)
{
    if (n < 2)
        return 0;
    long long stack_keys[64];
    PyObject *stack_tmp[32];
    long long *keys = n <= 32 ? stack_keys : PyMem_Malloc(2 * n * sizeof(long long));
    PyObject **tmp = n <= 32 ? stack_tmp : PyMem_Malloc(n * sizeof(PyObject *));
    int rc = 0;
    if (keys == NULL || tmp == NULL) {
        PyErr_NoMemory();
        rc = -1;
    } else if (int_keys(items, n, f, keys))
        sort_keys(keys, items, keys + n, tmp, n);
    else {
        PyObject *lst = as_list(items, n), *sorted = NULL;
        if (lst == NULL || (sorted = PyObject_CallOneArg(fallback, lst)) == NULL)
            rc = -1;
        else if (!PyList_CheckExact(sorted) || PyList_GET_SIZE(sorted) != n) {
            PyErr_SetString(PyExc_RuntimeError, "sort fallback: a list of the same length expected");
            rc = -1;
        } else
            for (Py_ssize_t i = 0; i < n; i++)
                items[i] = PyList_GET_ITEM(sorted, i);
        Py_XDECREF(lst);
        Py_XDECREF(sorted);
    }
    if (n > 32) {
        PyMem_Free(keys);
        PyMem_Free(tmp);
    }
    return rc;
}

/* `max(items, key=end_ns)`: the first maximal one (borrowed), NULL on error. */
static PyObject *max_end(PyObject **items, Py_ssize_t n)
{
    PyObject *best = items[0];
    int overflow;
    if (PyLong_CheckExact(F(best, S_END))) {
        long long bk = PyLong_AsLongLongAndOverflow(F(best, S_END), &overflow);
        Py_ssize_t i = 1;
        for (; !overflow && i < n; i++) {
            PyObject *v = F(items[i], S_END);
            if (!PyLong_CheckExact(v))
                break;
            long long k = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (!overflow && k > bk) {
                bk = k;
                best = items[i];
            }
        }
        if (!overflow && i == n)
            return best;
    }
    PyObject *lst = as_list(items, n);
    if (lst == NULL)
        return NULL;
    PyObject *r = PyObject_CallOneArg(max_by_end, lst);
    Py_DECREF(lst);
    if (r == NULL)
        return NULL;
    Py_DECREF(r); /* still held by the span list */
    return r;
}

/* `_final_ranking(rerankers, retrievers)`: a new reference. The retrievers are sorted in place. */
static PyObject *final_ranking(PyObject **rerankers, Py_ssize_t n_rr, PyObject **retrievers, Py_ssize_t n_ret)
{
    if (n_rr) {
        PyObject *last = max_end(rerankers, n_rr);
        if (last == NULL)
            return NULL;
        PyObject *chunks = F(last, S_CHUNKS);
        int t = truth(chunks);
        if (t < 0)
            return NULL;
        if (t) {
            Py_INCREF(chunks);
            return chunks;
        }
    }
    if (n_ret == 1) {
        PyObject *chunks = F(retrievers[0], S_CHUNKS);
        int t = truth(chunks);
        if (t < 0)
            return NULL;
        if (t) {
            Py_INCREF(chunks);
            return chunks;
        }
        return untracked(PyList_New(0));
    }
    PyObject *out = untracked(PyList_New(0));
    if (out == NULL || n_ret == 0)
        return out;
    PyObject *seen = PySet_New(NULL);
    if (seen == NULL || sort_by(retrievers, n_ret, S_START, sort_by_start) < 0)
        goto fail;
    for (Py_ssize_t i = 0; i < n_ret; i++) {
        PyObject *chunks = F(retrievers[i], S_CHUNKS);
        int t = truth(chunks);
        if (t < 0)
            goto fail;
        if (!t)
            continue;
        PyObject *it = PyObject_GetIter(chunks);
        if (it == NULL)
            goto fail;
        PyObject *c;
        while ((c = PyIter_Next(it)) != NULL) {
            PyObject *cid;
            if (PyObject_TypeCheck(c, chunk_type) && SLOT(c, chunk_id_off) != NULL) {
                cid = SLOT(c, chunk_id_off);
                Py_INCREF(cid);
            } else if ((cid = PyObject_GetAttrString(c, "id")) == NULL) {
                Py_DECREF(c);
                break;
            }
            int in = PySet_Contains(seen, cid);
            if (in < 0 || (!in && (PySet_Add(seen, cid) < 0 || PyList_Append(out, c) < 0))) {
                Py_DECREF(cid);
                Py_DECREF(c);
                break;
            }
            Py_DECREF(cid);
            Py_DECREF(c);
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            goto fail;
    }
    Py_DECREF(seen);
    return out;
fail:
    Py_XDECREF(seen);
    Py_DECREF(out);
    return NULL;
}

/* The first truthy `query` of the spans (borrowed), NULL if none; -1 in *err on error. */
static PyObject *first_query(PyObject **spans, Py_ssize_t n, int *err)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *q = F(spans[i], S_QUERY);
        int t = truth(q);
        if (t < 0) {
            *err = -1;
            return NULL;
        }
        if (t)
            return q;
    }
    return NULL;
}

/* 0 with *v for an exact int within int64; 1 (no error set) for anything else. */
static int as_plain_int(PyObject *o, long long *v)
{
    int overflow;
    if (!PyLong_CheckExact(o))
        return 1;
    *v = PyLong_AsLongLongAndOverflow(o, &overflow);
    return overflow ? 1 : 0;
}

/* A stage's wall time (`assemble._stage_ns`) over two groups of spans: 0 with *ns set (-1: no span
 * with times), 1 when a time is not an int64 (the Python function decides). */
static int stage_ns(PyObject **a, Py_ssize_t na, PyObject **b, Py_ssize_t nb, long long *ns)
{
    long long lo = 0, hi = 0;
    for (int g = 0; g < 2; g++) {
        PyObject **items = g ? b : a;
        Py_ssize_t n = g ? nb : na;
        for (Py_ssize_t i = 0; i < n; i++) {
            long long st, en;
            if (as_plain_int(F(items[i], S_START), &st) || as_plain_int(F(items[i], S_END), &en))
                return 1;
            if (st) {
                if (!lo || st < lo)
                    lo = st;
                if (en > hi)
                    hi = en;
            }
        }
    }
    *ns = lo ? hi - lo : -1;
    return 0;
}

/* `assemble.stage_facts(retrievers, rerankers, llms)` as the four new references of a record's
 * fields (retrieval_ns, generation_ns, input_tokens, output_tokens): 0, or -1 with an error. */
static int stage_facts(PyObject **ret, Py_ssize_t n_ret, PyObject **rr, Py_ssize_t n_rr, PyObject **llms,
                       Py_ssize_t n_llm, PyObject **out)
{
    long long retrieval, generation, in = 0, outs = 0;
    int has_in = 0, has_out = 0, native = stage_ns(ret, n_ret, rr, n_rr, &retrieval) == 0
                                         && stage_ns(llms, n_llm, NULL, 0, &generation) == 0;
    for (Py_ssize_t i = 0; native && i < n_llm; i++) {
        PyObject *a = F(llms[i], S_IN_TOKENS), *b = F(llms[i], S_OUT_TOKENS);
        long long x;
        if (a != Py_None) {
            native = as_plain_int(a, &x) == 0 && x >= 0 && x <= (1LL << 40);
            in += x;
            has_in = 1;
        }
        if (native && b != Py_None) {
            native = as_plain_int(b, &x) == 0 && x >= 0 && x <= (1LL << 40);
            outs += x;
            has_out = 1;
        }
    }
    if (native) {
        out[0] = PyLong_FromLongLong(retrieval);
        out[1] = PyLong_FromLongLong(generation);
        /* one LLM span (the common case): its own objects, equal to the reference's sums */
        out[2] = n_llm == 1 ? Py_NewRef(F(llms[0], S_IN_TOKENS)) : has_in ? PyLong_FromLongLong(in) : Py_NewRef(Py_None);
        out[3] = n_llm == 1 ? Py_NewRef(F(llms[0], S_OUT_TOKENS)) : has_out ? PyLong_FromLongLong(outs) : Py_NewRef(Py_None);
    } else { /* a value the decoder never gives: the reference's arithmetic */
        PyObject *lists[3] = {as_list(ret, n_ret), as_list(rr, n_rr), as_list(llms, n_llm)}, *r = NULL;
        if (lists[0] && lists[1] && lists[2])
            r = PyObject_Vectorcall(stage_facts_fn, lists, 3, NULL);
        for (int i = 0; i < 3; i++)
            Py_XDECREF(lists[i]);
        if (r == NULL)
            return -1;
        if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 4) {
            Py_DECREF(r);
            PyErr_SetString(PyExc_TypeError, "stage_facts: a tuple of 4 expected");
            return -1;
        }
        for (int i = 0; i < 4; i++)
            out[i] = Py_NewRef(PyTuple_GET_ITEM(r, i));
        Py_DECREF(r);
    }
    for (int i = 0; i < 4; i++)
        if (out[i] == NULL) {
            for (int j = 0; j < 4; j++)
                Py_CLEAR(out[j]);
            return -1;
        }
    return 0;
}

/* `build_record(tid, spans)`: *record a new reference (None or a RagRecord), *reason borrowed. */
static int build_record(PyObject *tid, PyObject *spans, PyObject **record, PyObject **reason)
{
    Py_ssize_t n = PyList_GET_SIZE(spans);
    PyObject *stack[3 * 16];
    PyObject **buf = n <= 16 ? stack : PyMem_Malloc(3 * n * sizeof(PyObject *));
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject **retrievers = buf, **rerankers = buf + n, **llms = buf + 2 * n;
    Py_ssize_t n_ret = 0, n_rr = 0, n_llm = 0;
    PyObject *root = NULL, *query_type = NULL, *release = NULL, *chunks = NULL;
    int replay = 0, special = 0, rc = -1, t;
    Py_INCREF(spans);
    *record = NULL;
    *reason = Py_None;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(spans, i);
        if (check_span(s) < 0)
            goto done;
        PyObject *role = F(s, S_ROLE);
        if (role == role_root) {
            /* The trace's own root wins over a parented span that calls itself a chain. */
            if (root == NULL)
                root = s;
            else {
                if ((t = truth(F(root, S_PARENT))) < 0)
                    goto done;
                if (t) {
                    if ((t = truth(F(s, S_PARENT))) < 0)
                        goto done;
                    if (!t)
                        root = s;
                }
            }
        } else if (role == role_retriever)
            retrievers[n_ret++] = s;
        else if (role == role_llm)
            llms[n_llm++] = s;
        else if (role == role_reranker)
            rerankers[n_rr++] = s;
        if (query_type == NULL) {
            if ((t = truth(F(s, S_QUERY_TYPE))) < 0)
                goto done;
            if (t)
                query_type = F(s, S_QUERY_TYPE);
        }
        if (release == NULL) {
            if ((t = truth(F(s, S_RELEASE))) < 0)
                goto done;
            if (t)
                release = F(s, S_RELEASE);
        }
        if (!replay && (replay = truth(F(s, S_REPLAY))) < 0)
            goto done;
        if (F(s, S_SESSION) != Py_None || F(s, S_USER) != Py_None || F(s, S_UNREAD) != Py_None)
            special = 1;
    }
    if (special || n_ret > 1) {
        /* sessions and users, unread spans, several retrievals: the reference's rules */
        PyObject *r = PyObject_CallFunctionObjArgs(build_record_fn, tid, spans, NULL);
        if (r == NULL)
            goto done;
        if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2) {
            Py_DECREF(r);
            PyErr_SetString(PyExc_TypeError, "build_record: a tuple of 2 expected");
            goto done;
        }
        *record = Py_NewRef(PyTuple_GET_ITEM(r, 0));
        *reason = PyTuple_GET_ITEM(r, 1); /* borrowed: a Reject member (or None), alive in the enum */
        Py_DECREF(r);
        rc = 0;
        goto done;
    }
    if (n_llm > 1 && sort_by(llms, n_llm, S_END, sort_by_end) < 0)
        goto done;
    if (!(n_ret || n_rr || n_llm)) {
        int any = 0;
        for (Py_ssize_t i = 0; i < n && !any; i++)
            any = truth(F(PyList_GET_ITEM(spans, i), S_CHUNKS));
        if (any == 0 && root != NULL && (any = truth(F(root, S_QUERY))) == 0)
            any = truth(F(root, S_ANSWER)); /* only the request span's query or answer counts */
        for (Py_ssize_t i = 0; root == NULL && i < n && !any; i++) {
            PyObject *s = PyList_GET_ITEM(spans, i);
            if ((any = truth(F(s, S_QUERY))) == 0)
                any = truth(F(s, S_ANSWER));
            if (any < 0)
                goto done;
        }
        if (any < 0)
            goto done;
        if (!any) {
            /* No retrieval, no model call, no request with its answer: HTTP or framework
             * instrumentation of non-RAG endpoints, an index build, an embedding call. */
            *record = Py_None;
            Py_INCREF(Py_None);
            *reason = rej_not_rag;
            rc = 0;
            goto done;
        }
    }
    PyObject *query = root != NULL ? F(root, S_QUERY) : Py_None;
    if ((t = truth(query)) < 0)
        goto done;
    if (!t) {
        int err = 0;
        query = first_query(retrievers, n_ret, &err);
        if (query == NULL && !err)
            query = first_query(rerankers, n_rr, &err);
        if (query == NULL && !err)
            query = first_query(llms, n_llm, &err);
        if (err)
            goto done;
        if (query == NULL) {
            *record = Py_None;
            Py_INCREF(Py_None);
            *reason = rej_missing_query;
            rc = 0;
            goto done;
        }
    }
    PyObject *answer = root != NULL ? F(root, S_ANSWER) : Py_None;
    if ((t = truth(answer)) < 0)
        goto done;
    if (!t) {
        answer = NULL;
        for (Py_ssize_t i = n_llm - 1; i >= 0 && answer == NULL; i--) {
            if ((t = truth(F(llms[i], S_ANSWER))) < 0)
                goto done;
            if (t)
                answer = F(llms[i], S_ANSWER);
        }
        if (answer == NULL) {
            *record = Py_None;
            Py_INCREF(Py_None);
            *reason = rej_missing_answer;
            rc = 0;
            goto done;
        }
    }
    PyObject *model = Py_None;
    for (Py_ssize_t i = n_llm - 1; i >= 0; i--) {
        if ((t = truth(F(llms[i], S_MODEL))) < 0)
            goto done;
        if (t) {
            model = F(llms[i], S_MODEL);
            break;
        }
    }
    /* every value above is borrowed from a span the list holds; chunks is new */
    Py_INCREF(query);
    Py_INCREF(answer);
    Py_INCREF(model);
    chunks = final_ranking(rerankers, n_rr, retrievers, n_ret);
    if (chunks != NULL) {
        PyObject *anchor = root != NULL ? root : PyList_GET_ITEM(spans, 0);
        PyObject *qt = F(anchor, S_QUERY_TYPE), *rel = F(anchor, S_RELEASE);
        int t_rel = truth(rel);
        if ((t = truth(qt)) >= 0 && t_rel >= 0) {
            if (!t)
                qt = query_type != NULL ? query_type : empty_str;
            if (!t_rel)
                rel = release != NULL ? release : empty_str;
            PyObject *red[4] = {NULL};
            if (stage_facts(retrievers, n_ret, rerankers, n_rr, llms, n_llm, red) == 0) {
                /* RagRecord(trace_id, span_id, service, query, query_type, chunks, answer, model,
                 * start_ns, end_ns, replay, release, retrieval_ns, generation_ns, error,
                 * input_tokens, output_tokens, session_id, user_id): no span here names a
                 * session or a user (those traces are the reference's) */
                PyObject *fields[19] = {tid,   F(anchor, S_SPAN_ID), F(anchor, S_SERVICE), query,
                                        qt,    chunks,               answer,               model,
                                        F(anchor, S_START),          F(anchor, S_END),     replay ? Py_True : Py_False,
                                        rel,   red[0],               red[1],               F(anchor, S_ERROR),
                                        red[2], red[3],              Py_None,              Py_None};
                *record = build(&record_b, fields, 19);
                if (*record != NULL)
                    rc = 0;
                for (int i = 0; i < 4; i++)
                    Py_DECREF(red[i]);
            }
        }
        Py_DECREF(chunks);
    }
    Py_DECREF(query);
    Py_DECREF(answer);
    Py_DECREF(model);
done:
    Py_DECREF(spans);
    if (buf != stack)
        PyMem_Free(buf);
    return rc;
}

/* --- _OpenTrace -------------------------------------------------------------------------------- */

typedef struct trace_s {
    PyObject_HEAD
    struct trace_s *prev, *next; /* age order, oldest first; owned by the assembler's dict */
    PyObject *tid, *spans, *refs;
    double first_seen;
    long long nbytes, count; /* the bytes of the messages it holds; spans taken */
    char root_seen;
} Trace;

static PyTypeObject TraceType;

static Trace *trace_new(PyObject *tid, double now, PyObject *span, PyObject *ref)
{
    Trace *t = PyObject_GC_New(Trace, &TraceType);
    if (t == NULL)
        return NULL;
    t->prev = t->next = NULL;
    t->spans = untracked(PyList_New(1));
    t->refs = untracked(PyList_New(1));
    Py_INCREF(tid);
    t->tid = tid;
    t->first_seen = now;
    t->nbytes = t->count = 0;
    t->root_seen = 0;
    if (t->spans == NULL || t->refs == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    Py_INCREF(span);
    PyList_SET_ITEM(t->spans, 0, span);
    Py_INCREF(ref);
    PyList_SET_ITEM(t->refs, 0, ref);
    return t; /* not tracked either: see untracked() */
}

static int trace_traverse(Trace *t, visitproc visit, void *arg)
{
    Py_VISIT(t->spans);
    Py_VISIT(t->refs);
    return 0;
}

static int trace_clear(Trace *t)
{
    Py_CLEAR(t->spans);
    Py_CLEAR(t->refs);
    return 0;
}

static void trace_dealloc(Trace *t)
{
    PyObject_GC_UnTrack(t);
    trace_clear(t);
    Py_CLEAR(t->tid);
    PyObject_GC_Del(t);
}

static PyObject *trace_get_root_seen(Trace *t, void *closure)
{
    return PyBool_FromLong(t->root_seen);
}

static PyMemberDef trace_members[] = {
    {"spans", T_OBJECT, offsetof(Trace, spans), READONLY, "the spans that can shape the record"},
    {"refs", T_OBJECT, offsetof(Trace, refs), READONLY, "the messages held"},
    {"first_seen", T_DOUBLE, offsetof(Trace, first_seen), READONLY, NULL},
    {"nbytes", T_LONGLONG, offsetof(Trace, nbytes), READONLY, NULL},
    {"count", T_LONGLONG, offsetof(Trace, count), READONLY, NULL},
    {NULL},
};

static PyGetSetDef trace_getset[] = {
    {"root_seen", (getter)trace_get_root_seen, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject TraceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "monitor.ingest._assembly._OpenTrace",
    .tp_basicsize = sizeof(Trace),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A trace waiting for its spans (read-only view).",
    .tp_traverse = (traverseproc)trace_traverse,
    .tp_clear = (inquiry)trace_clear,
    .tp_dealloc = (destructor)trace_dealloc,
    .tp_members = trace_members,
    .tp_getset = trace_getset,
};

/* --- Assembler --------------------------------------------------------------------------------- */

typedef struct {
    double at;
    PyObject *tid;
} due_t;

/* A FIFO of (time, trace id) that grows by doubling: the grace queue and the emitted ids' order. */
typedef struct {
    due_t *buf;
    Py_ssize_t cap, head, len;
} ring_t;

typedef struct {
    PyObject_HEAD
    PyObject *open; /* dict tid -> Trace */
    Trace *oldest, *newest;
    PyObject *recent;       /* set of emitted ids */
    ring_t order;           /* their insertion order */
    ring_t due;             /* _root_ready: (emit at, tid) */
    long long bytes;
    double grace, timeout;
    long long max_traces, max_bytes, max_spans;
    Py_ssize_t keep;
} Asm;

static void link_tail(Asm *a, Trace *t)
{
    t->prev = a->newest;
    t->next = NULL;
    if (a->newest != NULL)
        a->newest->next = t;
    else
        a->oldest = t;
    a->newest = t;
}

static void unlink_trace(Asm *a, Trace *t)
{
    if (t->prev != NULL)
        t->prev->next = t->next;
    else
        a->oldest = t->next;
    if (t->next != NULL)
        t->next->prev = t->prev;
    else
        a->newest = t->prev;
    t->prev = t->next = NULL;
}

/* `_charge`: `t` now holds `ref`'s message of `size` bytes, charged once, by its first holder. */
static int charge(Asm *a, Trace *t, PyObject *ref, long long size)
{
    long long n;
    if (ref_get(ref, traces_off, str_traces, &n) < 0)
        return -1;
    if (n == 0) {
        if (ref_set(ref, size_off, str_size, size) < 0)
            return -1;
        a->bytes += size;
    }
    t->nbytes += size;
    return ref_set(ref, traces_off, str_traces, n + 1);
}

/* `_uncharge`: `t` leaves: its costs, and each message it held when no open trace holds it. */
static int uncharge(Asm *a, Trace *t)
{
    a->bytes -= trace_cost + span_cost * (t->spans == NULL ? 0 : PyList_GET_SIZE(t->spans));
    for (Py_ssize_t i = 0; t->refs != NULL && i < PyList_GET_SIZE(t->refs); i++) {
        PyObject *ref = PyList_GET_ITEM(t->refs, i);
        long long n, size;
        if (ref_get(ref, traces_off, str_traces, &n) < 0 || ref_set(ref, traces_off, str_traces, n - 1) < 0)
            return -1;
        if (n == 1) {
            if (ref_get(ref, size_off, str_size, &size) < 0)
                return -1;
            a->bytes -= size;
        }
    }
    return 0;
}

/* Remove the trace from the table (the caller holds a reference). */
static int pop_trace(Asm *a, Trace *t)
{
    unlink_trace(a, t);
    if (uncharge(a, t) < 0) {
        PyDict_DelItem(a->open, t->tid);
        return -1;
    }
    return PyDict_DelItem(a->open, t->tid);
}

static int ring_push(ring_t *r, double at, PyObject *tid)
{
    if (r->len == r->cap) {
        Py_ssize_t cap = r->cap ? 2 * r->cap : 64;
        due_t *buf = PyMem_Malloc(cap * sizeof(due_t));
        if (buf == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < r->len; i++)
            buf[i] = r->buf[(r->head + i) % r->cap];
        PyMem_Free(r->buf);
        r->buf = buf;
        r->cap = cap;
        r->head = 0;
    }
    Py_INCREF(tid);
    r->buf[(r->head + r->len++) % r->cap] = (due_t){at, tid};
    return 0;
}

/* The oldest entry's id (the ring's reference, now the caller's). */
static PyObject *ring_pop(ring_t *r)
{
    PyObject *tid = r->buf[r->head].tid;
    r->head = (r->head + 1) % r->cap;
    r->len--;
    return tid;
}

static void ring_clear(ring_t *r)
{
    while (r->len)
        Py_DECREF(ring_pop(r));
}

/* `_finish`: a new Finished. */
static PyObject *finish(Asm *a, Trace *t, int evicted)
{
    PyObject *fin = NULL, *record, *reason;
    Py_INCREF(t);
    if (pop_trace(a, t) < 0)
        goto done;
    PyObject *tid = t->tid;
    if (a->keep) {
        int in = PySet_Contains(a->recent, tid);
        if (in < 0)
            goto done;
        if (!in) {
            if (PySet_Add(a->recent, tid) < 0 || ring_push(&a->order, 0.0, tid) < 0)
                goto done;
            if (a->order.len > a->keep) {
                PyObject *old = ring_pop(&a->order);
                int rc = PySet_Discard(a->recent, old);
                Py_DECREF(old);
                if (rc < 0)
                    goto done;
            }
        }
    }
    if (t->spans == NULL || t->refs == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "open trace cleared");
        goto done;
    }
    if (build_record(tid, t->spans, &record, &reason) < 0)
        goto done;
    if (record == Py_None && evicted)
        reason = rej_evicted;
    /* a request that could not be read keeps its spans, for the stage to say why */
    fin = make_finished(tid, record, reason, t->refs,
                        record == Py_None && reason != rej_not_rag && reason != rej_evicted ? t->spans : Py_None);
    Py_DECREF(record);
done:
    Py_DECREF(t);
    return fin;
}

static int is_inert(PyObject *s)
{
    if (F(s, S_ROLE) != role_other)
        return 0;
    static const int fields[] = {S_QUERY, S_ANSWER, S_CHUNKS, S_QUERY_TYPE, S_REPLAY, S_UNREAD, S_SESSION, S_USER};
    for (int i = 0; i < 8; i++) {
        int t = truth(F(s, fields[i]));
        if (t)
            return t < 0 ? -1 : 0;
    }
    return 1;
}

/* Evict the oldest while over the bounds (by count only with `by_count`), down to the byte bound
 * even when the one open trace is over it alone. */
static int evict(Asm *a, int by_count, PyObject *out)
{
    for (;;) {
        Py_ssize_t n = PyDict_GET_SIZE(a->open);
        if (!((by_count && n > a->max_traces) || (a->bytes > a->max_bytes && n > 0)))
            return 0;
        if (a->oldest == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "open traces out of order");
            return -1;
        }
        PyObject *fin = finish(a, a->oldest, 1);
        if (fin == NULL)
            return -1;
        int rc = out_append(out, fin);
        Py_DECREF(fin);
        if (rc < 0)
            return -1;
    }
}

static int add_span(Asm *a, PyObject *span, PyObject *ref, long long size, double now, PyObject *out)
{
    if (check_span(span) < 0)
        return -1;
    PyObject *tid = F(span, S_TRACE_ID);
    Py_INCREF(tid);
    Trace *t = (Trace *)PyDict_GetItemWithError(a->open, tid);
    int rc = -1, r;
    if (t == NULL) {
        if (PyErr_Occurred())
            goto done;
        if ((r = PySet_GET_SIZE(a->recent) ? PySet_Contains(a->recent, tid) : 0) < 0)
            goto done;
        if (r) {
            rc = drop_spans(out, tid, rej_late, 1);
            goto done;
        }
        if (acquire(ref) < 0 || (t = trace_new(tid, now, span, ref)) == NULL)
            goto done;
        if (PyDict_SetItem(a->open, tid, (PyObject *)t) < 0) {
            Py_DECREF(t);
            goto done;
        }
        link_tail(a, t);
        a->bytes += trace_cost + span_cost;
        if (charge(a, t, ref, size) < 0)
            goto fail_t;
    } else {
        Py_INCREF(t);
        if (t->spans == NULL || t->refs == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "open trace cleared");
            goto fail_t;
        }
        if (t->count >= a->max_spans) {
            Py_DECREF(t);
            rc = drop_spans(out, tid, rej_too_many, 1);
            goto done;
        }
        if ((r = is_inert(span)) < 0 || (!r && PyList_Append(t->spans, span) < 0))
            goto fail_t;
        if (!r)
            a->bytes += span_cost;
        Py_ssize_t n = PyList_GET_SIZE(t->refs);
        if (n == 0) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            goto fail_t;
        }
        if (PyList_GET_ITEM(t->refs, n - 1) != ref
            && (acquire(ref) < 0 || PyList_Append(t->refs, ref) < 0 || charge(a, t, ref, size) < 0))
            goto fail_t;
    }
    t->count++;
    /* Any parentless span is the root, whatever its role. */
    if ((r = truth(F(span, S_PARENT))) < 0)
        goto fail_t;
    if (!r && !t->root_seen) {
        t->root_seen = 1;
        if (ring_push(&a->due, now + a->grace, tid) < 0)
            goto fail_t;
    }
    Py_DECREF(t);
    rc = evict(a, 1, out);
    goto done;
fail_t:
    Py_DECREF(t);
done:
    Py_DECREF(tid);
    return rc;
}

/* `_add_others` for one (tid, n). */
static int add_other(Asm *a, PyObject *tid, PyObject *count, PyObject *ref, long long size, PyObject *out)
{
    Trace *t = (Trace *)PyDict_GetItemWithError(a->open, tid);
    if (t == NULL) { /* emitted by capacity while this message was assembled: late */
        if (PyErr_Occurred())
            return -1;
        int r = PySet_GET_SIZE(a->recent) ? PySet_Contains(a->recent, tid) : 0;
        if (r <= 0)
            return r;
        Py_ssize_t n = PyNumber_AsSsize_t(count, PyExc_OverflowError);
        if (n == -1 && PyErr_Occurred())
            return -1;
        return drop_spans(out, tid, rej_late, n);
    }
    long long n;
    if (as_int64(count, &n) < 0)
        return -1;
    long long room = a->max_spans - t->count, taken = n < room ? n : room;
    if (taken < 0)
        taken = 0;
    Py_INCREF(t);
    int rc = drop_spans(out, tid, rej_too_many, n - taken);
    if (rc == 0 && taken > 0) {
        t->count += taken;
        Py_ssize_t nrefs = t->refs == NULL ? 0 : PyList_GET_SIZE(t->refs);
        if (nrefs == 0) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            rc = -1;
        } else if (PyList_GET_ITEM(t->refs, nrefs - 1) != ref
                   && (acquire(ref) < 0 || PyList_Append(t->refs, ref) < 0 || charge(a, t, ref, size) < 0))
            rc = -1;
    }
    Py_DECREF(t);
    return rc == 0 && taken > 0 ? evict(a, 0, out) : rc;
}

static int drop_spans(PyObject *out, PyObject *tid, PyObject *reason, long long n)
{
    for (long long i = 0; i < n; i++) {
        PyObject *fin = dropped_finished(tid, reason);
        if (fin == NULL)
            return -1;
        int r = out_append(out, fin);
        Py_DECREF(fin);
        if (r < 0)
            return -1;
    }
    return 0;
}

static int add_all(Asm *a, PyObject *const *spans, Py_ssize_t n, PyObject *ref, PyObject *size_o, PyObject *now_o,
                   PyObject *out, PyObject *others)
{
    long long size;
    double now;
    if (as_int64(size_o, &size) < 0 || as_double(now_o, &now) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (add_span(a, spans[i], ref, size, now, out) < 0)
            return -1;
    if (others == NULL || others == Py_None)
        return 0;
    int t = truth(others);
    if (t <= 0)
        return t;
    if (PyDict_CheckExact(others)) {
        Py_ssize_t pos = 0;
        PyObject *tid, *count;
        Py_INCREF(others);
        while (PyDict_Next(others, &pos, &tid, &count)) {
            Py_INCREF(tid);
            Py_INCREF(count);
            int rc = add_other(a, tid, count, ref, size, out);
            Py_DECREF(tid);
            Py_DECREF(count);
            if (rc < 0) {
                Py_DECREF(others);
                return -1;
            }
        }
        Py_DECREF(others);
        return 0;
    }
    PyObject *items = PyMapping_Items(others);
    if (items == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "others.items() must give pairs");
            rc = -1;
        } else
            rc = add_other(a, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1), ref, size, out);
    }
    Py_DECREF(items);
    return rc;
}

static int asm_check(Asm *a)
{
    if (a->open == NULL || a->recent == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Assembler not initialised");
        return -1;
    }
    return 0;
}

static PyObject *asm_add_spans(Asm *a, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"spans", "ref", "size", "now", "out", "others"};
    PyObject *v[6];
    if (asm_check(a) < 0 || parse_args("add_spans", args, nargs, kwnames, names, 6, 5, 6, v) < 0)
        return NULL;
    PyObject *fast = PySequence_Fast(v[0], "spans must be a sequence");
    if (fast == NULL)
        return NULL;
    int rc = add_all(a, PySequence_Fast_ITEMS(fast), PySequence_Fast_GET_SIZE(fast), v[1], v[2], v[3], v[4], v[5]);
    Py_DECREF(fast);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *asm_add(Asm *a, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"span", "ref", "size", "now"};
    PyObject *v[4];
    if (asm_check(a) < 0 || parse_args("add", args, nargs, kwnames, names, 4, 4, 4, v) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out != NULL && add_all(a, &v[0], 1, v[1], v[2], v[3], out, NULL) < 0)
        Py_CLEAR(out);
    return out;
}

static PyObject *asm_poll(Asm *a, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"now"};
    PyObject *v[1];
    double now;
    if (asm_check(a) < 0 || parse_args("poll", args, nargs, kwnames, names, 1, 1, 1, v) < 0
        || as_double(v[0], &now) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (a->due.len && a->due.buf[a->due.head].at <= now) {
        PyObject *tid = ring_pop(&a->due); /* our reference, now */
        Trace *t = (Trace *)PyDict_GetItemWithError(a->open, tid);
        PyObject *fin = NULL;
        if (t != NULL)
            fin = finish(a, t, 0);
        Py_DECREF(tid);
        if (fin == NULL ? PyErr_Occurred() != NULL : PyList_Append(out, fin) < 0) {
            Py_XDECREF(fin);
            Py_DECREF(out);
            return NULL;
        }
        Py_XDECREF(fin);
    }
    double deadline = now - a->timeout;
    while (a->oldest != NULL && !(a->oldest->first_seen > deadline)) {
        PyObject *fin = finish(a, a->oldest, 0);
        if (fin == NULL || PyList_Append(out, fin) < 0) {
            Py_XDECREF(fin);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(fin);
    }
    return out;
}

static PyObject *asm_next_due(Asm *a, PyObject *unused)
{
    if (asm_check(a) < 0)
        return NULL;
    if (a->oldest == NULL)
        Py_RETURN_NONE;
    double due = a->oldest->first_seen + a->timeout;
    if (a->due.len && a->due.buf[a->due.head].at < due)
        due = a->due.buf[a->due.head].at;
    return PyFloat_FromDouble(due);
}

/* The open traces, oldest first: a new list. */
static PyObject *open_list(Asm *a)
{
    PyObject *lst = PyList_New(PyDict_GET_SIZE(a->open));
    if (lst == NULL)
        return NULL;
    Py_ssize_t i = 0;
    for (Trace *t = a->oldest; t != NULL && i < PyList_GET_SIZE(lst); t = t->next, i++) {
        Py_INCREF(t);
        PyList_SET_ITEM(lst, i, (PyObject *)t);
    }
    if (i != PyList_GET_SIZE(lst)) {
        Py_DECREF(lst);
        PyErr_SetString(PyExc_RuntimeError, "open traces out of order");
        return NULL;
    }
    return lst;
}

static PyObject *asm_flush(Asm *a, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"complete_only"};
    PyObject *v[1];
    if (asm_check(a) < 0 || parse_args("flush", args, nargs, kwnames, names, 0, 1, 1, v) < 0)
        return NULL;
    int complete_only = truth(v[0]);
    if (complete_only < 0)
        return NULL;
    PyObject *traces = open_list(a), *out = PyList_New(0);
    if (traces == NULL || out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(traces); i++) {
        Trace *t = (Trace *)PyList_GET_ITEM(traces, i);
        if (PyDict_GetItemWithError(a->open, t->tid) != (PyObject *)t) {
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        if (t->root_seen || !complete_only) {
            PyObject *fin = finish(a, t, 0);
            if (fin == NULL || PyList_Append(out, fin) < 0) {
                Py_XDECREF(fin);
                goto fail;
            }
            Py_DECREF(fin);
        }
    }
    Py_DECREF(traces);
    return out;
fail:
    Py_XDECREF(traces);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *asm_drop_partitions(Asm *a, PyObject *partitions)
{
    if (asm_check(a) < 0)
        return NULL;
    PyObject *traces = open_list(a), *drop = PyList_New(0), *dropped = PyList_New(0);
    if (traces == NULL || drop == NULL || dropped == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(traces); i++) {
        Trace *t = (Trace *)PyList_GET_ITEM(traces, i);
        int any = 0;
        for (Py_ssize_t j = 0; t->refs != NULL && j < PyList_GET_SIZE(t->refs) && !any; j++) {
            PyObject *r = PyList_GET_ITEM(t->refs, j), *p;
            if (PyObject_TypeCheck(r, ref_type) && SLOT(r, partition_off) != NULL) {
                p = SLOT(r, partition_off);
                Py_INCREF(p);
            } else if ((p = PyObject_GetAttrString(r, "partition")) == NULL)
                goto fail;
            any = PySequence_Contains(partitions, p);
            Py_DECREF(p);
            if (any < 0)
                goto fail;
        }
        if (any && PyList_Append(drop, (PyObject *)t) < 0)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(drop); i++) {
        Trace *t = (Trace *)PyList_GET_ITEM(drop, i);
        if (PyDict_GetItemWithError(a->open, t->tid) != (PyObject *)t) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, t->tid);
            goto fail;
        }
        if (pop_trace(a, t) < 0)
            goto fail;
        Py_ssize_t n = PyList_GET_SIZE(dropped);
        if (t->refs != NULL && PyList_SetSlice(dropped, n, n, t->refs) < 0)
            goto fail;
    }
    Py_DECREF(traces);
    Py_DECREF(drop);
    return dropped;
fail:
    Py_XDECREF(traces);
    Py_XDECREF(drop);
    Py_XDECREF(dropped);
    return NULL;
}

static PyObject *asm_get_open_traces(Asm *a, void *closure)
{
    return PyLong_FromSsize_t(a->open == NULL ? 0 : PyDict_GET_SIZE(a->open));
}

static PyObject *asm_get_open_bytes(Asm *a, void *closure)
{
    return PyLong_FromLongLong(a->bytes);
}

/* `_open`: a dict trace id -> _OpenTrace, oldest first (a copy; for tests and debugging). */
static PyObject *asm_get_open(Asm *a, void *closure)
{
    if (asm_check(a) < 0)
        return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (Trace *t = a->oldest; t != NULL; t = t->next)
        if (PyDict_SetItem(d, t->tid, (PyObject *)t) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    return d;
}

static int asm_traverse(Asm *a, visitproc visit, void *arg)
{
    Py_VISIT(a->open);
    Py_VISIT(a->recent);
    return 0;
}

static int asm_clear(Asm *a)
{
    for (Trace *t = a->oldest, *next; t != NULL; t = next) {
        next = t->next;
        t->prev = t->next = NULL;
    }
    a->oldest = a->newest = NULL;
    Py_CLEAR(a->open);
    Py_CLEAR(a->recent);
    ring_clear(&a->order);
    ring_clear(&a->due);
    a->bytes = 0;
    return 0;
}

static void asm_dealloc(Asm *a)
{
    PyObject_GC_UnTrack(a);
    asm_clear(a);
    PyMem_Free(a->order.buf);
    PyMem_Free(a->due.buf);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static PyObject *asm_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"config", NULL};
    PyObject *cfg;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "monitor.ingest._assembly.setup() was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Assembler", kwlist, &cfg))
        return NULL;
    Asm *a = (Asm *)type->tp_alloc(type, 0);
    if (a == NULL)
        return NULL;
    /* tp_alloc zeroes everything */
    static const char *const names[] = {"grace_seconds",  "timeout_seconds",  "max_open_traces",
                                        "max_open_bytes", "recent_trace_ids", "max_spans_per_trace"};
    PyObject *v[6] = {NULL};
    int rc = 0;
    for (int i = 0; i < 6 && rc == 0; i++)
        if ((v[i] = PyObject_GetAttrString(cfg, names[i])) == NULL)
            rc = -1;
    long long keep = 0;
    if (rc == 0
        && (as_double(v[0], &a->grace) < 0 || as_double(v[1], &a->timeout) < 0 || as_int64(v[2], &a->max_traces) < 0
            || as_int64(v[3], &a->max_bytes) < 0 || as_int64(v[4], &keep) < 0 || as_int64(v[5], &a->max_spans) < 0))
        rc = -1;
    for (int i = 0; i < 6; i++)
        Py_XDECREF(v[i]);
    if (rc == 0 && (keep < 0 || keep > PY_SSIZE_T_MAX / 2)) {
        PyErr_SetString(PyExc_ValueError, "recent_trace_ids out of range");
        rc = -1;
    }
    a->keep = (Py_ssize_t)keep;
    if (rc == 0 && ((a->open = PyDict_New()) == NULL || (a->recent = PySet_New(NULL)) == NULL))
        rc = -1;
    if (rc < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return (PyObject *)a;
}

static PyMethodDef asm_methods[] = {
    {"add", (PyCFunction)(void (*)(void))asm_add, METH_FASTCALL | METH_KEYWORDS,
     "add(span, ref, size, now) -> list[Finished]: take one span; traces forced out by capacity, and a late "
     "span as a dropped Finished of its own"},
    {"add_spans", (PyCFunction)(void (*)(void))asm_add_spans, METH_FASTCALL | METH_KEYWORDS,
     "add_spans(spans, ref, size, now, out, others=None): take the spans of one message; what add returns goes "
     "to out"},
    {"poll", (PyCFunction)(void (*)(void))asm_poll, METH_FASTCALL | METH_KEYWORDS,
     "poll(now) -> list[Finished]: traces whose grace period or timeout has passed"},
    {"next_due", (PyCFunction)asm_next_due, METH_NOARGS,
     "next_due() -> float | None: when poll may next have a trace to emit; None while none is open"},
    {"flush", (PyCFunction)(void (*)(void))asm_flush, METH_FASTCALL | METH_KEYWORDS,
     "flush(*, complete_only) -> list[Finished]: on shutdown, emit what is complete (or everything)"},
    {"drop_partitions", (PyCFunction)asm_drop_partitions, METH_O,
     "drop_partitions(partitions) -> list[MessageRef]: forget traces fed by revoked partitions"},
    {NULL},
};

static PyGetSetDef asm_getset[] = {
    {"open_traces", (getter)asm_get_open_traces, NULL, "traces waiting", NULL},
    {"open_bytes", (getter)asm_get_open_bytes, NULL, "bytes of the traces waiting", NULL},
    {"_open", (getter)asm_get_open, NULL, "trace id -> open trace, oldest first (a copy)", NULL},
    {NULL},
};

static PyTypeObject AsmType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "monitor.ingest._assembly.Assembler",
    .tp_basicsize = sizeof(Asm),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Assembler(config): assemble.PyAssembler, compiled (same calls, same results).",
    .tp_new = asm_new,
    .tp_traverse = (traverseproc)asm_traverse,
    .tp_clear = (inquiry)asm_clear,
    .tp_dealloc = (destructor)asm_dealloc,
    .tp_methods = asm_methods,
    .tp_getset = asm_getset,
};

/* --- module ------------------------------------------------------------------------------------ */

static int set_obj(PyObject **slot, PyObject *v)
{
    Py_INCREF(v);
    Py_XSETREF(*slot, v);
    return 0;
}

PyDoc_STRVAR(setup_doc,
             "setup(span_facts, chunk, message_ref, rag_record, rag_record_fields, finished, finished_fields, "
             "roles, rejects, costs, sort_by_end, sort_by_start, max_by_end, stage_facts, build_record, /)\n\n"
             "roles: (ROOT, RETRIEVER, RERANKER, LLM, OTHER); rejects: (LATE_SPAN, EVICTED, NOT_RAG, "
             "MISSING_QUERY, MISSING_ANSWER, TOO_MANY_SPANS); costs: (TRACE_COST, SPAN_COST); *_fields: the class's field names when it is a plain slots "
             "dataclass (filled here), else None (called). The sort and max callables take a list of spans "
             "and are used only when a time is not an int64; stage_facts (assemble.stage_facts) likewise; "
             "build_record (assemble.build_record) builds the traces whose spans name a session, a user or unread "
             "keys, or hold several retrievals.");

static PyObject *setup(PyObject *self, PyObject *args)
{
    PyObject *sf, *ch, *mr, *rr, *rr_fields, *fin, *fin_fields, *roles, *rejects, *sbe, *sbs, *mbe, *sf_fn, *br_fn;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOOOO(LL)OOOOO:setup", &PyType_Type, &sf, &PyType_Type, &ch, &PyType_Type,
                          &mr, &rr, &rr_fields, &fin, &fin_fields, &roles, &rejects, &trace_cost, &span_cost, &sbe,
                          &sbs, &mbe, &sf_fn, &br_fn))
        return NULL;
    ready = 0;
    for (int f = 0; f < N_SPAN_FIELDS; f++)
        if ((span_off[f] = member_offset_str(sf, span_field_names[f])) < 0)
            return NULL;
    if ((chunk_id_off = member_offset_str(ch, "id")) < 0 || (holds_off = member_offset_str(mr, "holds")) < 0
        || (partition_off = member_offset_str(mr, "partition")) < 0
        || (traces_off = member_offset_str(mr, "traces")) < 0 || (size_off = member_offset_str(mr, "size")) < 0)
        return NULL;
    if (set_builder(&record_b, rr, rr_fields, 19) < 0 || set_builder(&finished_b, fin, fin_fields, 5) < 0)
        return NULL;
    PyObject **role_slots[] = {&role_root, &role_retriever, &role_reranker, &role_llm, &role_other};
    PyObject **reject_slots[] = {&rej_late,          &rej_evicted,        &rej_not_rag,
                                 &rej_missing_query, &rej_missing_answer, &rej_too_many};
    if (!PyTuple_Check(roles) || PyTuple_GET_SIZE(roles) != 5 || !PyTuple_Check(rejects)
        || PyTuple_GET_SIZE(rejects) != 6) {
        PyErr_SetString(PyExc_TypeError, "roles: a tuple of 5, rejects: of 6");
        return NULL;
    }
    for (int i = 0; i < 5; i++)
        set_obj(role_slots[i], PyTuple_GET_ITEM(roles, i));
    for (int i = 0; i < 6; i++)
        set_obj(reject_slots[i], PyTuple_GET_ITEM(rejects, i));
    set_obj((PyObject **)&span_type, sf);
    set_obj((PyObject **)&chunk_type, ch);
    set_obj((PyObject **)&ref_type, mr);
    set_obj(&sort_by_end, sbe);
    set_obj(&sort_by_start, sbs);
    set_obj(&max_by_end, mbe);
    set_obj(&stage_facts_fn, sf_fn);
    set_obj(&build_record_fn, br_fn);
    if (str_acquire == NULL
        && ((str_acquire = PyUnicode_InternFromString("acquire")) == NULL
            || (str_append = PyUnicode_InternFromString("append")) == NULL || (empty_str = PyUnicode_New(0, 0)) == NULL
            || (str_traces = PyUnicode_InternFromString("traces")) == NULL
            || (str_size = PyUnicode_InternFromString("size")) == NULL))
        return NULL;
    ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, setup_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_assembly", "Compiled trace assembly (see assemble.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__assembly(void)
{
    if (PyType_Ready(&TraceType) < 0 || PyType_Ready(&AsmType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&AsmType);
    if (PyModule_AddObject(m, "Assembler", (PyObject *)&AsmType) < 0) {
        Py_DECREF(&AsmType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
