/* protocol._record_columns: the records of v2 batches walked straight into column buffers.
 *
 * Columns(with_headers) accumulates rows. add() walks one (decompressed) records section, checks
 * it as protocol/records.py::_parse_records does (same cases, same messages) and appends the
 * records with start <= offset < until; take() hands the buffers out as bytearrays in Arrow's
 * layouts (int64/int32 values, int32 offsets, LSB-first validity bitmaps) and starts afresh.
 * protocol/record_columns.py is the Python side and documents take()'s result.
 * Every read is bounds-checked against the section; a failed add() leaves no row of its batch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

static PyObject *ProtocolError; /* protocol.errors.ProtocolError, imported at module init */

/* A bytearray used as a growable buffer: the object's size is the capacity, len what is used. */
typedef struct { PyObject *ba; Py_ssize_t len, cap; } Buf;
/* A binary/string column: offsets (int32, n + 1), data, validity bitmap, entries, nulls. */
typedef struct { Buf offs, data, valid; Py_ssize_t n, nulls; } Bin;

typedef struct {
    PyObject_HEAD
    int with_headers;
    Buf offsets, timestamps, types, header_offs; /* int64, int64 (us), int32, int32 (rows + 1) */
    Bin keys, values, hkeys, hvalues;
    Py_ssize_t rows, replaced; /* replaced: header keys whose invalid UTF-8 became U+FFFD */
} Columns;

#define NBUFS 16
#define BINS(c) {&(c)->keys, &(c)->values, &(c)->hkeys, &(c)->hvalues}
static void list_bufs(Columns *c, Buf *out[NBUFS]) {
    Buf *fixed[] = {&c->offsets, &c->timestamps, &c->types, &c->header_offs};
    Bin *bins[] = BINS(c);
    for (int i = 0; i < 4; i++) {
        out[i] = fixed[i];
        out[4 + 3 * i] = &bins[i]->offs, out[5 + 3 * i] = &bins[i]->data, out[6 + 3 * i] = &bins[i]->valid;
    }
}

/* Forgets what was appended since `saved`, a copy of the columns made before. */
static void roll_back(Columns *c, Columns *saved) {
    Buf *now[NBUFS], *then[NBUFS];
    Bin *bins[] = BINS(c), *was[] = BINS(saved);
    list_bufs(c, now);
    list_bufs(saved, then);
    for (int i = 0; i < NBUFS; i++) now[i]->len = then[i]->len;
    for (int i = 0; i < 4; i++) bins[i]->n = was[i]->n, bins[i]->nulls = was[i]->nulls;
    c->rows = saved->rows, c->replaced = saved->replaced;
}

static int reserve(Buf *b, Py_ssize_t n) {
    if (n <= b->cap - b->len) return 0;
    Py_ssize_t cap = b->cap < 128 ? 256 : 2 * b->cap; /* doubling: amortised O(1) appends */
    if (cap - b->len < n) cap = b->len + n;
    if (PyByteArray_Resize(b->ba, cap) < 0) return -1;
    b->cap = cap;
    return 0;
}
#define AT(b) ((uint8_t *)PyByteArray_AS_STRING((b)->ba) + (b)->len)
static int put(Buf *b, const void *src, Py_ssize_t n) {
    if (reserve(b, n) < 0) return -1;
    if (n) memcpy(AT(b), src, (size_t)n);
    b->len += n;
    return 0;
}
static int put_i64(Buf *b, int64_t v) { return put(b, &v, 8); }
static int put_i32(Buf *b, int32_t v) { return put(b, &v, 4); }

/* Appends bit `i` to a bitmap of i bits, clearing the bits above it (a rolled-back batch may have set them). */
static int put_bit(Buf *b, Py_ssize_t i, int bit) {
    if (i % 8 == 0 && put(b, "", 1) < 0) return -1;
    uint8_t *byte = (uint8_t *)PyByteArray_AS_STRING(b->ba) + i / 8;
    *byte = (uint8_t)((*byte & ((1u << (i % 8)) - 1)) | ((unsigned)bit << (i % 8)));
    return 0;
}

/* Raises ProtocolError(message, at), or without a position when at < 0; returns -1. */
static int error(Py_ssize_t at, const char *fmt, ...) {
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    PyObject *exc = !msg ? NULL : at >= 0 ? PyObject_CallFunction(ProtocolError, "On", msg, at)
                                          : PyObject_CallOneArg(ProtocolError, msg);
    if (exc) PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(exc);
    Py_XDECREF(msg);
    return -1;
}

