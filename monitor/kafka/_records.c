/* Kafka record batches read without aiokafka's per-record Python: the twin of what
 * `aiokafka.consumer.fetcher.PartitionRecords` yields for the batches a consumer of ours meets
 * (read `monitor/kafka/records.py` first).
 *
 * `Reader(buffer, topic, partition, fetch_offset, slow, decompress)` iterates the records of a fetch
 * response's record set for one partition, as `PartitionRecords` does with `check_crcs` off and
 * `read_uncommitted`: records below the fetch offset skipped, control batches skipped, the
 * position (`next_fetch_offset`) the record after the last one yielded, or the batch's next
 * offset once a batch is done, and a truncated last batch left for the next fetch. A batch it
 * reads is a v2 batch whose records it has checked whole first (every varint, length and header
 * in bounds, the record count matched, no byte left over), after `decompress(codec, payload)`
 * (aiokafka's codecs; None where aiokafka would fail) for a compressed one: a batch it does not
 * read (an older format, a codec or anything malformed) goes to `slow(chunk, next_fetch_offset)`,
 * aiokafka's own code on that batch alone, which returns its records and the position after it, or
 * raises as aiokafka would. So the records it yields are the ones aiokafka yields, and its
 * exceptions aiokafka's.
 *
 * A record is a `Record`: ConsumerRecord's fields (topic, partition, offset, timestamp,
 * timestamp_type, key, value, checksum, serialized_key_size, serialized_value_size, headers), made
 * without calling Python. Neither type is tracked by the garbage collector: a record holds only
 * bytes, str, ints and a tuple of them, and a reader its buffer, its topic and `slow`.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

typedef const uint8_t *ptr;

#define LOG_OVERHEAD 12   /* base offset (8) and length (4) */
#define V2_HEADER 61      /* the whole v2 batch header, record count included */
#define MIN_SLICE 26      /* aiokafka's MemoryRecords: LOG_OVERHEAD + the v0 record overhead */
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define CONTROL_MASK 0x20

static inline uint16_t be16(ptr p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32(ptr p) { return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]; }
static inline uint64_t be64(ptr p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* A zigzag varint of at most 10 bytes, as Kafka writes lengths, deltas and counts; 0 past `end`. */
static inline int varint(ptr *pp, ptr end, int64_t *out)
{
    ptr p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && p < end; shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            *pp = p;
            return 1;
        }
    }
    return 0;
}

/* --- Record ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *topic, *key, *value, *headers;
    long long offset, timestamp;
    int partition, timestamp_type, key_size, value_size;
} Record;

static PyTypeObject RecordType;

static void record_dealloc(Record *r)
{
    Py_XDECREF(r->topic);
    Py_XDECREF(r->key);
    Py_XDECREF(r->value);
    Py_XDECREF(r->headers);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *record_checksum(PyObject *self, void *closure)
{
    Py_RETURN_NONE; /* v2 records carry none (the batch has one CRC); aiokafka's say None too */
}

static PyObject *record_repr(Record *r)
{
    return PyUnicode_FromFormat("Record(topic=%R, partition=%d, offset=%lld, timestamp=%lld, key=%R, value=%R)",
                                r->topic, r->partition, r->offset, r->timestamp, r->key, r->value);
}

static PyMemberDef record_members[] = {
    {"topic", T_OBJECT, offsetof(Record, topic), READONLY, NULL},
    {"partition", T_INT, offsetof(Record, partition), READONLY, NULL},
    {"offset", T_LONGLONG, offsetof(Record, offset), READONLY, NULL},
    {"timestamp", T_LONGLONG, offsetof(Record, timestamp), READONLY, NULL},
    {"timestamp_type", T_INT, offsetof(Record, timestamp_type), READONLY, NULL},
    {"key", T_OBJECT, offsetof(Record, key), READONLY, NULL},
    {"value", T_OBJECT, offsetof(Record, value), READONLY, NULL},
    {"serialized_key_size", T_INT, offsetof(Record, key_size), READONLY, NULL},
    {"serialized_value_size", T_INT, offsetof(Record, value_size), READONLY, NULL},
    {"headers", T_OBJECT, offsetof(Record, headers), READONLY, NULL},
    {NULL},
};