/* Ends the column's next entry, its data appended. Arrow's binary offsets are int32: a column
 * holds at most 2 GiB until take(). */
static int bin_close(Bin *col, int valid) {
    if (col->data.len > INT32_MAX)
        return error(-1, "more than 2 GiB of record data in one Arrow column; take() the rows sooner");
    col->nulls += !valid;
    if (put_bit(&col->valid, col->n++, valid) < 0) return -1;
    return put_i32(&col->offs, (int32_t)col->data.len);
}
/* Appends an entry; n < 0 is a null. */
static int bin_put(Bin *col, const uint8_t *src, int64_t n) {
    return (n >= 0 && put(&col->data, src, (Py_ssize_t)n) < 0) ? -1 : bin_close(col, n >= 0);
}

/* a + b overflows a long (where Python's ints would not). */
static int overflows(int64_t a, int64_t b) { return b > 0 ? a > INT64_MAX - b : a < INT64_MIN - b; }

/* Kafka's zigzag varint as protocol/varint.py::_read_zigzag reads it: same bounds, same errors. */
static int zigzag(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int bits, int64_t *out,
                  Py_ssize_t index, const char *what) {
    Py_ssize_t start = *pos;
    uint64_t r = 0;
    int shift = 0, wide = 0;
    for (;;) {
        if (*pos >= end) return error(start, "truncated record %zd %s", index, what);
        uint8_t b = d[(*pos)++];
        r |= (uint64_t)(b & 0x7F) << shift;
        wide |= shift == 63 && (b & 0x7E); /* bits past the 64th */
        if (b < 0x80) break;
        shift += 7;
        if (shift >= 7 * max_bytes) return error(start, "record %zd %s longer than %d bytes", index, what, max_bytes);
    }
    if (wide || (bits < 64 && r >> bits)) return error(start, "record %zd %s does not fit %d bits", index, what, bits);
    *out = (int64_t)(r >> 1) ^ -(int64_t)(r & 1);
    return 0;
}

/* A nullable byte string: its length (< 0: null) and start, checked against the record's end. */
static int field(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t rec_end, int64_t *n,
                 const uint8_t **at, Py_ssize_t index, const char *what, const char *len_what) {
    if (zigzag(d, pos, end, 5, 32, n, index, len_what) < 0) return -1;
    *at = d + *pos;
    if (*n < 0) return 0;
    if (*n > rec_end - *pos)
        return error(*pos, "record %zd %s of %lld bytes overruns its record (%zd left)", index, what,
                     (long long)*n, rec_end - *pos);
    *pos += (Py_ssize_t)*n;
    return 0;
}

/* Length of the UTF-8 sequence at s (n bytes left): k > 0 if valid, -k if not, its first k bytes
 * being one "maximal subpart" (Unicode's rule for placing U+FFFD, which Python and Java follow). */
static int utf8_seq(const uint8_t *s, Py_ssize_t n) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    int need;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) need = 2, lo = 0xA0; /* no overlongs */
    else if (b == 0xED) need = 2, hi = 0x9F; /* no surrogates */
    else if (b >= 0xE1 && b <= 0xEF) need = 2;
    else if (b == 0xF0) need = 3, lo = 0x90; /* no overlongs */
    else if (b == 0xF4) need = 3, hi = 0x8F; /* nothing past U+10FFFF */
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else return -1;
    for (int k = 1; k <= need; k++)
        if (k >= n || s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xBF)) return -k;
    return need + 1;
}

/* A header key into the string column, each invalid UTF-8 sequence as U+FFFD (as Java decodes it). */
static int put_key(Columns *c, const uint8_t *s, Py_ssize_t n) {
    Buf *data = &c->hkeys.data;
    if (reserve(data, 3 * n) < 0) return -1; /* a bad byte becomes 3 */
    uint8_t *out = AT(data);
    int bad = 0;
    for (Py_ssize_t i = 0; i < n;) {
        int k = utf8_seq(s + i, n - i);
        if (k > 0) memcpy(out, s + i, (size_t)k), out += k, i += k;
        else memcpy(out, "\xEF\xBF\xBD", 3), out += 3, i -= k, bad = 1;
    }
    data->len = out - (uint8_t *)PyByteArray_AS_STRING(data->ba);
    c->replaced += bad;
    return bin_close(&c->hkeys, 1);
}

static int walk(Columns *c, const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, int64_t base_offset,
                int64_t base_ts, int64_t append_ts, int log_append, int64_t start, int64_t until) {
    Py_ssize_t bad_ts = -1; /* raised once every record is parsed, as the Python walker finds it */
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, delta, key_n, value_n, headers, hk, hv;
        const uint8_t *key, *value, *hkey, *hvalue;
        if (zigzag(d, &pos, end, 5, 32, &length, i, "length varint") < 0) return -1;
        Py_ssize_t rec_start = pos, rec_end = pos + (Py_ssize_t)length;
        if (length <= 0 || length > end - pos)
            return error(rec_start, "record %zd claims %lld bytes, %zd left", i, (long long)length, end - pos);
        pos += 1; /* record attributes: unused by every version so far */
        if (zigzag(d, &pos, end, 10, 64, &ts_delta, i, "timestamp delta varlong") < 0 ||
            zigzag(d, &pos, end, 5, 32, &delta, i, "offset delta varint") < 0 ||
            field(d, &pos, end, rec_end, &key_n, &key, i, "key", "key length varint") < 0 ||
            field(d, &pos, end, rec_end, &value_n, &value, i, "value", "value length varint") < 0 ||
            zigzag(d, &pos, end, 5, 32, &headers, i, "header count varint") < 0)
            return -1;
        if (headers < 0 || 2 * headers > rec_end - pos) /* every header takes at least two bytes */
            return error(pos, "record %zd claims %lld headers in %zd bytes", i, (long long)headers, rec_end - pos);
        Py_ssize_t headers_at = pos;
        for (int64_t h = 0; h < headers; h++) {
            if (field(d, &pos, end, rec_end, &hk, &hkey, i, "header key", "header key length varint") < 0) return -1;
            if (hk < 0) return error(pos - 1, "record %zd has a header with a null key", i);
            if (field(d, &pos, end, rec_end, &hv, &hvalue, i, "header value", "header value length varint") < 0)
                return -1;
        }
        if (pos != rec_end)
            return error(rec_start, "record %zd declares %lld bytes but its fields take %zd", i, (long long)length,
                         pos - rec_start);
        /* An offset past a long is outside any start..until, as it is with Python's ints. */
        if (overflows(base_offset, delta) || base_offset + delta < start || base_offset + delta >= until) continue;
        int64_t ts = log_append ? append_ts : overflows(base_ts, ts_delta) ? INT64_MAX : base_ts + ts_delta;
        if (ts > INT64_MAX / 1000 || ts < INT64_MIN / 1000) {
            bad_ts = bad_ts < 0 ? i : bad_ts;
            continue;
        }
        if (put_i64(&c->offsets, base_offset + delta) < 0 || put_i64(&c->timestamps, ts * 1000) < 0 ||
            put_i32(&c->types, log_append) < 0 || bin_put(&c->keys, key, key_n) < 0 ||
            bin_put(&c->values, value, value_n) < 0)
            return -1;
        c->rows++;
        if (!c->with_headers) continue;
        for (Py_ssize_t p = headers_at; p < pos;) { /* the headers again, still bounds-checked */
            if (field(d, &p, end, rec_end, &hk, &hkey, i, "header key", "header key length varint") < 0 ||
                put_key(c, hkey, (Py_ssize_t)hk) < 0 ||
                field(d, &p, end, rec_end, &hv, &hvalue, i, "header value", "header value length varint") < 0 ||
                bin_put(&c->hvalues, hvalue, hv) < 0)
                return -1;
        }
        if (c->hkeys.n > INT32_MAX) return error(-1, "more than 2**31 headers in one Arrow column");
        if (put_i32(&c->header_offs, (int32_t)c->hkeys.n) < 0) return -1;
    }
    if (pos != end) return error(pos, "%zd bytes follow the %zd records the header declares", end - pos, count);
    if (bad_ts >= 0) return error(-1, "record %zd timestamp does not fit a long in microseconds", bad_ts);
    return 0;
}

/* Fresh, empty buffers; every offsets buffer starts with its 0. */
static int reset(Columns *c) {
    Buf *bufs[NBUFS];
    Bin *bins[] = BINS(c);
    list_bufs(c, bufs);
    for (int i = 0; i < NBUFS; i++) {
        Py_XSETREF(bufs[i]->ba, PyByteArray_FromStringAndSize(NULL, 0));
        if (!bufs[i]->ba) return -1;
        bufs[i]->len = bufs[i]->cap = 0;
    }
    for (int i = 0; i < 4; i++) {
        bins[i]->n = bins[i]->nulls = 0;
        if (put_i32(&bins[i]->offs, 0) < 0) return -1;
    }
    c->rows = c->replaced = 0;
    return put_i32(&c->header_offs, 0);
}