static PyGetSetDef record_getset[] = {
    {"checksum", record_checksum, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "monitor.kafka._records.Record",
    .tp_basicsize = sizeof(Record),
    .tp_dealloc = (destructor)record_dealloc,
    .tp_repr = (reprfunc)record_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One Kafka record, with aiokafka ConsumerRecord's fields.",
    .tp_members = record_members,
    .tp_getset = record_getset,
};

/* --- checking a batch, then reading it ---------------------------------------------------- */

/* A nullable byte string's length (negative: null) and its bytes passed; 0 past `end`. */
static int nullable(ptr *pp, ptr end, int64_t *n)
{
    if (!varint(pp, end, n) || (*n > 0 && *n > end - *pp))
        return 0;
    if (*n > 0)
        *pp += *n;
    return 1;
}

/* Whether the `count` records in [q, end) (a batch's, after its header, decompressed) are ones this
 * file reads: every record's fields in bounds, each record's length what its fields add up to,
 * header keys valid UTF-8, and no byte after the last record. aiokafka raises on anything else:
 * it gets the batch. */
static int records_ok(ptr q, ptr end, int32_t count)
{
    if (count < 0)
        return 0;
    for (int32_t i = 0; i < count; i++) {
        int64_t length, attrs, ts_delta, offset_delta, key_len, value_len, n_headers;
        if (!varint(&q, end, &length))
            return 0;
        ptr start = q;
        if (!varint(&q, end, &attrs) || !varint(&q, end, &ts_delta) || !varint(&q, end, &offset_delta)
            || !nullable(&q, end, &key_len) || !nullable(&q, end, &value_len) || !varint(&q, end, &n_headers)
            || n_headers < 0)
            return 0;
        for (int64_t h = 0; h < n_headers; h++) {
            int64_t hk, hv;
            if (!varint(&q, end, &hk) || hk < 0 || hk > end - q)
                return 0;
            PyObject *s = PyUnicode_DecodeUTF8((const char *)q, (Py_ssize_t)hk, NULL);
            if (s == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(s);
            q += hk;
            if (!nullable(&q, end, &hv))
                return 0;
        }
        if (q - start != length)
            return 0;
    }
    return q == end;
}

static PyObject *empty_tuple = NULL;

static PyObject *nullable_bytes(ptr *q, int64_t n)
{
    if (n < 0)
        Py_RETURN_NONE;
    PyObject *b = PyBytes_FromStringAndSize((const char *)*q, (Py_ssize_t)n);
    *q += n;
    return b;
}

static PyObject *read_headers(ptr *q, ptr end, int64_t n)
{
    if (n == 0)
        return Py_NewRef(empty_tuple);
    PyObject *headers = PyTuple_New((Py_ssize_t)n);
    if (headers == NULL)
        return NULL;
    for (int64_t h = 0; h < n; h++) {
        int64_t hk = 0, hv = 0;
        varint(q, end, &hk);
        PyObject *k = PyUnicode_DecodeUTF8((const char *)*q, (Py_ssize_t)hk, NULL);
        *q += hk;
        varint(q, end, &hv);
        PyObject *v = k == NULL ? NULL : nullable_bytes(q, hv);
        PyObject *pair = v == NULL ? NULL : PyTuple_Pack(2, k, v);
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (pair == NULL) {
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(headers, (Py_ssize_t)h, pair);
    }
    return headers;
}

/* --- Reader ------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *buffer; /* bytes: the partition's record set from one fetch response */
    PyObject *topic;
    PyObject *slow;   /* slow(chunk, next_fetch_offset) -> (records, next_fetch_offset) */
    PyObject *decompress; /* decompress(codec, payload) -> bytes, or None */
    PyObject *batch_buf; /* the batch being read: `buffer`, or its records decompressed; NULL when none */
    PyObject *pending; /* records `slow` returned, being yielded; NULL when none */
    Py_ssize_t pending_at;
    Py_ssize_t pos;   /* the next batch's start */
    Py_ssize_t rec;   /* in `batch_buf`: the next record's start */
    Py_ssize_t batch_end;
    int32_t left;     /* records left in that batch */
    int partition, timestamp_type, done;
    long long base_offset, first_ts, max_ts, batch_next, next_fetch_offset;
} Reader;

static void reader_dealloc(Reader *r)
{
    Py_XDECREF(r->buffer);
    Py_XDECREF(r->topic);
    Py_XDECREF(r->slow);
    Py_XDECREF(r->decompress);
    Py_XDECREF(r->batch_buf);
    Py_XDECREF(r->pending);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer", "topic", "partition", "fetch_offset", "slow", "decompress", NULL};
    PyObject *buffer, *topic, *slow, *decompress;
    int partition;
    long long fetch_offset;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "SUiLOO:Reader", kwlist, &buffer, &topic, &partition, &fetch_offset,
                                     &slow, &decompress))
        return NULL;
    Reader *r = (Reader *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    r->buffer = Py_NewRef(buffer);
    r->topic = Py_NewRef(topic);
    r->slow = Py_NewRef(slow);
    r->decompress = Py_NewRef(decompress);
    r->partition = partition;
    r->next_fetch_offset = fetch_offset;
    return (PyObject *)r;
}

/* The next record of the batch being read (known well formed), or NULL with no error when it has
 * none left above the fetch offset. */
static PyObject *next_in_batch(Reader *r)
{
    ptr base = (ptr)PyBytes_AS_STRING(r->batch_buf);
    ptr end = base + r->batch_end;
    while (r->left > 0) {
        ptr q = base + r->rec;
        /* checked by batch_ok: every read succeeds */
        int64_t length = 0, attrs = 0, ts_delta = 0, offset_delta = 0, key_len = 0, value_len = 0, n_headers = 0;
        varint(&q, end, &length);
        r->rec = (q - base) + (Py_ssize_t)length;
        r->left--;
        varint(&q, end, &attrs);
        varint(&q, end, &ts_delta);
        varint(&q, end, &offset_delta);
        long long offset = r->base_offset + offset_delta;
        if (offset < r->next_fetch_offset)
            continue; /* before the fetch offset: a batch is fetched whole */
        Record *rec = PyObject_New(Record, &RecordType);
        if (rec == NULL)
            return NULL;
        rec->topic = Py_NewRef(r->topic);
        rec->key = rec->value = rec->headers = NULL;
        rec->partition = r->partition;
        rec->offset = offset;
        rec->timestamp = r->timestamp_type ? r->max_ts : r->first_ts + ts_delta;
        rec->timestamp_type = r->timestamp_type;
        varint(&q, end, &key_len);
        rec->key_size = key_len >= 0 ? (int)key_len : -1;
        if ((rec->key = nullable_bytes(&q, key_len)) == NULL)
            goto fail;
        varint(&q, end, &value_len);
        rec->value_size = value_len >= 0 ? (int)value_len : -1;
        if ((rec->value = nullable_bytes(&q, value_len)) == NULL)
            goto fail;
        varint(&q, end, &n_headers);
        if ((rec->headers = read_headers(&q, end, n_headers)) == NULL)
            goto fail;
        r->next_fetch_offset = offset + 1;
        return (PyObject *)rec;
    fail:
        Py_DECREF(rec);
        return NULL;
    }
    Py_CLEAR(r->batch_buf);
    r->next_fetch_offset = r->batch_next;
    return NULL;
}

/* Hand [start, end) to aiokafka's code: its records become `pending`. */
static int take_slow(Reader *r, Py_ssize_t start, Py_ssize_t end)
{
    PyObject *chunk = PyBytes_FromStringAndSize(PyBytes_AS_STRING(r->buffer) + start, end - start);
    if (chunk == NULL)
        return -1;
    PyObject *got = PyObject_CallFunction(r->slow, "NL", chunk, r->next_fetch_offset);
    if (got == NULL)
        return -1;
    PyObject *records;
    long long next;
    if (!PyArg_ParseTuple(got, "O!L:slow", &PyList_Type, &records, &next)) {
        Py_DECREF(got);
        return -1;
    }
    Py_XSETREF(r->pending, Py_NewRef(records));
    r->pending_at = 0;
    r->batch_next = next;
    Py_DECREF(got);
    return 0;
}

static PyObject *reader_next(Reader *r)
{
    if (r->done)
        return NULL;
    for (;;) {
        if (r->pending != NULL) {
            if (r->pending_at < PyList_GET_SIZE(r->pending)) {
                PyObject *rec = Py_NewRef(PyList_GET_ITEM(r->pending, r->pending_at++));
                PyObject *off = PyObject_GetAttrString(rec, "offset");
                long long o = off == NULL ? -1 : PyLong_AsLongLong(off);
                Py_XDECREF(off);
                if (o == -1 && PyErr_Occurred()) {
                    Py_DECREF(rec);
                    return NULL;
                }
                r->next_fetch_offset = o + 1;
                return rec;
            }
            Py_CLEAR(r->pending);
            r->next_fetch_offset = r->batch_next;
        }
        if (r->batch_buf != NULL) {
            PyObject *rec = next_in_batch(r);
            if (rec != NULL || PyErr_Occurred())
                return rec;
        }
        ptr base = (ptr)PyBytes_AS_STRING(r->buffer);
        Py_ssize_t size = PyBytes_GET_SIZE(r->buffer), start = r->pos;
        if (size - start < LOG_OVERHEAD)
            break;
        int32_t length = (int32_t)be32(base + start + 8);
        /* What MemoryRecords leaves for the next fetch: a batch not all here. */
        if ((long long)start + LOG_OVERHEAD + length > size)
            break;
        if (length < MIN_SLICE - LOG_OVERHEAD) { /* aiokafka raises on it (or on what follows) */
            r->pos = size;
            if (take_slow(r, start, size) < 0)
                goto fail;
            continue;
        }
        Py_ssize_t end = start + LOG_OVERHEAD + length;
        r->pos = end;
        ptr p = base + start;
        if (end - start < V2_HEADER || p[16] != 2) {
            if (take_slow(r, start, end) < 0)
                goto fail;
            continue;
        }
        uint16_t attributes = be16(p + 21);
        long long base_offset = (long long)be64(p);
        long long next = base_offset + (int32_t)be32(p + 23) + 1;
        if (attributes & CONTROL_MASK) {
            r->next_fetch_offset = next; /* transaction markers: never a record */
            continue;
        }
        int32_t count = (int32_t)be32(p + 57);
        PyObject *batch_buf;
        Py_ssize_t first, last;
        if (attributes & CODEC_MASK) {
            batch_buf = PyObject_CallFunction(r->decompress, "iy#", attributes & CODEC_MASK, (const char *)p + V2_HEADER,
                                              (Py_ssize_t)(end - start - V2_HEADER));
            if (batch_buf == NULL)
                goto fail;
            if (!PyBytes_Check(batch_buf)) { /* None: aiokafka would fail on it */
                Py_DECREF(batch_buf);
                batch_buf = NULL;
            }
            first = 0;
            last = batch_buf == NULL ? 0 : PyBytes_GET_SIZE(batch_buf);
        }
        else {
            batch_buf = Py_NewRef(r->buffer);
            first = start + V2_HEADER;
            last = end;
        }
        if (batch_buf == NULL
            || !records_ok((ptr)PyBytes_AS_STRING(batch_buf) + first, (ptr)PyBytes_AS_STRING(batch_buf) + last, count)) {
            Py_XDECREF(batch_buf);
            if (take_slow(r, start, end) < 0)
                goto fail;
            continue;
        }
        r->batch_buf = batch_buf;
        r->base_offset = base_offset;
        r->batch_next = next;
        r->timestamp_type = (attributes & TIMESTAMP_TYPE_MASK) ? 1 : 0;
        r->first_ts = (long long)be64(p + 27);
        r->max_ts = (long long)be64(p + 35);
        r->left = count;
        r->rec = first;
        r->batch_end = last; /* with no records left (compacted away whole), only the position moves */
    }
    r->done = 1;
    return NULL;
fail:
    r->done = 1; /* as aiokafka's generator: an exception ends it */
    return NULL;
}

static PyObject *reader_iter(PyObject *self) { return Py_NewRef(self); }

/* `FetchResult.getall`'s loop in C: up to `max_records` records (None: all), and whether the
 * reader is done (fewer than asked for: aiokafka's loop would have run out). */
static PyObject *reader_take(Reader *r, PyObject *arg)
{
    Py_ssize_t max = PY_SSIZE_T_MAX;
    if (arg != Py_None && ((max = PyLong_AsSsize_t(arg)) == -1 && PyErr_Occurred()))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (PyList_GET_SIZE(out) < max) {
        PyObject *rec = reader_next(r);
        if (rec == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(out);
                return NULL;
            }
            PyObject *both = Py_BuildValue("(NO)", out, Py_True);
            return both;
        }
        int failed = PyList_Append(out, rec);
        Py_DECREF(rec);
        if (failed) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return Py_BuildValue("(NO)", out, Py_False);
}

static PyMethodDef reader_methods[] = {
    {"take", (PyCFunction)reader_take, METH_O, "Up to max_records records (None: all), and whether none are left."},
    {NULL},
};

static PyMemberDef reader_members[] = {
    {"next_fetch_offset", T_LONGLONG, offsetof(Reader, next_fetch_offset), READONLY,
     "The offset to fetch next: after the last record yielded, or after the last batch passed."},
    {NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "monitor.kafka._records.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The records of one partition's fetched record set, as aiokafka's PartitionRecords yields them.",
    .tp_new = reader_new,
    .tp_iter = reader_iter,
    .tp_iternext = (iternextfunc)reader_next,
    .tp_members = reader_members,
    .tp_methods = reader_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "monitor.kafka._records", "Kafka record batches read in C (see records.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__records(void)
{
    if (PyType_Ready(&RecordType) < 0 || PyType_Ready(&ReaderType) < 0)
        return NULL;
    if ((empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Record", (PyObject *)&RecordType) < 0
        || PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