static PyObject *Columns_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"with_headers", NULL};
    int with_headers;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "p:Columns", names, &with_headers)) return NULL;
    Columns *c = (Columns *)type->tp_alloc(type, 0);
    if (c && reset(c) < 0) Py_CLEAR(c);
    if (c) c->with_headers = with_headers;
    return (PyObject *)c;
}

static void Columns_dealloc(Columns *c) {
    Buf *bufs[NBUFS];
    list_bufs(c, bufs);
    for (int i = 0; i < NBUFS; i++) Py_CLEAR(bufs[i]->ba);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *Columns_add(Columns *c, PyObject *args) {
    Py_buffer data;
    Py_ssize_t pos, count;
    long long base_offset, base_ts, max_ts, start, until;
    int log_append;
    if (!PyArg_ParseTuple(args, "y*nnLLLpLL:add", &data, &pos, &count, &base_offset, &base_ts, &max_ts, &log_append,
                          &start, &until))
        return NULL;
    Columns saved = *c; /* for its lengths and counts only: no reference is taken */
    int failed = pos < 0 || pos > data.len || count < 0
        ? (PyErr_Format(PyExc_ValueError, "position %zd or count %zd out of range", pos, count), -1)
        : walk(c, data.buf, pos, data.len, count, base_offset, base_ts, max_ts, log_append, start, until);
    PyBuffer_Release(&data);
    if (failed) roll_back(c, &saved);
    return failed ? NULL : Py_NewRef(Py_None);
}

/* The buffer, trimmed to what is used, handed over (a bitmap of `bits` bits: its padding cleared). */
static PyObject *hand_over(Buf *b, Py_ssize_t bits) {
    if (bits % 8) PyByteArray_AS_STRING(b->ba)[b->len - 1] &= (char)((1u << (bits % 8)) - 1);
    return PyByteArray_Resize(b->ba, b->len) < 0 ? NULL : Py_NewRef(b->ba);
}
static PyObject *bin_tuple(Bin *col) { /* (length, offsets, data, validity or None, nulls) */
    PyObject *valid = col->nulls ? hand_over(&col->valid, col->n) : Py_NewRef(Py_None);
    return Py_BuildValue("(nNNNn)", col->n, hand_over(&col->offs, 0), hand_over(&col->data, 0), valid, col->nulls);
}

static PyObject *Columns_take(Columns *c, PyObject *Py_UNUSED(ignored)) {
    PyObject *headers = !c->with_headers ? Py_NewRef(Py_None)
        : Py_BuildValue("(NNN)", hand_over(&c->header_offs, 0), bin_tuple(&c->hkeys), bin_tuple(&c->hvalues));
    PyObject *out = Py_BuildValue("(nNNNNNNn)", c->rows, hand_over(&c->offsets, 0), hand_over(&c->timestamps, 0),
                                  hand_over(&c->types, 0), bin_tuple(&c->keys), bin_tuple(&c->values), headers,
                                  c->replaced);
    if (reset(c) < 0) Py_CLEAR(out);
    return out;
}

static PyObject *Columns_rows(Columns *c, void *Py_UNUSED(closure)) { return PyLong_FromSsize_t(c->rows); }
static PyObject *Columns_nbytes(Columns *c, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(c->keys.data.len + c->values.data.len + c->hkeys.data.len + c->hvalues.data.len);
}

static PyMethodDef Columns_methods[] = {
    {"add", (PyCFunction)Columns_add, METH_VARARGS,
     "add(data, pos, count, base_offset, base_timestamp, max_timestamp, log_append_time, start, until)"},
    {"take", (PyCFunction)Columns_take, METH_NOARGS, "The buffered rows' buffers; starts afresh."},
    {NULL},
};
static PyGetSetDef Columns_getset[] = {
    {"rows", (getter)Columns_rows, NULL, "rows buffered", NULL},
    {"nbytes", (getter)Columns_nbytes, NULL, "key, value and header bytes buffered", NULL},
    {NULL},
};
static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "protocol._record_columns.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columns(with_headers): records of v2 batches accumulated as Arrow column buffers.",
    .tp_new = Columns_new,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_getset = Columns_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_record_columns", .m_doc = "Kafka records into column buffers.", .m_size = -1,
};

PyMODINIT_FUNC PyInit__record_columns(void) {
    PyObject *errors = PyImport_ImportModule("protocol.errors");
    if (!errors) return NULL;
    ProtocolError = PyObject_GetAttrString(errors, "ProtocolError");
    Py_DECREF(errors);
    if (!ProtocolError || PyType_Ready(&ColumnsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddObjectRef(m, "Columns", (PyObject *)&ColumnsType) < 0) Py_CLEAR(m);
    return m;
}
