/* C version of oncelog.protocol.records.record.check_records: walks the records of a v2
 * batch (length varint, attributes, timestampDelta varlong, offsetDelta varint) to check the
 * count and the offset deltas without a Python-level loop per record. With require_key (a
 * compacted topic) it also reads each key's length varint and counts null keys. Same rules and
 * messages as the Python version, which stays the reference and the fallback. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>

static int read_varint(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t limit, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    while (1) {
        if (*pos >= limit || shift > 63)
            return -1;
        unsigned char byte = buf[(*pos)++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80)
            break;
        shift += 7;
    }
    *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
    return 0;
}

/* The record walk of check_records, on a raw buffer: 0 when every record is well formed,
 * else -1 with the error kind, record index and value the Python wrapper reports. */
static int walk_records(const unsigned char *buf, Py_ssize_t start, Py_ssize_t end,
                        Py_ssize_t count, int require_key, const char **error,
                        Py_ssize_t *error_index, int64_t *bad)
{
    /* Null keys do not stop the walk: a malformed later record is reported first, as Kafka's
     * record iteration fails before its per-record errors are gathered. */
    Py_ssize_t first_keyless = -1;
    int64_t keyless = 0;
    Py_ssize_t pos = start;
    Py_ssize_t index;
    *bad = 0;
    for (index = 0; index < count; index++) {
        int64_t length, ts_delta, offset_delta;
        *error_index = index;
        if (read_varint(buf, &pos, end, &length) < 0) {
            *error = "varint overruns the record or is longer than 10 bytes";
            return -1;
        }
        Py_ssize_t body = pos;
        if (length < 4 || length > end - body) {
            *error = "overruns";
            *bad = length;
            return -1;
        }
        Py_ssize_t record_end = body + (Py_ssize_t)length;
        Py_ssize_t p = body + 1;
        if (read_varint(buf, &p, record_end, &ts_delta) < 0 ||
            read_varint(buf, &p, record_end, &offset_delta) < 0) {
            *error = "varint overruns the record or is longer than 10 bytes";
            return -1;
        }
        if (offset_delta != index) {
            *error = "delta";
            *bad = offset_delta;
            return -1;
        }
        if (require_key) {
            int64_t key_length;
            if (read_varint(buf, &p, record_end, &key_length) < 0) {
                *error = "varint overruns the record or is longer than 10 bytes";
                return -1;
            }
            if (key_length < 0) {
                if (first_keyless < 0)
                    first_keyless = index;
                keyless++;
            }
        }
        pos = record_end;
    }
    *error_index = index;
    if (pos != end) {
        *error = "trailing";
        *bad = end - pos;
        return -1;
    }
    if (first_keyless >= 0) {
        *error = "nokey";
        *error_index = first_keyless;
        *bad = keyless;
        return -1;
    }
    return 0;
}

static PyObject *check_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, count;
    int require_key = 0;
    if (!PyArg_ParseTuple(args, "y*nnn|p", &view, &start, &end, &count, &require_key))
        return NULL;
    const char *error = NULL;
    Py_ssize_t index = 0;
    int64_t bad = 0;
    if (start < 0 || end > view.len || start > end)
        error = "record region outside the buffer";
    else
        walk_records((const unsigned char *)view.buf, start, end, count, require_key, &error,
                     &index, &bad);
    PyBuffer_Release(&view);
    if (error == NULL)
        Py_RETURN_NONE;
    /* (kind, record index, value): the Python wrapper turns it into RecordFormatError. */
    return Py_BuildValue("(snL)", error, index, (long long)bad);
}

/* scan_records(body, count): where each record of a decompressed batch body is, for the log
 * cleaner (off the request path, but it reads every record of a compacted topic): a list of
 * (start, end, body, after_ts, ts_delta, offset_delta, key_start, key_length, value_length)
 * with -1 lengths for null keys and values. ValueError on a malformed record. The Python
 * version in oncelog.storage.cleaner is the reference and the fallback. */
static PyObject *scan_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &view, &count))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_length, value_length;
        Py_ssize_t start = pos;
        if (read_varint(buf, &pos, end, &length) < 0 || length < 1 || length > end - pos)
            goto malformed;
        Py_ssize_t body = pos, record_end = pos + (Py_ssize_t)length;
        Py_ssize_t p = body + 1;
        if (read_varint(buf, &p, record_end, &ts_delta) < 0)
            goto malformed;
        Py_ssize_t after_ts = p;
        if (read_varint(buf, &p, record_end, &offset_delta) < 0 ||
            read_varint(buf, &p, record_end, &key_length) < 0)
            goto malformed;
        Py_ssize_t key_start = p;
        if (key_length > record_end - p)
            goto malformed;
        if (key_length > 0)
            p += (Py_ssize_t)key_length;
        if (read_varint(buf, &p, record_end, &value_length) < 0)
            goto malformed;
        PyObject *item = Py_BuildValue("(nnnnLLnLL)", start, record_end, body, after_ts,
                                       (long long)ts_delta, (long long)offset_delta, key_start,
                                       (long long)key_length, (long long)value_length);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
        pos = record_end;
    }
    PyBuffer_Release(&view);
    return out;
malformed:
    PyErr_SetString(PyExc_ValueError, "malformed record in batch body");
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}


/* Big-endian reads; the caller has checked the bounds. */
static int64_t be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH (HEADER_SIZE - LOG_OVERHEAD)

/* One header as an instance of `cls` (BatchHeader, a NamedTuple: a tuple subclass without
 * extra fields), filled as tuple.__new__ fills a subclass instance. */
static PyObject *make_header(PyTypeObject *cls, const unsigned char *h)
{
    PyObject *out = cls->tp_alloc(cls, 13);
    if (out == NULL)
        return NULL;
    PyObject *items[13] = {
        PyLong_FromLongLong(be64(h)),
        PyLong_FromLong(be32(h + 8)),
        PyLong_FromLong(be32(h + 12)),
        PyLong_FromLong((signed char)h[16]),
        PyLong_FromUnsignedLong((uint32_t)be32(h + 17)),
        PyLong_FromLong(be16(h + 21)),
        PyLong_FromLong(be32(h + 23)),
        PyLong_FromLongLong(be64(h + 27)),
        PyLong_FromLongLong(be64(h + 35)),
        PyLong_FromLongLong(be64(h + 43)),
        PyLong_FromLong(be16(h + 51)),
        PyLong_FromLong(be32(h + 53)),
        PyLong_FromLong(be32(h + 57)),
    };
    int failed = 0;
    for (int i = 0; i < 13; i++) {
        if (items[i] == NULL)
            failed = 1;
        PyTuple_SET_ITEM(out, i, items[i]);
    }
    if (failed) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* walk_batches(buf, cls, start, end): [(position, header)] of each complete batch of
 * buf[start:end], as oncelog.protocol.records.batch.iter_batches walks them (stop at the first
 * batch shorter than a header or running past `end`). Positions are relative to `start`. One
 * call per stored region instead of a struct unpack and a NamedTuple per batch in Python: the
 * walk is what recovery, producer-state rebuilds, coordinator loading and fetch reads share. */
static PyObject *walk_batches(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *cls_obj;
    Py_ssize_t start = 0, end = -1;
    if (!PyArg_ParseTuple(args, "y*O|nn", &view, &cls_obj, &start, &end))
        return NULL;
    PyObject *out = NULL;
    if (!PyType_Check(cls_obj) || !PyType_IsSubtype((PyTypeObject *)cls_obj, &PyTuple_Type) ||
        ((PyTypeObject *)cls_obj)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "cls must be a NamedTuple class");
        goto done;
    }
    if (end < 0 || end > view.len)
        end = view.len;
    if (start < 0 || start > end) {
        PyErr_SetString(PyExc_ValueError, "start outside the buffer");
        goto done;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    out = PyList_New(0);
    if (out == NULL)
        goto done;
    Py_ssize_t pos = start;
    while (end - pos >= HEADER_SIZE) {
        int32_t length = be32(buf + pos + 8);
        if (length < MIN_BATCH_LENGTH || (Py_ssize_t)length + LOG_OVERHEAD > end - pos)
            break;
        PyObject *header = make_header((PyTypeObject *)cls_obj, buf + pos);
        PyObject *item = header == NULL ? NULL : Py_BuildValue("(nN)", pos - start, header);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(item);
        pos += (Py_ssize_t)length + LOG_OVERHEAD;
    }
done:
    PyBuffer_Release(&view);
    return out;
}

/* parse_marker_at(buf, pos): (is COMMIT, coordinator epoch) of the control batch at `pos`, or
 * None if its record is not a transaction marker (same reading as control.parse_marker, the
 * Python reference). */
static PyObject *parse_marker_at(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*n", &view, &pos))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    PyObject *out = NULL;
    if (pos < 0 || view.len - pos < HEADER_SIZE)
        goto none;
    Py_ssize_t size = (Py_ssize_t)be32(buf + pos + 8) + LOG_OVERHEAD;
    Py_ssize_t end = view.len - pos < size ? view.len : pos + size;
    int64_t length, skip, key_len, value_len;
    Py_ssize_t p = pos + HEADER_SIZE;
    if (read_varint(buf, &p, end, &length) < 0)
        goto none;
    Py_ssize_t record_end = p + (Py_ssize_t)length;
    if (record_end > end)
        record_end = end;
    p += 1;
    if (read_varint(buf, &p, record_end, &skip) < 0 ||
        read_varint(buf, &p, record_end, &skip) < 0 ||
        read_varint(buf, &p, record_end, &key_len) < 0)
        goto none;
    if (end - p < 4)
        goto none;
    int16_t version = be16(buf + p), kind = be16(buf + p + 2);
    if (key_len < pos + HEADER_SIZE - p || key_len > end - p)
        goto none;
    p += (Py_ssize_t)key_len;
    if (read_varint(buf, &p, record_end, &value_len) < 0)
        goto none;
    long epoch = -1;
    if (value_len >= 6) {
        if (end - p < 6)
            goto none;
        epoch = be32(buf + p + 2);
    }
    if (version != 0 || (kind != 0 && kind != 1))
        goto none;
    out = Py_BuildValue("(Nl)", PyBool_FromLong(kind == 1), epoch);
    PyBuffer_Release(&view);
    return out;
none:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* The fields of a stored batch header that the key scans below need. */
typedef struct {
    int64_t base_offset;
    Py_ssize_t size;
    int attributes;
    int32_t last_offset_delta;
    int64_t producer_id;
    int32_t record_count;
} batch_info;

/* The batch at `pos` if it is complete within `end` (else 0). */
static int next_batch(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end, batch_info *b)
{
    if (end - pos < HEADER_SIZE)
        return 0;
    int32_t length = be32(buf + pos + 8);
    if (length < MIN_BATCH_LENGTH || (Py_ssize_t)length + LOG_OVERHEAD > end - pos)
        return 0;
    const unsigned char *h = buf + pos;
    b->base_offset = be64(h);
    b->size = (Py_ssize_t)length + LOG_OVERHEAD;
    b->attributes = be16(h + 21);
    b->last_offset_delta = be32(h + 23);
    b->producer_id = be64(h + 43);
    b->record_count = be32(h + 57);
    return 1;
}

/* Calls fn(key or NULL, offset delta, ctx) for each record of an uncompressed batch body;
 * -1 (ValueError set) on a malformed record, else the return of the last failing fn or 0. */
typedef int (*record_fn)(const unsigned char *key, int64_t key_len, int64_t offset_delta,
                         void *ctx);

static int each_record(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end, int32_t count,
                       record_fn fn, void *ctx)
{
    for (int32_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_length;
        if (read_varint(buf, &pos, end, &length) < 0 || length < 1 || length > end - pos)
            goto malformed;
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        Py_ssize_t p = pos + 1;
        if (read_varint(buf, &p, record_end, &ts_delta) < 0 ||
            read_varint(buf, &p, record_end, &offset_delta) < 0 ||
            read_varint(buf, &p, record_end, &key_length) < 0 || key_length > record_end - p)
            goto malformed;
        if (fn(key_length < 0 ? NULL : buf + p, key_length, offset_delta, ctx) < 0)
            return -1;
        pos = record_end;
    }
    return 0;
malformed:
    PyErr_SetString(PyExc_ValueError, "malformed record in batch body");
    return -1;
}

static int contains_long(PyObject *set, int64_t value)
{
    if (set == Py_None || PySet_GET_SIZE(set) == 0)
        return 0;
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int found = PySet_Contains(set, v);
    Py_DECREF(v);
    return found;
}

typedef struct {
    PyObject *latest;
    int64_t base;
} collect_ctx;

static int collect_one(const unsigned char *key, int64_t key_len, int64_t delta, void *c)
{
    collect_ctx *ctx = (collect_ctx *)c;
    if (key == NULL)
        return 0;
    PyObject *k = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)key_len);
    PyObject *v = k == NULL ? NULL : PyLong_FromLongLong(ctx->base + delta);
    int rc = v == NULL ? -1 : PyDict_SetItem(ctx->latest, k, v);
    Py_XDECREF(k);
    Py_XDECREF(v);
    return rc;
}

/* collect_latest(buf, stable, latest, suspects): the first pass of reading a log as a
 * cleaning would leave it (oncelog.storage.latest). For each complete batch below offset
 * `stable`: a data batch's keyed records set latest[key] = offset (batches come in offset
 * order, so the last write is the latest); control batches are skipped. Batches the caller must
 * look at itself are not read but listed: transactional batches and markers of a producer id in
 * `suspects` (it has aborted transactions) and compressed data batches. Returns (listed
 * positions, bytes consumed, offset after the last batch consumed or -1, reached `stable`). */
static PyObject *collect_latest(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long stable;
    PyObject *latest, *suspects;
    if (!PyArg_ParseTuple(args, "y*LO!O", &view, &stable, &PyDict_Type, &latest, &suspects))
        return NULL;
    PyObject *held = NULL, *out = NULL;
    if (suspects != Py_None && !PyAnySet_Check(suspects)) {
        PyErr_SetString(PyExc_TypeError, "suspects must be a set or None");
        goto done;
    }
    held = PyList_New(0);
    if (held == NULL)
        goto done;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0;
    int64_t next_offset = -1;
    int reached = 0;
    batch_info b;
    while (next_batch(buf, pos, view.len, &b)) {
        if (b.base_offset >= stable) {
            reached = 1;
            break;
        }
        int control = b.attributes & 0x20, txn = b.attributes & 0x10;
        int suspect = txn ? contains_long(suspects, b.producer_id) : 0;
        if (suspect < 0)
            goto done;
        if (suspect || (!control && (b.attributes & 0x07))) {
            PyObject *p = PyLong_FromSsize_t(pos);
            if (p == NULL || PyList_Append(held, p) < 0) {
                Py_XDECREF(p);
                goto done;
            }
            Py_DECREF(p);
        } else if (!control) {
            collect_ctx ctx = {latest, b.base_offset};
            if (each_record(buf, pos + HEADER_SIZE, pos + b.size, b.record_count, collect_one,
                            &ctx) < 0)
                goto done;
        }
        pos += b.size;
        next_offset = b.base_offset + b.last_offset_delta + 1;
    }
    out = Py_BuildValue("(OnLN)", held, pos, (long long)next_offset, PyBool_FromLong(reached));
done:
    Py_XDECREF(held);
    PyBuffer_Release(&view);
    return out;
}

typedef struct {
    PyObject *latest;
    int64_t base;
    int32_t kept;
} select_ctx;

static int select_one(const unsigned char *key, int64_t key_len, int64_t delta, void *c)
{
    select_ctx *ctx = (select_ctx *)c;
    if (key == NULL) {
        ctx->kept++;
        return 0;
    }
    PyObject *k = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)key_len);
    if (k == NULL)
        return -1;
    PyObject *v = PyDict_GetItemWithError(ctx->latest, k);
    Py_DECREF(k);
    if (v == NULL) {
        if (PyErr_Occurred())
            return -1;
        ctx->kept++;
        return 0;
    }
    long long latest = PyLong_AsLongLong(v);
    if (latest == -1 && PyErr_Occurred())
        return -1;
    if (ctx->base + delta >= latest)
        ctx->kept++;
    return 0;
}

/* select_latest(buf, stable, upper, latest, aborted): the second pass. For each complete batch
 * below offset `upper`: (position, size, whole) when it stays (whole) or needs the caller
 * (compressed data, or some but not all records superseded: whole is False); nothing when it
 * goes (every record superseded, an empty data batch, or its base offset in `aborted`).
 * Markers and everything from `stable` on stay. A record stays if its key is null, unknown to
 * `latest` or its offset is at least latest[key]. Returns (items, bytes consumed, offset after
 * the last batch consumed or -1, reached `upper`). */
static PyObject *select_latest(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long stable, upper;
    PyObject *latest, *aborted;
    if (!PyArg_ParseTuple(args, "y*LLO!O", &view, &stable, &upper, &PyDict_Type, &latest,
                          &aborted))
        return NULL;
    PyObject *items = NULL, *out = NULL;
    if (aborted != Py_None && !PyAnySet_Check(aborted)) {
        PyErr_SetString(PyExc_TypeError, "aborted must be a set or None");
        goto done;
    }
    items = PyList_New(0);
    if (items == NULL)
        goto done;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0;
    int64_t next_offset = -1;
    int reached = 0;
    batch_info b;
    while (next_batch(buf, pos, view.len, &b)) {
        if (b.base_offset >= upper) {
            reached = 1;
            break;
        }
        int whole = -1; /* -1: goes, 0: caller, 1: stays whole */
        if (b.base_offset >= stable || (b.attributes & 0x20)) {
            whole = 1;
        } else {
            int dead = contains_long(aborted, b.base_offset);
            if (dead < 0)
                goto done;
            if (!dead && b.record_count > 0) {
                if (b.attributes & 0x07) {
                    whole = 0;
                } else {
                    select_ctx ctx = {latest, b.base_offset, 0};
                    if (each_record(buf, pos + HEADER_SIZE, pos + b.size, b.record_count,
                                    select_one, &ctx) < 0)
                        goto done;
                    whole = ctx.kept == b.record_count ? 1 : ctx.kept == 0 ? -1 : 0;
                }
            }
        }
        if (whole >= 0) {
            PyObject *item = Py_BuildValue("(nnN)", pos, b.size, PyBool_FromLong(whole));
            if (item == NULL || PyList_Append(items, item) < 0) {
                Py_XDECREF(item);
                goto done;
            }
            Py_DECREF(item);
        }
        pos += b.size;
        next_offset = b.base_offset + b.last_offset_delta + 1;
    }
    out = Py_BuildValue("(OnLN)", items, pos, (long long)next_offset, PyBool_FromLong(reached));
done:
    Py_XDECREF(items);
    PyBuffer_Release(&view);
    return out;
}

/* span_batches(buf, max_offset): (bytes of the complete batches at the start of buf that begin
 * below offset max_offset (-1: no limit), offset after the last of them or -1). What a read
 * needs to cut a region at a batch boundary, without a header object per batch. */
static PyObject *span_batches(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long max_offset = -1;
    if (!PyArg_ParseTuple(args, "y*|L", &view, &max_offset))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0;
    int64_t next_offset = -1;
    batch_info b;
    while (next_batch(buf, pos, view.len, &b)) {
        if (max_offset >= 0 && b.base_offset >= max_offset)
            break;
        pos += b.size;
        next_offset = b.base_offset + b.last_offset_delta + 1;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nL)", pos, (long long)next_offset);
}

/* plan_scan(buf, next_offset, base_offset, bytes_since_index, index_interval, has_entries,
 * max_timestamp): a segment load's walk over one chunk (oncelog.storage.segment), without a
 * header object per batch. Walks complete batches while they are plausible (magic 2, base
 * offset at or past max(next_offset, base_offset), last offset delta >= 0, last offset within
 * int32 of base_offset, as index entries need) and returns
 * (crcs, consumed, next_offset, max_timestamp, bytes_since_index, entries, stopped):
 * crcs lists (position, size, stored crc) for the caller to check with crc32c; entries lists
 * the (offset, position, running max timestamp) the offset and time indexes get, by the rule
 * of LogSegment._maybe_index; stopped is true when an implausible batch ended the walk. */
static PyObject *plan_scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long next_offset, base_offset, bytes_since, interval, max_ts;
    int has_entries;
    if (!PyArg_ParseTuple(args, "y*LLLLpL", &view, &next_offset, &base_offset, &bytes_since,
                          &interval, &has_entries, &max_ts))
        return NULL;
    PyObject *crcs = PyList_New(0), *entries = PyList_New(0), *out = NULL;
    if (crcs == NULL || entries == NULL)
        goto done;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0;
    int stopped = 0;
    batch_info b;
    while (next_batch(buf, pos, view.len, &b)) {
        long long floor = next_offset > base_offset ? next_offset : base_offset;
        if (buf[pos + 16] != 2 || b.base_offset < floor || b.last_offset_delta < 0 ||
            b.base_offset - base_offset > INT32_MAX - (long long)b.last_offset_delta) {
            stopped = 1;
            break;
        }
        PyObject *c = Py_BuildValue("(nnk)", pos, b.size, (unsigned long)(uint32_t)be32(buf + pos + 17));
        if (c == NULL || PyList_Append(crcs, c) < 0) {
            Py_XDECREF(c);
            goto done;
        }
        Py_DECREF(c);
        long long batch_max = be64(buf + pos + 35);
        if (batch_max > max_ts)
            max_ts = batch_max;
        bytes_since += b.size;
        if (bytes_since > interval || !has_entries) {
            PyObject *e = Py_BuildValue("(LnL)", (long long)b.base_offset, pos, max_ts);
            if (e == NULL || PyList_Append(entries, e) < 0) {
                Py_XDECREF(e);
                goto done;
            }
            Py_DECREF(e);
            bytes_since = 0;
            has_entries = 1;
        }
        next_offset = b.base_offset + b.last_offset_delta + 1;
        pos += b.size;
    }
    out = Py_BuildValue("(OnLLLON)", crcs, pos, next_offset, max_ts, bytes_since, entries,
                        PyBool_FromLong(stopped));
done:
    Py_XDECREF(crcs);
    Py_XDECREF(entries);
    PyBuffer_Release(&view);
    return out;
}

/* The arguments of a METH_FASTCALL function, for the format codes used here as
 * PyArg_ParseTuple reads them: 'y*' and 'w*' (a buffer, read-only or writable; released again
 * if a later argument fails), 'n' Py_ssize_t, 'L' long long, 'i' int, 'p' truth, 'O' any
 * object, 'O!' an instance of the given type. The functions called for every partition of
 * every Produce and Fetch use it: PyArg_ParseTuple's generic machinery cost them more than
 * some of their work (about 800 instructions a call). 0, or -1 with an exception set. */
static int fast_args(PyObject *const *args, Py_ssize_t nargs, const char *name,
                     const char *format, ...)
{
    Py_buffer *held[8];
    int nheld = 0;
    Py_ssize_t want = 0;
    for (const char *f = format; *f; f++)
        if (*f != '*' && *f != '!')
            want++;
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return -1;
    }
    va_list va;
    va_start(va, format);
    Py_ssize_t i = 0;
    for (const char *f = format; *f; f++, i++) {
        PyObject *arg = args[i];
        switch (*f) {
        case 'y':
        case 'w': {
            Py_buffer *view = va_arg(va, Py_buffer *);
            f++; /* the '*' */
            if (PyUnicode_Check(arg)) {
                PyErr_Format(PyExc_TypeError, "%s(): argument %zd must be bytes-like", name,
                             i + 1);
                goto fail;
            }
            if (PyObject_GetBuffer(arg, view, f[-1] == 'w' ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
                goto fail;
            if (nheld == 8) {
                PyBuffer_Release(view);
                PyErr_SetString(PyExc_SystemError, "fast_args: too many buffers");
                goto fail;
            }
            held[nheld++] = view;
            break;
        }
        case 'n': {
            Py_ssize_t v = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
            if (v == -1 && PyErr_Occurred())
                goto fail;
            *va_arg(va, Py_ssize_t *) = v;
            break;
        }
        case 'L': {
            long long v = PyLong_AsLongLong(arg);
            if (v == -1 && PyErr_Occurred())
                goto fail;
            *va_arg(va, long long *) = v;
            break;
        }
        case 'i': {
            long v = PyLong_AsLong(arg);
            if (v == -1 && PyErr_Occurred())
                goto fail;
            if (v < INT_MIN || v > INT_MAX) {
                PyErr_Format(PyExc_OverflowError, "%s(): argument %zd out of range", name, i + 1);
                goto fail;
            }
            *va_arg(va, int *) = (int)v;
            break;
        }
        case 'p': {
            int v = PyObject_IsTrue(arg);
            if (v < 0)
                goto fail;
            *va_arg(va, int *) = v;
            break;
        }
        case 'O':
            if (f[1] == '!') {
                f++;
                PyTypeObject *type = va_arg(va, PyTypeObject *);
                if (!PyObject_TypeCheck(arg, type)) {
                    PyErr_Format(PyExc_TypeError, "%s(): argument %zd must be %s", name, i + 1,
                                 type->tp_name);
                    goto fail;
                }
            }
            *va_arg(va, PyObject **) = arg;
            break;
        default:
            PyErr_Format(PyExc_SystemError, "fast_args: unknown format code %c", *f);
            goto fail;
        }
    }
    va_end(va);
    return 0;
fail:
    va_end(va);
    for (int k = 0; k < nheld; k++)
        PyBuffer_Release(held[k]);
    return -1;
}

/* crc32c.crc32c of the well-kept crc32c package (hardware CRC32C), looked up once. */
static PyObject *crc32c_func = NULL;

/* check_client_batch(buf, max_message_bytes, require_key, cls): the header (as `cls`, a
 * BatchHeader) of the one uncompressed v2 batch a client produced, when every check of
 * oncelog.storage.validator.validate_produce_records passes; None for anything else (several
 * batches, compression, any error), which the Python validator then judges and words. One call
 * instead of a header parse, a CRC call and a record walk per partition of every Produce. */
static PyObject *check_client_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t max_message_bytes;
    int require_key;
    PyObject *cls_obj;
    if (fast_args(args, nargs, "check_client_batch", "y*npO", &view, &max_message_bytes, &require_key, &cls_obj) < 0)
        return NULL;
    PyObject *out = NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    if (!PyType_Check(cls_obj) || !PyType_IsSubtype((PyTypeObject *)cls_obj, &PyTuple_Type) ||
        ((PyTypeObject *)cls_obj)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "cls must be a NamedTuple class");
        goto done;
    }
    if (crc32c_func == NULL || len < HEADER_SIZE)
        goto fallback;
    int32_t batch_length = be32(buf + 8);
    Py_ssize_t size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
    if (batch_length < MIN_BATCH_LENGTH || size != len || buf[16] != 2 ||
        size > max_message_bytes)
        goto fallback;
    int16_t attributes = be16(buf + 21);
    int64_t producer_id = be64(buf + 43);
    int32_t last_offset_delta = be32(buf + 23);
    int32_t record_count = be32(buf + 57);
    if ((attributes & 0x07) != 0 || (attributes & 0x20) != 0 ||
        ((attributes & 0x10) != 0 && producer_id < 0) || record_count <= 0 ||
        last_offset_delta != record_count - 1)
        goto fallback;
    PyObject *region = PyMemoryView_FromMemory((char *)buf + 21, size - 21, PyBUF_READ);
    if (region == NULL)
        goto done;
    PyObject *crc = PyObject_CallOneArg(crc32c_func, region);
    Py_DECREF(region);
    if (crc == NULL)
        goto done;
    unsigned long computed = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (computed == (unsigned long)-1 && PyErr_Occurred())
        goto done;
    if (computed != (uint32_t)be32(buf + 17))
        goto fallback;
    const char *error = NULL;
    Py_ssize_t index;
    int64_t bad;
    if (walk_records(buf, HEADER_SIZE, size, record_count, require_key, &error, &index, &bad) < 0)
        goto fallback;
    out = make_header((PyTypeObject *)cls_obj, buf);
    goto done;
fallback:
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return out;
}

/* stamp_batch(data, base_offset, leader_epoch, header): (the batch's first HEADER_SIZE bytes
 * with the broker-owned baseOffset and partitionLeaderEpoch set, the header with the same two
 * fields replaced) for a leader's append, which writes the new head and the untouched rest
 * of the batch (the CRC does not cover the two fields). */
static PyObject *stamp_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long long base_offset;
    int leader_epoch;
    PyObject *header;
    if (fast_args(args, nargs, "stamp_batch", "y*LiO", &view, &base_offset, &leader_epoch, &header) < 0)
        return NULL;
    PyObject *out = NULL;
    if (view.len < HEADER_SIZE || !PyTuple_Check(header) || PyTuple_GET_SIZE(header) != 13 ||
        Py_TYPE(header)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_ValueError, "a batch and its 13-field header");
        goto done;
    }
    PyObject *head = PyBytes_FromStringAndSize(view.buf, HEADER_SIZE);
    if (head == NULL)
        goto done;
    unsigned char *h = (unsigned char *)PyBytes_AS_STRING(head);
    uint64_t offset = (uint64_t)base_offset;
    for (int i = 7; i >= 0; i--) {
        h[i] = (unsigned char)(offset & 0xFF);
        offset >>= 8;
    }
    uint32_t epoch = (uint32_t)leader_epoch;
    for (int i = 15; i >= 12; i--) {
        h[i] = (unsigned char)(epoch & 0xFF);
        epoch >>= 8;
    }
    PyTypeObject *cls = Py_TYPE(header);
    PyObject *stored = cls->tp_alloc(cls, 13);
    PyObject *offset_obj = stored == NULL ? NULL : PyLong_FromLongLong(base_offset);
    PyObject *epoch_obj = offset_obj == NULL ? NULL : PyLong_FromLong(leader_epoch);
    if (epoch_obj == NULL) {
        Py_XDECREF(offset_obj);
        Py_XDECREF(stored);
        Py_DECREF(head);
        goto done;
    }
    for (Py_ssize_t i = 0; i < 13; i++) {
        PyObject *item = i == 0 ? offset_obj : i == 2 ? epoch_obj : Py_NewRef(PyTuple_GET_ITEM(header, i));
        PyTuple_SET_ITEM(stored, i, item);
    }
    out = PyTuple_Pack(2, head, stored);
    Py_DECREF(head);
    Py_DECREF(stored);
done:
    PyBuffer_Release(&view);
    return out;
}

/* read_client_id(frame, flexible): (client id, offset of the body) of a request header
 * whose first 8 bytes `peek_ids` read, when it is plainly well formed (the client id a valid
 * UTF-8 string or null, a flexible header without tagged fields); None for anything else,
 * which oncelog.protocol.headers.read_client_id (the reference) then reads or refuses. */
static PyObject *read_client_id(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    int flexible;
    if (fast_args(args, nargs, "read_client_id", "y*p", &view, &flexible) < 0)
        return NULL;
    PyObject *out = NULL, *client_id = NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 8;
    if (view.len < pos + 2)
        goto fallback;
    int16_t length = (int16_t)((uint16_t)buf[pos] << 8 | buf[pos + 1]);
    pos += 2;
    if (length >= 0) {
        if (pos + length > view.len)
            goto fallback;
        client_id = PyUnicode_DecodeUTF8((const char *)buf + pos, length, "strict");
        if (client_id == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto done;
            PyErr_Clear();
            goto fallback;
        }
        pos += length;
    } else if (length == -1) {
        client_id = Py_NewRef(Py_None);
    } else {
        goto fallback;
    }
    if (flexible) {
        if (pos >= view.len || buf[pos] != 0)
            goto fallback;
        pos++;
    }
    out = Py_BuildValue("(On)", client_id, pos);
    goto done;
fallback:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(client_id);
    PyBuffer_Release(&view);
    return out;
}

/* -- A producer's next batch on its packed state record (oncelog.producer_state.entry's
 * RECORD, little-endian "<qhqiqB" then MAX_CACHED_BATCHES x BATCH "<iiqq", newest first):
 * the common case of every idempotent Produce, `ProducerStateManager.next_in_line` and
 * `append_next` in one C call each instead of struct unpacks, a search and slice moves. */

#define PS_EPOCH_AT 8
#define PS_LAST_TIMESTAMP_AT 10
#define PS_TXN_FIRST_AT 22
#define PS_COUNT_AT 30
#define PS_BATCHES_AT 31
#define PS_BATCH_SIZE 24
#define PS_MAX_BATCHES 5
#define PS_RECORD_SIZE (PS_BATCHES_AT + PS_MAX_BATCHES * PS_BATCH_SIZE)
#define PS_SEQUENCE_MODULUS 2147483648LL

static int64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

/* next_in_line(records, table, producer_id, epoch, base_sequence, transactional): the slot
 * of the producer's record when the batch is simply its next one, else 0 (the rules of
 * ProducerStateManager.next_in_line, which stays the reference and the fallback). */
static PyObject *ps_next_in_line(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer rec, tab;
    long long pid;
    int epoch, base_sequence, transactional;
    if (fast_args(args, nargs, "next_in_line", "y*y*Liip", &rec, &tab, &pid, &epoch, &base_sequence,
                          &transactional) < 0)
        return NULL;
    long slot = 0;
    Py_ssize_t cells = tab.len / 4;
    if (tab.itemsize != 4 || cells <= 0 || (cells & (cells - 1)) != 0)
        goto done;
    int32_t found;
    memcpy(&found, (const char *)tab.buf + 4 * (Py_ssize_t)((uint64_t)pid & (uint64_t)(cells - 1)), 4);
    if (found <= 0)
        goto done;
    Py_ssize_t at = (Py_ssize_t)found * PS_RECORD_SIZE;
    if (at + PS_RECORD_SIZE > rec.len)
        goto done;
    const unsigned char *r = (const unsigned char *)rec.buf + at;
    int stored_epoch = (int16_t)((uint16_t)r[PS_EPOCH_AT] | (uint16_t)r[PS_EPOCH_AT + 1] << 8);
    int count = r[PS_COUNT_AT];
    int32_t first_seq = le32(r + PS_BATCHES_AT);
    int32_t delta = le32(r + PS_BATCHES_AT + 4);
    long long next = ((long long)first_seq + delta + 1) % PS_SEQUENCE_MODULUS;
    if (next < 0)
        next += PS_SEQUENCE_MODULUS;
    if (le64(r) != pid || stored_epoch != epoch || stored_epoch == -1 || count == 0 ||
        count > PS_MAX_BATCHES || first_seq < 0 || base_sequence != next ||
        (le64(r + PS_TXN_FIRST_AT) >= 0) != (transactional != 0))
        goto done;
    for (int i = 0; i < count; i++)
        if (le32(r + PS_BATCHES_AT + i * PS_BATCH_SIZE) == base_sequence)
            goto done;
    slot = found;
done:
    PyBuffer_Release(&rec);
    PyBuffer_Release(&tab);
    return PyLong_FromLong(slot);
}

/* append_next(records, slot, base_sequence, last_offset_delta, base_offset, max_timestamp):
 * record a batch next_in_line accepted (newest first; the oldest of five falls off). */
static PyObject *ps_append_next(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer rec;
    Py_ssize_t slot;
    int base_sequence, delta;
    long long base_offset, max_timestamp;
    if (fast_args(args, nargs, "append_next", "w*niiLL", &rec, &slot, &base_sequence, &delta, &base_offset,
                          &max_timestamp) < 0)
        return NULL;
    Py_ssize_t at = slot * PS_RECORD_SIZE;
    if (slot <= 0 || at + PS_RECORD_SIZE > rec.len) {
        PyBuffer_Release(&rec);
        PyErr_SetString(PyExc_ValueError, "no such producer record");
        return NULL;
    }
    unsigned char *r = (unsigned char *)rec.buf + at;
    unsigned char *batches = r + PS_BATCHES_AT;
    memmove(batches + PS_BATCH_SIZE, batches, (PS_MAX_BATCHES - 1) * PS_BATCH_SIZE);
    put_le(batches, (uint32_t)base_sequence, 4);
    put_le(batches + 4, (uint32_t)delta, 4);
    put_le(batches + 8, (uint64_t)(base_offset + delta), 8);
    put_le(batches + 16, (uint64_t)max_timestamp, 8);
    if (max_timestamp > le64(r + PS_LAST_TIMESTAMP_AT))
        put_le(r + PS_LAST_TIMESTAMP_AT, (uint64_t)max_timestamp, 8);
    if (r[PS_COUNT_AT] < PS_MAX_BATCHES)
        r[PS_COUNT_AT]++;
    PyBuffer_Release(&rec);
    Py_RETURN_NONE;
}

/* -- read_produce: a Produce request body (v3-v11) as oncelog.protocol.fast_requests reads
 * it, in one call. Same rules as its Python `_Reader` (the fallback and the reference): only
 * what is plainly well formed is read; anything else returns None and kio decides. */

typedef struct {
    const unsigned char *buf;
    Py_ssize_t pos, end;
    int flexible;
} reader;

/* 0, or -1 when malformed (never sets a Python error). */
static int rd_uvarint(reader *r, int64_t *out)
{
    uint64_t value = 0;
    int shift = 0;
    while (1) {
        if (r->pos >= r->end)
            return -1;
        unsigned char byte = r->buf[r->pos++];
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80)
            break;
        shift += 7;
        if (shift > 28)
            return -1;
    }
    *out = (int64_t)value;
    return 0;
}

static int rd_length(reader *r, int wide, int64_t *out)
{
    if (r->flexible) {
        if (rd_uvarint(r, out) < 0)
            return -1;
        *out -= 1;
        return 0;
    }
    Py_ssize_t size = wide ? 4 : 2;
    if (r->end - r->pos < size)
        return -1;
    *out = wide ? be32(r->buf + r->pos) : be16(r->buf + r->pos);
    r->pos += size;
    return 0;
}

static int rd_count(reader *r, int64_t *out)
{
    if (rd_length(r, 1, out) < 0 || *out < 0 || *out > r->end - r->pos)
        return -1;
    return 0;
}

static int rd_no_tags(reader *r)
{
    if (!r->flexible)
        return 0;
    if (r->pos >= r->end || r->buf[r->pos] != 0)
        return -1;
    r->pos++;
    return 0;
}

/* A nullable string: 0 with *out a new reference (None for null), -1 malformed, -2 error. */
static int rd_string(reader *r, PyObject **out)
{
    int64_t n;
    if (rd_length(r, 0, &n) < 0)
        return -1;
    if (n < 0) {
        if (n != -1)
            return -1;
        *out = Py_NewRef(Py_None);
        return 0;
    }
    if (n > r->end - r->pos)
        return -1;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)r->buf + r->pos, n, "strict");
    if (text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return -2;
        PyErr_Clear();
        return -1;
    }
    r->pos += n;
    *out = text;
    return 0;
}

static PyObject *new_tuple_of(PyObject *cls, Py_ssize_t size)
{
    return ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, size);
}

/* One element of a named array (a topic and its partitions): a non-null name and a count;
 * `into[t]` becomes cls(name, a tuple of `*n` slots for the caller to fill, `*items`).
 * 0, -1 malformed, -2 error (a Python exception is set). */
static int rd_named_array(reader *r, PyObject *cls, PyObject *into, Py_ssize_t t,
                          PyObject **items, int64_t *n)
{
    PyObject *name = NULL;
    int status = rd_string(r, &name);
    if (status < 0)
        return status;
    if (name == Py_None || rd_count(r, n) < 0) {
        Py_DECREF(name);
        return -1;
    }
    *items = PyTuple_New((Py_ssize_t)*n);
    PyObject *entry = *items == NULL ? NULL : new_tuple_of(cls, 2);
    if (entry == NULL) {
        Py_DECREF(name);
        Py_XDECREF(*items);
        return -2;
    }
    PyTuple_SET_ITEM(entry, 0, name);
    PyTuple_SET_ITEM(entry, 1, *items);
    PyTuple_SET_ITEM(into, t, entry);
    return 0;
}

static int is_namedtuple_class(PyObject *cls)
{
    return PyType_Check(cls) && PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) &&
           ((PyTypeObject *)cls)->tp_basicsize == PyTuple_Type.tp_basicsize;
}

/* read_produce(view, offset, flexible, request_cls, topic_cls, partition_cls): request_cls(
 * transactional_id, acks, timeout_ms, topics), topic_cls(name, partitions),
 * partition_cls(index, records) with records as slices of `view` (a read-only memoryview of
 * the frame); None when not plainly well formed. */
static PyObject *read_produce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *view_obj, *request_cls, *topic_cls, *partition_cls;
    Py_ssize_t offset;
    int flexible;
    if (fast_args(args, nargs, "read_produce", "OnpOOO", &view_obj, &offset, &flexible, &request_cls,
                          &topic_cls, &partition_cls) < 0)
        return NULL;
    if (!PyMemoryView_Check(view_obj) || !is_namedtuple_class(request_cls) ||
        !is_namedtuple_class(topic_cls) || !is_namedtuple_class(partition_cls)) {
        PyErr_SetString(PyExc_TypeError, "a memoryview and three NamedTuple classes");
        return NULL;
    }
    Py_buffer *view = PyMemoryView_GET_BUFFER(view_obj);
    if (!PyBuffer_IsContiguous(view, 'C') || view->itemsize != 1 || offset < 0 ||
        offset > view->len) {
        PyErr_SetString(PyExc_ValueError, "a contiguous byte view, offset inside it");
        return NULL;
    }
    reader r = {(const unsigned char *)view->buf, offset, view->len, flexible};
    PyObject *txn_id = NULL, *topics = NULL, *result = NULL;
    int status = rd_string(&r, &txn_id);
    if (status < 0)
        goto fail;
    if (r.end - r.pos < 6)
        goto malformed;
    int16_t acks = be16(r.buf + r.pos);
    int32_t timeout_ms = be32(r.buf + r.pos + 2);
    r.pos += 6;
    int64_t topic_count;
    if (rd_count(&r, &topic_count) < 0)
        goto malformed;
    topics = PyTuple_New((Py_ssize_t)topic_count);
    if (topics == NULL)
        goto error;
    for (Py_ssize_t t = 0; t < topic_count; t++) {
        PyObject *partitions;
        int64_t partition_count;
        status = rd_named_array(&r, topic_cls, topics, t, &partitions, &partition_count);
        if (status < 0)
            goto fail;
        for (Py_ssize_t i = 0; i < partition_count; i++) {
            if (r.end - r.pos < 4)
                goto malformed;
            int32_t index = be32(r.buf + r.pos);
            r.pos += 4;
            int64_t n;
            if (rd_length(&r, 1, &n) < 0)
                goto malformed;
            PyObject *records;
            if (n < 0) {
                if (n != -1)
                    goto malformed;
                records = Py_NewRef(Py_None);
            } else {
                if (n > r.end - r.pos)
                    goto malformed;
                records = PySequence_GetSlice(view_obj, r.pos, r.pos + (Py_ssize_t)n);
                if (records == NULL)
                    goto error;
                r.pos += (Py_ssize_t)n;
            }
            PyObject *partition = new_tuple_of(partition_cls, 2);
            PyObject *index_obj = partition == NULL ? NULL : PyLong_FromLong(index);
            if (index_obj == NULL) {
                Py_XDECREF(partition);
                Py_DECREF(records);
                goto error;
            }
            PyTuple_SET_ITEM(partition, 0, index_obj);
            PyTuple_SET_ITEM(partition, 1, records);
            PyTuple_SET_ITEM(partitions, i, partition);
            if (rd_no_tags(&r) < 0)
                goto malformed;
        }
        if (rd_no_tags(&r) < 0)
            goto malformed;
    }
    if (rd_no_tags(&r) < 0)
        goto malformed;
    result = new_tuple_of(request_cls, 4);
    PyObject *acks_obj = result == NULL ? NULL : PyLong_FromLong(acks);
    PyObject *timeout_obj = acks_obj == NULL ? NULL : PyLong_FromLong(timeout_ms);
    if (timeout_obj == NULL) {
        Py_XDECREF(acks_obj);
        Py_CLEAR(result);
        goto error;
    }
    PyTuple_SET_ITEM(result, 0, txn_id);
    PyTuple_SET_ITEM(result, 1, acks_obj);
    PyTuple_SET_ITEM(result, 2, timeout_obj);
    PyTuple_SET_ITEM(result, 3, topics);
    return result;
fail:
    if (status == -2)
        goto error;
malformed:
    Py_XDECREF(txn_id);
    Py_XDECREF(topics);
    Py_RETURN_NONE;
error:
    Py_XDECREF(txn_id);
    Py_XDECREF(topics);
    return NULL;
}

/* read_fetch(view, offset, version, request_cls, topic_cls, partition_cls, forgotten_cls): a
 * Fetch request body (v4-v12) as NamedTuples with kio's field names, every field present
 * (kio's default where the version has none); None when not plainly well formed or when it
 * carries a tagged field (kio decides). Every consumer's and follower's Fetch is read here. */
static int rd_fixed(reader *r, int size, int64_t *out)
{
    if (r->end - r->pos < size)
        return -1;
    const unsigned char *p = r->buf + r->pos;
    *out = size == 8 ? be64(p) : size == 4 ? be32(p) : size == 2 ? be16(p) : (signed char)p[0];
    r->pos += size;
    return 0;
}

/* A NamedTuple of `n` ints from `values`; NULL on error. */
static PyObject *int_tuple(PyObject *cls, const int64_t *values, Py_ssize_t n)
{
    PyObject *out = new_tuple_of(cls, n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *read_fetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *view_obj, *request_cls, *topic_cls, *partition_cls, *forgotten_cls;
    Py_ssize_t offset;
    int version;
    if (fast_args(args, nargs, "read_fetch", "OniOOOO", &view_obj, &offset, &version, &request_cls,
                          &topic_cls, &partition_cls, &forgotten_cls) < 0)
        return NULL;
    if (!PyMemoryView_Check(view_obj) || !is_namedtuple_class(request_cls) ||
        !is_namedtuple_class(topic_cls) || !is_namedtuple_class(partition_cls) ||
        !is_namedtuple_class(forgotten_cls)) {
        PyErr_SetString(PyExc_TypeError, "a memoryview and four NamedTuple classes");
        return NULL;
    }
    Py_buffer *view = PyMemoryView_GET_BUFFER(view_obj);
    if (!PyBuffer_IsContiguous(view, 'C') || view->itemsize != 1 || offset < 0 ||
        offset > view->len) {
        PyErr_SetString(PyExc_ValueError, "a contiguous byte view, offset inside it");
        return NULL;
    }
    if (version < 4 || version > 12)
        Py_RETURN_NONE;
    reader r = {(const unsigned char *)view->buf, offset, view->len, version >= 12};
    int64_t head[8] = {-1, 0, 0, 2147483647, 0, 0, -1, 0};
    /* replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, epoch */
    PyObject *topics = NULL, *forgotten = NULL, *rack = NULL, *result = NULL;
    int status;
    if (rd_fixed(&r, 4, &head[0]) < 0 || rd_fixed(&r, 4, &head[1]) < 0 ||
        rd_fixed(&r, 4, &head[2]) < 0 || rd_fixed(&r, 4, &head[3]) < 0 ||
        rd_fixed(&r, 1, &head[4]) < 0)
        goto malformed;
    if (version >= 7 && (rd_fixed(&r, 4, &head[5]) < 0 || rd_fixed(&r, 4, &head[6]) < 0))
        goto malformed;
    int64_t topic_count;
    if (rd_count(&r, &topic_count) < 0)
        goto malformed;
    topics = PyTuple_New((Py_ssize_t)topic_count);
    if (topics == NULL)
        goto error;
    for (Py_ssize_t t = 0; t < topic_count; t++) {
        PyObject *partitions;
        int64_t partition_count;
        status = rd_named_array(&r, topic_cls, topics, t, &partitions, &partition_count);
        if (status == -2)
            goto error;
        if (status < 0)
            goto malformed;
        for (Py_ssize_t i = 0; i < partition_count; i++) {
            /* partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
             * log_start_offset, partition_max_bytes */
            int64_t f[6] = {0, -1, 0, -1, -1, 0};
            if (rd_fixed(&r, 4, &f[0]) < 0 ||
                (version >= 9 && rd_fixed(&r, 4, &f[1]) < 0) || rd_fixed(&r, 8, &f[2]) < 0 ||
                (version >= 12 && rd_fixed(&r, 4, &f[3]) < 0) ||
                (version >= 5 && rd_fixed(&r, 8, &f[4]) < 0) || rd_fixed(&r, 4, &f[5]) < 0 ||
                rd_no_tags(&r) < 0)
                goto malformed;
            PyObject *partition = int_tuple(partition_cls, f, 6);
            if (partition == NULL)
                goto error;
            PyTuple_SET_ITEM(partitions, i, partition);
        }
        if (rd_no_tags(&r) < 0)
            goto malformed;
    }
    int64_t forgotten_count = 0;
    if (version >= 7 && rd_count(&r, &forgotten_count) < 0)
        goto malformed;
    forgotten = PyTuple_New((Py_ssize_t)forgotten_count);
    if (forgotten == NULL)
        goto error;
    for (Py_ssize_t t = 0; t < forgotten_count; t++) {
        PyObject *indexes;
        int64_t n;
        status = rd_named_array(&r, forgotten_cls, forgotten, t, &indexes, &n);
        if (status == -2)
            goto error;
        if (status < 0)
            goto malformed;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t index;
            if (rd_fixed(&r, 4, &index) < 0)
                goto malformed;
            PyObject *v = PyLong_FromLongLong(index);
            if (v == NULL)
                goto error;
            PyTuple_SET_ITEM(indexes, i, v);
        }
        if (rd_no_tags(&r) < 0)
            goto malformed;
    }
    if (version >= 11) {
        if ((status = rd_string(&r, &rack)) < 0) {
            if (status == -2)
                goto error;
            goto malformed;
        }
        if (rack == Py_None)
            goto malformed;
    } else {
        rack = PyUnicode_FromStringAndSize("", 0);
        if (rack == NULL)
            goto error;
    }
    if (rd_no_tags(&r) < 0)
        goto malformed;
    /* cluster_id, replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id,
     * session_epoch, topics, forgotten_topics_data, rack_id */
    result = new_tuple_of(request_cls, 11);
    if (result == NULL)
        goto error;
    PyTuple_SET_ITEM(result, 0, Py_NewRef(Py_None));
    for (int i = 0; i < 7; i++) {
        PyObject *v = PyLong_FromLongLong(head[i]);
        if (v == NULL) {
            Py_CLEAR(result);
            goto error;
        }
        PyTuple_SET_ITEM(result, 1 + i, v);
    }
    PyTuple_SET_ITEM(result, 8, topics);
    PyTuple_SET_ITEM(result, 9, forgotten);
    PyTuple_SET_ITEM(result, 10, rack);
    return result;
malformed:
    Py_XDECREF(topics);
    Py_XDECREF(forgotten);
    Py_XDECREF(rack);
    Py_RETURN_NONE;
error:
    Py_XDECREF(topics);
    Py_XDECREF(forgotten);
    Py_XDECREF(rack);
    return NULL;
}

/* -- read_fetch_response: a FetchResponse body (v4-v12), the replica fetcher's answer, as
 * oncelog.protocol.fast_fetch's `_Reader` reads it (the reference and the fallback): records
 * as slices of the frame's view, None for anything that is not plainly well formed. */

/* 0 known, 1 not, -1 error. */
static int known_error(PyObject *known, int64_t code)
{
    if (code == 0)
        return 0;
    PyObject *value = PyLong_FromLongLong(code);
    if (value == NULL)
        return -1;
    int found = PySet_Contains(known, value);
    Py_DECREF(value);
    return found < 0 ? -1 : !found;
}

/* A slice of the view as a new reference, NULL on error. */
static PyObject *view_slice(PyObject *view_obj, Py_ssize_t from, Py_ssize_t to)
{
    return PySequence_GetSlice(view_obj, from, to);
}

/* The aborted transactions: 0 with *out a new reference (None for null), -1 malformed,
 * -2 error. */
static int rd_aborted(reader *r, PyObject *aborted_cls, PyObject **out)
{
    int64_t n;
    if (r->flexible) {
        if (rd_uvarint(r, &n) < 0)
            return -1;
        n -= 1;
    } else if (rd_fixed(r, 4, &n) < 0) {
        return -1;
    }
    if (n < -1)
        return -1;
    if (n < 0) {
        *out = Py_NewRef(Py_None);
        return 0;
    }
    if (n * 16 > r->end - r->pos)
        return -1;
    PyObject *txns = PyTuple_New((Py_ssize_t)n);
    if (txns == NULL)
        return -2;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t f[2];
        if (rd_fixed(r, 8, &f[0]) < 0 || rd_fixed(r, 8, &f[1]) < 0 || rd_no_tags(r) < 0) {
            Py_DECREF(txns);
            return -1;
        }
        PyObject *txn = int_tuple(aborted_cls, f, 2);
        if (txn == NULL) {
            Py_DECREF(txns);
            return -2;
        }
        PyTuple_SET_ITEM(txns, i, txn);
    }
    *out = txns;
    return 0;
}

/* One partition: 0 with *out a new reference, -1 malformed, -2 error. */
static int rd_fetch_partition(reader *r, int version, PyObject *view_obj, PyObject *cls,
                              PyObject *aborted_cls, PyObject *known, PyObject **out)
{
    /* partition_index, error_code, high_watermark, last_stable_offset, log_start_offset */
    int64_t f[5] = {0, 0, 0, 0, -1};
    int64_t preferred = -1, n;
    if (rd_fixed(r, 4, &f[0]) < 0 || rd_fixed(r, 2, &f[1]) < 0 || rd_fixed(r, 8, &f[2]) < 0 ||
        rd_fixed(r, 8, &f[3]) < 0 || (version >= 5 && rd_fixed(r, 8, &f[4]) < 0))
        return -1;
    int unknown = known_error(known, f[1]);
    if (unknown)
        return unknown < 0 ? -2 : -1;
    PyObject *aborted = NULL, *records = NULL;
    int status = rd_aborted(r, aborted_cls, &aborted);
    if (status < 0)
        return status;
    if (version >= 11 && rd_fixed(r, 4, &preferred) < 0)
        goto malformed;
    if (r->flexible) {
        if (rd_uvarint(r, &n) < 0)
            goto malformed;
        n -= 1;
    } else if (rd_fixed(r, 4, &n) < 0) {
        goto malformed;
    }
    if (n < -1 || n > r->end - r->pos)
        goto malformed;
    if (n < 0) {
        records = Py_NewRef(Py_None);
    } else {
        records = view_slice(view_obj, r->pos, r->pos + n);
        if (records == NULL)
            goto error;
        r->pos += n;
    }
    if (rd_no_tags(r) < 0)
        goto malformed;
    PyObject *partition = new_tuple_of(cls, 8);
    if (partition == NULL)
        goto error;
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyLong_FromLongLong(f[i]);
        if (v == NULL) {
            Py_DECREF(partition);
            goto error;
        }
        PyTuple_SET_ITEM(partition, i, v);
    }
    PyObject *v = PyLong_FromLongLong(preferred);
    if (v == NULL) {
        Py_DECREF(partition);
        goto error;
    }
    PyTuple_SET_ITEM(partition, 5, aborted);
    PyTuple_SET_ITEM(partition, 6, v);
    PyTuple_SET_ITEM(partition, 7, records);
    *out = partition;
    return 0;
malformed:
    Py_XDECREF(aborted);
    Py_XDECREF(records);
    return -1;
error:
    Py_XDECREF(aborted);
    Py_XDECREF(records);
    return -2;
}

/* read_fetch_response(view, offset, version, response_cls, topic_cls, partition_cls,
 * aborted_cls, known_errors): response_cls(throttle_time_ms, error_code, session_id,
 * responses) or None. */
static PyObject *read_fetch_response(PyObject *self, PyObject *args)
{
    PyObject *view_obj, *response_cls, *topic_cls, *partition_cls, *aborted_cls, *known;
    Py_ssize_t offset;
    int version;
    if (!PyArg_ParseTuple(args, "OniOOOOO!", &view_obj, &offset, &version, &response_cls,
                          &topic_cls, &partition_cls, &aborted_cls, &PyFrozenSet_Type, &known))
        return NULL;
    if (!PyMemoryView_Check(view_obj) || !is_namedtuple_class(response_cls) ||
        !is_namedtuple_class(topic_cls) || !is_namedtuple_class(partition_cls) ||
        !is_namedtuple_class(aborted_cls)) {
        PyErr_SetString(PyExc_TypeError, "a memoryview and four NamedTuple classes");
        return NULL;
    }
    Py_buffer *view = PyMemoryView_GET_BUFFER(view_obj);
    if (!PyBuffer_IsContiguous(view, 'C') || view->itemsize != 1 || offset < 0 ||
        offset > view->len) {
        PyErr_SetString(PyExc_ValueError, "a contiguous byte view, offset inside it");
        return NULL;
    }
    if (version < 4 || version > 12)
        Py_RETURN_NONE;
    reader r = {(const unsigned char *)view->buf, offset, view->len, version >= 12};
    int64_t head[4] = {0, 0, 0, 0}; /* throttle_time_ms, error_code, session_id, (slot) */
    PyObject *topics = NULL, *result = NULL;
    int status;
    if (rd_fixed(&r, 4, &head[0]) < 0)
        goto malformed;
    if (version >= 7) {
        if (rd_fixed(&r, 2, &head[1]) < 0 || rd_fixed(&r, 4, &head[2]) < 0)
            goto malformed;
        int unknown = known_error(known, head[1]);
        if (unknown < 0)
            goto error;
        if (unknown)
            goto malformed;
    }
    int64_t topic_count;
    if (rd_count(&r, &topic_count) < 0)
        goto malformed;
    topics = PyTuple_New((Py_ssize_t)topic_count);
    if (topics == NULL)
        goto error;
    for (Py_ssize_t t = 0; t < topic_count; t++) {
        PyObject *partitions;
        int64_t partition_count;
        status = rd_named_array(&r, topic_cls, topics, t, &partitions, &partition_count);
        if (status == -2)
            goto error;
        if (status < 0)
            goto malformed;
        for (Py_ssize_t i = 0; i < partition_count; i++) {
            PyObject *partition;
            status = rd_fetch_partition(&r, version, view_obj, partition_cls, aborted_cls, known,
                                        &partition);
            if (status == -2)
                goto error;
            if (status < 0)
                goto malformed;
            PyTuple_SET_ITEM(partitions, i, partition);
        }
        if (rd_no_tags(&r) < 0)
            goto malformed;
    }
    if (rd_no_tags(&r) < 0)
        goto malformed;
    result = int_tuple(response_cls, head, 4);
    if (result == NULL)
        goto error;
    Py_DECREF(PyTuple_GET_ITEM(result, 3));
    PyTuple_SET_ITEM(result, 3, topics);
    return result;
malformed:
    Py_XDECREF(topics);
    Py_RETURN_NONE;
error:
    Py_XDECREF(topics);
    return NULL;
}

/* -- encode_produce_response: a whole Produce response frame (v3-v11) from the handler's
 * answer mapping, as oncelog.protocol.fast_responses writes it (that Python encoder stays
 * the reference and the fallback: anything unexpected here returns None and it decides). */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} wbuf;

static int wb_reserve(wbuf *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int wb_put(wbuf *b, const void *src, Py_ssize_t n)
{
    if (wb_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static int wb_be(wbuf *b, uint64_t v, int size)
{
    unsigned char out[8];
    for (int i = size - 1; i >= 0; i--) {
        out[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
    return wb_put(b, out, size);
}

static int wb_uvarint(wbuf *b, uint64_t v)
{
    unsigned char out[10];
    int n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return wb_put(b, out, n);
}

static int wb_count(wbuf *b, Py_ssize_t n, int flexible)
{
    return flexible ? wb_uvarint(b, (uint64_t)n + 1) : wb_be(b, (uint64_t)(uint32_t)n, 4);
}

/* A nullable string; 1 when `value` is neither str nor None (the caller falls back). */
static int wb_string(wbuf *b, PyObject *value, int flexible)
{
    if (value == Py_None)
        return flexible ? wb_uvarint(b, 0) : wb_be(b, 0xFFFF, 2);
    if (!PyUnicode_Check(value))
        return 1;
    Py_ssize_t n;
    const char *raw = PyUnicode_AsUTF8AndSize(value, &n);
    if (raw == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    if (n > 0x7FFF)
        return 1;
    if ((flexible ? wb_uvarint(b, (uint64_t)n + 1) : wb_be(b, (uint64_t)n, 2)) < 0)
        return -1;
    return wb_put(b, raw, n);
}

/* An int field within [lo, hi]; 1 when missing, not an int or out of range. */
static int get_int(PyObject *map, PyObject *key, long long fallback, int required, long long lo,
                   long long hi, long long *out)
{
    PyObject *value = PyDict_GetItemWithError(map, key);
    if (value == NULL) {
        if (PyErr_Occurred())
            return -1;
        if (required)
            return 1;
        *out = fallback;
        return 0;
    }
    if (!PyLong_Check(value))
        return 1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < lo || v > hi)
        return 1;
    *out = v;
    return 0;
}

static int keys_within(PyObject *map, PyObject *allowed)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(map, &pos, &key, &value)) {
        int known = PySet_Contains(allowed, key);
        if (known <= 0)
            return known < 0 ? -1 : 1;
    }
    return 0;
}

static PyObject *k_responses, *k_throttle_time, *k_name, *k_partition_responses, *k_index,
    *k_error_code, *k_base_offset, *k_log_append_time, *k_log_start_offset, *k_record_errors,
    *k_error_message, *k_batch_index, *k_batch_index_error_message, *k_session_id, *k_topic,
    *k_partitions, *k_partition_index, *k_high_watermark, *k_last_stable_offset,
    *k_aborted_transactions, *k_producer_id, *k_first_offset, *k_preferred_read_replica,
    *k_records;

#define I16_MIN (-32768LL)
#define I16_MAX 32767LL
#define I32_MIN (-2147483648LL)
#define I32_MAX 2147483647LL
#define I64_MIN (-9223372036854775807LL - 1)
#define I64_MAX 9223372036854775807LL

/* The array of topics of an answer (`key` of `answer`): its count written; 0 with *out the
 * list or tuple, 1 fall back, -1 error. */
static int wr_topics(wbuf *b, PyObject *answer, PyObject *key, int flexible, PyObject **out)
{
    PyObject *responses = PyDict_GetItemWithError(answer, key);
    if (responses == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (!PyList_Check(responses) && !PyTuple_Check(responses))
        return 1;
    if (wb_count(b, PySequence_Fast_GET_SIZE(responses), flexible) < 0)
        return -1;
    *out = responses;
    return 0;
}

/* One topic of an answer: its name and partition count written; 0 with *parts the list or
 * tuple of partitions, 1 fall back, -1 error. */
static int wr_topic(wbuf *b, PyObject *topic, PyObject *name_key, PyObject *parts_key,
                    int flexible, PyObject **parts)
{
    if (!PyDict_Check(topic))
        return 1;
    PyObject *name = PyDict_GetItemWithError(topic, name_key);
    PyObject *found = name == NULL ? NULL : PyDict_GetItemWithError(topic, parts_key);
    if (found == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (name == Py_None || (!PyList_Check(found) && !PyTuple_Check(found)))
        return 1;
    int rc = wb_string(b, name, flexible);
    if (rc != 0)
        return rc;
    if (wb_count(b, PySequence_Fast_GET_SIZE(found), flexible) < 0)
        return -1;
    *parts = found;
    return 0;
}

/* 0 written, 1 fall back, -1 error. */
static int write_produce(wbuf *b, int version, int flexible, PyObject *answer,
                         PyObject *answer_keys, PyObject *partition_keys)
{
    int rc = keys_within(answer, answer_keys);
    if (rc)
        return rc;
    PyObject *responses, *parts;
    if ((rc = wr_topics(b, answer, k_responses, flexible, &responses)) != 0)
        return rc;
    for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(responses); t++) {
        PyObject *topic = PySequence_Fast_GET_ITEM(responses, t);
        if ((rc = wr_topic(b, topic, k_name, k_partition_responses, flexible, &parts)) != 0)
            return rc;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(parts);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *p = PySequence_Fast_GET_ITEM(parts, i);
            if (!PyDict_Check(p))
                return 1;
            if ((rc = keys_within(p, partition_keys)) != 0)
                return rc;
            long long index, code, base, append_time, start;
            if ((rc = get_int(p, k_index, 0, 1, I32_MIN, I32_MAX, &index)) != 0 ||
                (rc = get_int(p, k_error_code, 0, 1, I16_MIN, I16_MAX, &code)) != 0 ||
                (rc = get_int(p, k_base_offset, 0, 1, I64_MIN, I64_MAX, &base)) != 0 ||
                (rc = get_int(p, k_log_append_time, -1, 0, I64_MIN, I64_MAX, &append_time)) != 0 ||
                (rc = get_int(p, k_log_start_offset, -1, 0, I64_MIN, I64_MAX, &start)) != 0)
                return rc;
            if (wb_be(b, (uint64_t)index, 4) < 0 || wb_be(b, (uint64_t)code, 2) < 0 ||
                wb_be(b, (uint64_t)base, 8) < 0 || wb_be(b, (uint64_t)append_time, 8) < 0)
                return -1;
            if (version >= 5 && wb_be(b, (uint64_t)start, 8) < 0)
                return -1;
            if (version >= 8) {
                PyObject *errors = PyDict_GetItemWithError(p, k_record_errors);
                if (errors == NULL && PyErr_Occurred())
                    return -1;
                Py_ssize_t e_count = 0;
                if (errors != NULL && PyObject_IsTrue(errors)) {
                    if (!PyList_Check(errors) && !PyTuple_Check(errors))
                        return 1;
                    e_count = PySequence_Fast_GET_SIZE(errors);
                }
                if (wb_count(b, e_count, flexible) < 0)
                    return -1;
                for (Py_ssize_t e = 0; e < e_count; e++) {
                    PyObject *err = PySequence_Fast_GET_ITEM(errors, e);
                    if (!PyDict_Check(err))
                        return 1;
                    long long batch_index;
                    if ((rc = get_int(err, k_batch_index, 0, 1, I32_MIN, I32_MAX, &batch_index)))
                        return rc;
                    PyObject *why = PyDict_GetItemWithError(err, k_batch_index_error_message);
                    if (why == NULL && PyErr_Occurred())
                        return -1;
                    if (wb_be(b, (uint64_t)batch_index, 4) < 0)
                        return -1;
                    if ((rc = wb_string(b, why == NULL ? Py_None : why, flexible)) != 0)
                        return rc;
                    if (flexible && wb_uvarint(b, 0) < 0)
                        return -1;
                }
                PyObject *message = PyDict_GetItemWithError(p, k_error_message);
                if (message == NULL && PyErr_Occurred())
                    return -1;
                if ((rc = wb_string(b, message == NULL ? Py_None : message, flexible)) != 0)
                    return rc;
            }
            if (flexible && wb_uvarint(b, 0) < 0)
                return -1;
        }
        if (flexible && wb_uvarint(b, 0) < 0)
            return -1;
    }
    long long throttle;
    if ((rc = get_int(answer, k_throttle_time, 0, 0, I32_MIN, I32_MAX, &throttle)) != 0)
        return rc;
    if (wb_be(b, (uint64_t)throttle, 4) < 0)
        return -1;
    if (flexible && wb_uvarint(b, 0) < 0)
        return -1;
    return 0;
}

/* encode_produce_response(version, correlation_id, answer, answer_keys, partition_keys): the
 * framed response (length, header v0/v1, body) as bytes, or None. */
static PyObject *encode_produce_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int version;
    long long correlation_id;
    PyObject *answer, *answer_keys, *partition_keys;
    if (fast_args(args, nargs, "encode_produce_response", "iLOO!O!", &version, &correlation_id, &answer, &PyFrozenSet_Type,
                          &answer_keys, &PyFrozenSet_Type, &partition_keys) < 0)
        return NULL;
    if (version < 3 || version > 11 || !PyDict_Check(answer) || correlation_id < I32_MIN ||
        correlation_id > I32_MAX)
        Py_RETURN_NONE;
    int flexible = version >= 9;
    wbuf b = {NULL, 0, 0};
    PyObject *out = NULL;
    /* length (patched below), correlation id, the flexible header's empty tags */
    if (wb_be(&b, 0, 4) < 0 || wb_be(&b, (uint64_t)correlation_id, 4) < 0 ||
        (flexible && wb_uvarint(&b, 0) < 0))
        goto done;
    int rc = write_produce(&b, version, flexible, answer, answer_keys, partition_keys);
    if (rc < 0)
        goto done;
    if (rc > 0 || b.len - 4 > I32_MAX) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    uint32_t size = (uint32_t)(b.len - 4);
    for (int i = 3; i >= 0; i--) {
        b.data[i] = (char)(size & 0xFF);
        size >>= 8;
    }
    out = PyBytes_FromStringAndSize(b.data, b.len);
done:
    PyMem_Free(b.data);
    return out;
}

/* -- encode_fetch_response: a whole Fetch response (v4-v12) from the handler's answer
 * mapping, as oncelog.protocol.fast_responses writes it (the reference and the fallback).
 * Small fields go into one buffer; a partition's records of FETCH_INLINE_MAX bytes or more,
 * or a file region, stay a piece of their own (sent as they are, or with sendfile). */

#define FETCH_INLINE_MAX 1024

typedef struct {
    wbuf b;
    PyObject *pieces;  /* list: (split position in b as int, piece object) */
    Py_ssize_t outside; /* bytes in those pieces */
} fetch_out;

/* 0 written, 1 fall back, -1 error. */
static int write_fetch_records(fetch_out *o, PyObject *records, PyObject *region_type,
                               int flexible)
{
    wbuf *b = &o->b;
    if (records == Py_None)
        return flexible ? wb_uvarint(b, 0) : wb_be(b, 0xFFFFFFFFu, 4);
    Py_ssize_t n;
    int inline_copy = 0;
    Py_buffer view;
    if (PyObject_TypeCheck(records, (PyTypeObject *)region_type)) {
        n = PyObject_Length(records);
        if (n < 0)
            return -1;
    } else if (PyBytes_Check(records) || PyByteArray_Check(records) || PyMemoryView_Check(records)) {
        if (PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear(); /* not one contiguous run of bytes: Python's to judge */
            return 1;
        }
        n = view.len;
        inline_copy = n < FETCH_INLINE_MAX;
        if (inline_copy) {
            int rc = (flexible ? wb_uvarint(b, (uint64_t)n + 1) : wb_be(b, (uint64_t)n, 4)) < 0 ||
                     wb_put(b, view.buf, n) < 0;
            PyBuffer_Release(&view);
            return rc ? -1 : 0;
        }
        PyBuffer_Release(&view);
    } else {
        return 1;
    }
    if (n > I32_MAX - 1)
        return 1;
    if ((flexible ? wb_uvarint(b, (uint64_t)n + 1) : wb_be(b, (uint64_t)n, 4)) < 0)
        return -1;
    PyObject *entry = Py_BuildValue("(nO)", b->len, records);
    if (entry == NULL)
        return -1;
    int rc = PyList_Append(o->pieces, entry);
    Py_DECREF(entry);
    if (rc < 0)
        return -1;
    o->outside += n;
    return 0;
}

static int write_fetch(fetch_out *o, int version, int flexible, PyObject *answer,
                       PyObject *answer_keys, PyObject *partition_keys, PyObject *region_type)
{
    wbuf *b = &o->b;
    int rc = keys_within(answer, answer_keys);
    if (rc)
        return rc;
    long long throttle, code, session;
    if ((rc = get_int(answer, k_throttle_time, 0, 0, I32_MIN, I32_MAX, &throttle)) != 0)
        return rc;
    if (wb_be(b, (uint64_t)throttle, 4) < 0)
        return -1;
    if (version >= 7) {
        if ((rc = get_int(answer, k_error_code, 0, 1, I16_MIN, I16_MAX, &code)) != 0 ||
            (rc = get_int(answer, k_session_id, 0, 0, I32_MIN, I32_MAX, &session)) != 0)
            return rc;
        if (wb_be(b, (uint64_t)code, 2) < 0 || wb_be(b, (uint64_t)session, 4) < 0)
            return -1;
    }
    PyObject *responses, *parts;
    if ((rc = wr_topics(b, answer, k_responses, flexible, &responses)) != 0)
        return rc;
    for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(responses); t++) {
        PyObject *topic = PySequence_Fast_GET_ITEM(responses, t);
        if ((rc = wr_topic(b, topic, k_topic, k_partitions, flexible, &parts)) != 0)
            return rc;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(parts);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *p = PySequence_Fast_GET_ITEM(parts, i);
            if (!PyDict_Check(p))
                return 1;
            if ((rc = keys_within(p, partition_keys)) != 0)
                return rc;
            long long index, pcode, hw, lso, start, preferred;
            if ((rc = get_int(p, k_partition_index, 0, 1, I32_MIN, I32_MAX, &index)) != 0 ||
                (rc = get_int(p, k_error_code, 0, 1, I16_MIN, I16_MAX, &pcode)) != 0 ||
                (rc = get_int(p, k_high_watermark, 0, 1, I64_MIN, I64_MAX, &hw)) != 0 ||
                (rc = get_int(p, k_last_stable_offset, -1, 0, I64_MIN, I64_MAX, &lso)) != 0 ||
                (rc = get_int(p, k_log_start_offset, -1, 0, I64_MIN, I64_MAX, &start)) != 0 ||
                (rc = get_int(p, k_preferred_read_replica, -1, 0, I32_MIN, I32_MAX,
                              &preferred)) != 0)
                return rc;
            if (wb_be(b, (uint64_t)index, 4) < 0 || wb_be(b, (uint64_t)pcode, 2) < 0 ||
                wb_be(b, (uint64_t)hw, 8) < 0 || wb_be(b, (uint64_t)lso, 8) < 0)
                return -1;
            if (version >= 5 && wb_be(b, (uint64_t)start, 8) < 0)
                return -1;
            PyObject *aborted = PyDict_GetItemWithError(p, k_aborted_transactions);
            if (aborted == NULL && PyErr_Occurred())
                return -1;
            if (aborted == NULL || aborted == Py_None) {
                if ((flexible ? wb_uvarint(b, 0) : wb_be(b, 0xFFFFFFFFu, 4)) < 0)
                    return -1;
            } else {
                if (!PyList_Check(aborted) && !PyTuple_Check(aborted))
                    return 1;
                Py_ssize_t a_count = PySequence_Fast_GET_SIZE(aborted);
                if (wb_count(b, a_count, flexible) < 0)
                    return -1;
                for (Py_ssize_t a = 0; a < a_count; a++) {
                    PyObject *txn = PySequence_Fast_GET_ITEM(aborted, a);
                    if (!PyDict_Check(txn) || PyDict_GET_SIZE(txn) != 2)
                        return 1;
                    long long pid, first;
                    if ((rc = get_int(txn, k_producer_id, 0, 1, I64_MIN, I64_MAX, &pid)) != 0 ||
                        (rc = get_int(txn, k_first_offset, 0, 1, I64_MIN, I64_MAX, &first)) != 0)
                        return rc;
                    if (wb_be(b, (uint64_t)pid, 8) < 0 || wb_be(b, (uint64_t)first, 8) < 0 ||
                        (flexible && wb_uvarint(b, 0) < 0))
                        return -1;
                }
            }
            if (version >= 11 && wb_be(b, (uint64_t)preferred, 4) < 0)
                return -1;
            PyObject *records = PyDict_GetItemWithError(p, k_records);
            if (records == NULL && PyErr_Occurred())
                return -1;
            if ((rc = write_fetch_records(o, records == NULL ? Py_None : records, region_type,
                                          flexible)) != 0)
                return rc;
            if (flexible && wb_uvarint(b, 0) < 0)
                return -1;
        }
        if (flexible && wb_uvarint(b, 0) < 0)
            return -1;
    }
    if (flexible && wb_uvarint(b, 0) < 0)
        return -1;
    return 0;
}

/* The list of pieces: the buffer cut at each outside piece, empty cuts left out. */
static PyObject *fetch_pieces(fetch_out *o)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t from = 0;
    Py_ssize_t count = PyList_GET_SIZE(o->pieces);
    for (Py_ssize_t i = 0; i <= count; i++) {
        Py_ssize_t to = o->b.len;
        PyObject *piece = NULL;
        if (i < count) {
            PyObject *entry = PyList_GET_ITEM(o->pieces, i);
            to = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0));
            piece = PyTuple_GET_ITEM(entry, 1);
        }
        if (to > from) {
            PyObject *chunk = PyBytes_FromStringAndSize(o->b.data + from, to - from);
            if (chunk == NULL || PyList_Append(out, chunk) < 0) {
                Py_XDECREF(chunk);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(chunk);
        }
        if (piece != NULL && PyList_Append(out, piece) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        from = to;
    }
    return out;
}

/* encode_fetch_response(version, correlation_id, answer, answer_keys, partition_keys,
 * region_type): the framed response (length, header, body) as a list of pieces, or None. */
static PyObject *encode_fetch_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int version;
    long long correlation_id;
    PyObject *answer, *answer_keys, *partition_keys, *region_type;
    if (fast_args(args, nargs, "encode_fetch_response", "iLOO!O!O!", &version, &correlation_id, &answer,
                          &PyFrozenSet_Type, &answer_keys, &PyFrozenSet_Type, &partition_keys,
                          &PyType_Type, &region_type) < 0)
        return NULL;
    if (version < 4 || version > 12 || !PyDict_Check(answer) || correlation_id < I32_MIN ||
        correlation_id > I32_MAX)
        Py_RETURN_NONE;
    int flexible = version >= 12;
    fetch_out o = {{NULL, 0, 0}, PyList_New(0), 0};
    if (o.pieces == NULL)
        return NULL;
    PyObject *out = NULL;
    if (wb_be(&o.b, 0, 4) < 0 || wb_be(&o.b, (uint64_t)correlation_id, 4) < 0 ||
        (flexible && wb_uvarint(&o.b, 0) < 0))
        goto done;
    int rc = write_fetch(&o, version, flexible, answer, answer_keys, partition_keys, region_type);
    if (rc < 0)
        goto done;
    Py_ssize_t total = o.b.len - 4 + o.outside;
    if (rc > 0 || total > I32_MAX) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    uint32_t size = (uint32_t)total;
    for (int i = 3; i >= 0; i--) {
        o.b.data[i] = (char)(size & 0xFF);
        size >>= 8;
    }
    out = fetch_pieces(&o);
done:
    PyMem_Free(o.b.data);
    Py_DECREF(o.pieces);
    return out;
}

/* Receive buffers. A frame's bytes are read before anything looks at them, so zeroing a
 * fresh buffer (bytearray(n) does) is a memset of the whole frame for nothing. */

static PyObject *new_buffer(PyObject *self, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative buffer size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

static PyObject *grow_buffer(PyObject *self, PyObject *args)
{
    PyObject *buf;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n", &PyByteArray_Type, &buf, &n))
        return NULL;
    if (n < PyByteArray_GET_SIZE(buf)) {
        PyErr_SetString(PyExc_ValueError, "grow_buffer cannot shrink");
        return NULL;
    }
    if (PyByteArray_Resize(buf, n) < 0) /* BufferError while a view of it is alive */
        return NULL;
    Py_RETURN_NONE;
}

/* fallocate(FALLOC_FL_KEEP_SIZE): allocate blocks past a segment's end without changing its
 * size, so the writes that fill them skip ext4's per-block delayed allocation (a third of
 * the kernel's cost of a large write on ext4). True when reserved; False where the file system
 * cannot (or has no space): the write then allocates as usual and reports its own errors. */
static PyObject *reserve_blocks(PyObject *self, PyObject *args)
{
    int fd;
    long long offset, length;
    if (!PyArg_ParseTuple(args, "iLL", &fd, &offset, &length))
        return NULL;
    if (offset < 0 || length <= 0) {
        PyErr_SetString(PyExc_ValueError, "reserve_blocks needs offset >= 0 and length > 0");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
    Py_END_ALLOW_THREADS
    if (rc == 0)
        Py_RETURN_TRUE;
    if (errno == EBADF) /* a closed descriptor is a bug in the caller, not a file system's limit */
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_FALSE;
}

static int intern_keys(void)
{
    struct { PyObject **slot; const char *text; } keys[] = {
        {&k_responses, "responses"}, {&k_throttle_time, "throttle_time"}, {&k_name, "name"},
        {&k_partition_responses, "partition_responses"}, {&k_index, "index"},
        {&k_error_code, "error_code"}, {&k_base_offset, "base_offset"},
        {&k_log_append_time, "log_append_time"}, {&k_log_start_offset, "log_start_offset"},
        {&k_record_errors, "record_errors"}, {&k_error_message, "error_message"},
        {&k_batch_index, "batch_index"},
        {&k_batch_index_error_message, "batch_index_error_message"},
        {&k_session_id, "session_id"}, {&k_topic, "topic"}, {&k_partitions, "partitions"},
        {&k_partition_index, "partition_index"}, {&k_high_watermark, "high_watermark"},
        {&k_last_stable_offset, "last_stable_offset"},
        {&k_aborted_transactions, "aborted_transactions"}, {&k_producer_id, "producer_id"},
        {&k_first_offset, "first_offset"}, {&k_preferred_read_replica, "preferred_read_replica"},
        {&k_records, "records"},
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        *keys[i].slot = PyUnicode_InternFromString(keys[i].text);
        if (*keys[i].slot == NULL)
            return -1;
    }
    return 0;
}

/* == Arrow columns of a fetched batch's records, for the Spark source ==========================
 * append_records(body, count, base_offset, base_timestamp, append_time, lo, hi, cols,
 * with_headers) walks the records of one decompressed batch body and appends those with
 * lo <= offset < hi to 16 bytearrays laid out as Arrow buffers (little-endian):
 *   0 key validity bitmap, 1 key offsets int32, 2 key data,
 *   3 value validity bitmap, 4 value offsets int32, 5 value data,
 *   6 offset int64, 7 timestamp int64 (microseconds), 8 timestampType int32,
 *   9 headers validity bitmap, 10 headers list offsets int32,
 *   11 header key offsets int32, 12 header key data,
 *   13 header value validity bitmap, 14 header value offsets int32, 15 header value data.
 * The offsets buffers start as one int32 0 (the caller's); the row count is len(cols[6]) / 8
 * and the header count len(cols[11]) / 4 - 1. A record without headers has a null headers
 * list. append_time >= 0 (LogAppendTime) stamps every record with it (timestampType 1).
 * Returns the number of rows appended; ValueError for records overrunning the body.
 * oncelog.protocol.records.columns.append_records_python is the reference. */

#define AR_COLS 16

static int ar_reserve(PyObject *ba, Py_ssize_t more, unsigned char **at)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(ba);
    if (PyByteArray_Resize(ba, size + more) < 0)
        return -1;
    *at = (unsigned char *)PyByteArray_AS_STRING(ba) + size;
    return 0;
}

/* Give back what a reservation did not use (bytearray keeps its allocation). */
static int ar_trim(PyObject *ba, Py_ssize_t unused)
{
    return unused ? PyByteArray_Resize(ba, PyByteArray_GET_SIZE(ba) - unused) : 0;
}

static void ar_bit(unsigned char *bitmap, Py_ssize_t i, int on)
{
    if (on)
        bitmap[i >> 3] |= (unsigned char)(1u << (i & 7));
    else
        bitmap[i >> 3] &= (unsigned char)~(1u << (i & 7));
}

static void ar_i32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }
static void ar_i64(unsigned char *p, int64_t v) { memcpy(p, &v, 8); }

static int32_t ar_last_i32(PyObject *ba)
{
    int32_t v;
    memcpy(&v, PyByteArray_AS_STRING(ba) + PyByteArray_GET_SIZE(ba) - 4, 4);
    return v;
}

/* A growable bitmap column: bytes for bits [0, n + more). */
static int ar_reserve_bits(PyObject *ba, Py_ssize_t n, Py_ssize_t more)
{
    Py_ssize_t want = (n + more + 7) / 8;
    Py_ssize_t size = PyByteArray_GET_SIZE(ba);
    if (want > size) {
        if (PyByteArray_Resize(ba, want) < 0)
            return -1;
        memset(PyByteArray_AS_STRING(ba) + size, 0, (size_t)(want - size));
    }
    return 0;
}

typedef struct {
    const unsigned char *buf;
    Py_ssize_t pos, end;
} ar_cursor;

static int ar_blob(ar_cursor *c, const unsigned char **data, int64_t *len)
{
    if (read_varint(c->buf, &c->pos, c->end, len) < 0)
        return -1;
    if (*len < 0) {
        *len = -1;
        *data = NULL;
        return 0;
    }
    if (*len > c->end - c->pos)
        return -1;
    *data = c->buf + c->pos;
    c->pos += (Py_ssize_t)*len;
    return 0;
}

static PyObject *append_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "append_records takes 9 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    long long count = PyLong_AsLongLong(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]);
    long long base_ts = PyLong_AsLongLong(args[3]);
    long long append_ts = PyLong_AsLongLong(args[4]);
    long long lo = PyLong_AsLongLong(args[5]);
    long long hi = PyLong_AsLongLong(args[6]);
    int with_headers = PyObject_IsTrue(args[8]);
    PyObject *cols_obj = args[7];
    PyObject *col[AR_COLS];
    if (PyErr_Occurred() || with_headers < 0)
        goto done;
    if (!PyList_Check(cols_obj) || PyList_GET_SIZE(cols_obj) != AR_COLS) {
        PyErr_SetString(PyExc_TypeError, "cols must be a list of 16 bytearrays");
        goto done;
    }
    for (int i = 0; i < AR_COLS; i++) {
        col[i] = PyList_GET_ITEM(cols_obj, i);
        if (!PyByteArray_Check(col[i])) {
            PyErr_SetString(PyExc_TypeError, "cols must be a list of 16 bytearrays");
            goto done;
        }
    }
    if (count < 0 || count > view.len || PyByteArray_GET_SIZE(col[1]) < 4 ||
        PyByteArray_GET_SIZE(col[4]) < 4 || PyByteArray_GET_SIZE(col[10]) < 4 ||
        PyByteArray_GET_SIZE(col[11]) < 4 || PyByteArray_GET_SIZE(col[14]) < 4) {
        PyErr_SetString(PyExc_ValueError, "bad record count or offsets buffers");
        goto done;
    }
    Py_ssize_t n0 = PyByteArray_GET_SIZE(col[6]) / 8;
    Py_ssize_t h0 = PyByteArray_GET_SIZE(col[11]) / 4 - 1;
    Py_ssize_t body_len = view.len;
    int32_t key_end = ar_last_i32(col[1]), value_end = ar_last_i32(col[4]);
    int32_t list_end = ar_last_i32(col[10]);
    int32_t hk_end = ar_last_i32(col[11]), hv_end = ar_last_i32(col[14]);
    if ((int64_t)key_end + body_len > INT32_MAX || (int64_t)value_end + body_len > INT32_MAX ||
        (int64_t)hk_end + body_len > INT32_MAX || (int64_t)hv_end + body_len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "column data past 2 GiB: start a new batch");
        goto done;
    }
    /* Reserve for `count` rows; the data columns together never exceed the body. */
    unsigned char *koff, *kdata, *voff, *vdata, *offs, *stamps, *types, *loff;
    if (ar_reserve_bits(col[0], n0, count) < 0 || ar_reserve_bits(col[3], n0, count) < 0 ||
        ar_reserve(col[1], 4 * count, &koff) < 0 || ar_reserve(col[2], body_len, &kdata) < 0 ||
        ar_reserve(col[4], 4 * count, &voff) < 0 || ar_reserve(col[5], body_len, &vdata) < 0 ||
        ar_reserve(col[6], 8 * count, &offs) < 0 || ar_reserve(col[7], 8 * count, &stamps) < 0 ||
        ar_reserve(col[8], 4 * count, &types) < 0)
        goto done;
    if (with_headers) {
        if (ar_reserve_bits(col[9], n0, count) < 0 || ar_reserve(col[10], 4 * count, &loff) < 0)
            goto done;
    }
    unsigned char *kbits = (unsigned char *)PyByteArray_AS_STRING(col[0]);
    unsigned char *vbits = (unsigned char *)PyByteArray_AS_STRING(col[3]);
    unsigned char *hbits = with_headers ? (unsigned char *)PyByteArray_AS_STRING(col[9]) : NULL;
    ar_cursor c = {(const unsigned char *)view.buf, 0, body_len};
    Py_ssize_t n = 0, h = 0, kd = 0, vd = 0;
    int32_t ts_type = append_ts >= 0 ? 1 : 0;
    for (long long i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, klen, vlen, nheaders;
        const unsigned char *k, *v;
        if (read_varint(c.buf, &c.pos, c.end, &length) < 0 || length < 1 ||
            length > c.end - c.pos) {
            PyErr_Format(PyExc_ValueError, "record %lld overruns the batch", i);
            goto done;
        }
        ar_cursor r = {c.buf, c.pos + 1, c.pos + (Py_ssize_t)length};
        c.pos = r.end;
        if (read_varint(r.buf, &r.pos, r.end, &ts_delta) < 0 ||
            read_varint(r.buf, &r.pos, r.end, &offset_delta) < 0 ||
            ar_blob(&r, &k, &klen) < 0 || ar_blob(&r, &v, &vlen) < 0 ||
            read_varint(r.buf, &r.pos, r.end, &nheaders) < 0) {
            PyErr_Format(PyExc_ValueError, "record %lld is malformed", i);
            goto done;
        }
        int64_t offset = base_offset + offset_delta;
        if (offset < lo || offset >= hi)
            continue;
        Py_ssize_t row = n0 + n;
        ar_bit(kbits, row, klen >= 0);
        if (klen > 0) {
            memcpy(kdata + kd, k, (size_t)klen);
            kd += (Py_ssize_t)klen;
        }
        ar_i32(koff + 4 * n, key_end + (int32_t)kd);
        ar_bit(vbits, row, vlen >= 0);
        if (vlen > 0) {
            memcpy(vdata + vd, v, (size_t)vlen);
            vd += (Py_ssize_t)vlen;
        }
        ar_i32(voff + 4 * n, value_end + (int32_t)vd);
        ar_i64(offs + 8 * n, offset);
        ar_i64(stamps + 8 * n, (append_ts >= 0 ? append_ts : base_ts + ts_delta) * 1000);
        ar_i32(types + 4 * n, ts_type);
        if (with_headers) {
            if (nheaders < 0 || nheaders > r.end - r.pos) {
                PyErr_Format(PyExc_ValueError, "record %lld has a bad header count", i);
                goto done;
            }
            ar_bit(hbits, row, nheaders > 0);
            if (nheaders > 0) {
                unsigned char *hk_off, *hk_data, *hv_off, *hv_data;
                Py_ssize_t room = r.end - r.pos;
                if (ar_reserve(col[11], 4 * nheaders, &hk_off) < 0 ||
                    ar_reserve(col[12], room, &hk_data) < 0 ||
                    ar_reserve(col[14], 4 * nheaders, &hv_off) < 0 ||
                    ar_reserve(col[15], room, &hv_data) < 0 ||
                    ar_reserve_bits(col[13], h0 + h, nheaders) < 0)
                    goto done;
                unsigned char *hvbits = (unsigned char *)PyByteArray_AS_STRING(col[13]);
                Py_ssize_t hkd = 0, hvd = 0;
                for (int64_t j = 0; j < nheaders; j++) {
                    const unsigned char *hk, *hv;
                    int64_t hklen, hvlen;
                    if (ar_blob(&r, &hk, &hklen) < 0 || ar_blob(&r, &hv, &hvlen) < 0) {
                        PyErr_Format(PyExc_ValueError, "record %lld has a malformed header", i);
                        goto done;
                    }
                    if (hklen > 0) {
                        memcpy(hk_data + hkd, hk, (size_t)hklen);
                        hkd += (Py_ssize_t)hklen;
                    }
                    ar_i32(hk_off + 4 * j, hk_end + (int32_t)hkd);
                    ar_bit(hvbits, h0 + h + j, hvlen >= 0);
                    if (hvlen > 0) {
                        memcpy(hv_data + hvd, hv, (size_t)hvlen);
                        hvd += (Py_ssize_t)hvlen;
                    }
                    ar_i32(hv_off + 4 * j, hv_end + (int32_t)hvd);
                }
                hk_end += (int32_t)hkd;
                hv_end += (int32_t)hvd;
                h += (Py_ssize_t)nheaders;
                if (ar_trim(col[12], room - hkd) < 0 || ar_trim(col[15], room - hvd) < 0)
                    goto done;
            }
            ar_i32(loff + 4 * n, list_end + (int32_t)h);
        }
        n++;
    }
    if (c.pos != c.end) {
        PyErr_Format(PyExc_ValueError, "%zd bytes after the last of %lld records",
                     c.end - c.pos, count);
        goto done;
    }
    Py_ssize_t unused = (Py_ssize_t)count - n;
    if (ar_trim(col[1], 4 * unused) < 0 || ar_trim(col[2], body_len - kd) < 0 ||
        ar_trim(col[4], 4 * unused) < 0 || ar_trim(col[5], body_len - vd) < 0 ||
        ar_trim(col[6], 8 * unused) < 0 || ar_trim(col[7], 8 * unused) < 0 ||
        ar_trim(col[8], 4 * unused) < 0)
        goto done;
    if (with_headers && ar_trim(col[10], 4 * unused) < 0)
        goto done;
    /* Bitmaps cover exactly the rows there are. */
    Py_ssize_t rows = n0 + n;
    if (PyByteArray_Resize(col[0], (rows + 7) / 8) < 0 ||
        PyByteArray_Resize(col[3], (rows + 7) / 8) < 0 ||
        (with_headers && PyByteArray_Resize(col[9], (rows + 7) / 8) < 0) ||
        (with_headers && PyByteArray_Resize(col[13], (h0 + h + 7) / 8) < 0))
        goto done;
    result = PyLong_FromSsize_t(n);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"append_records", (PyCFunction)(void (*)(void))append_records, METH_FASTCALL,
     "append_records(body, count, base_offset, base_timestamp, append_time, lo, hi, cols, "
     "with_headers): append the records of a batch body to 16 Arrow buffers (the Spark source)."},
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(body, count): (start, end, body, after_ts, ts_delta, offset_delta, "
     "key_start, key_length, value_length) of each record of a decompressed batch body."},
    {"check_records", check_records, METH_VARARGS,
     "check_records(buf, start, end, count, require_key=False): walk the records of a batch; "
     "return None, or (problem, record index, value)."},
    {"check_client_batch", (PyCFunction)(void (*)(void))check_client_batch, METH_FASTCALL,
     "check_client_batch(buf, max_message_bytes, require_key, cls): the header of one valid "
     "uncompressed client batch, or None for the Python validator to judge."},
    {"read_produce", (PyCFunction)(void (*)(void))read_produce, METH_FASTCALL,
     "read_produce(view, offset, flexible, request_cls, topic_cls, partition_cls): a Produce "
     "request body, records as views, or None when not plainly well formed."},
    {"encode_produce_response", (PyCFunction)(void (*)(void))encode_produce_response, METH_FASTCALL,
     "encode_produce_response(version, correlation_id, answer, answer_keys, partition_keys): "
     "the framed Produce response as bytes, or None for the Python encoder to write."},
    {"encode_fetch_response", (PyCFunction)(void (*)(void))encode_fetch_response, METH_FASTCALL,
     "encode_fetch_response(version, correlation_id, answer, answer_keys, partition_keys, "
     "region_type): the framed Fetch response as a list of pieces, or None for the Python "
     "encoder to write."},
    {"stamp_batch", (PyCFunction)(void (*)(void))stamp_batch, METH_FASTCALL,
     "stamp_batch(data, base_offset, leader_epoch, header): (head with the two broker-owned "
     "fields set, header with them replaced)."},
    {"next_in_line", (PyCFunction)(void (*)(void))ps_next_in_line, METH_FASTCALL,
     "next_in_line(records, table, producer_id, epoch, base_sequence, transactional): the "
     "slot of the producer's record when the batch is its next one, else 0."},
    {"append_next", (PyCFunction)(void (*)(void))ps_append_next, METH_FASTCALL,
     "append_next(records, slot, base_sequence, last_offset_delta, base_offset, "
     "max_timestamp): record a batch next_in_line accepted."},
    {"read_client_id", (PyCFunction)(void (*)(void))read_client_id, METH_FASTCALL,
     "read_client_id(frame, flexible): (client id, body offset) of a plainly well formed "
     "request header, or None."},
    {"read_fetch", (PyCFunction)(void (*)(void))read_fetch, METH_FASTCALL,
     "read_fetch(view, offset, version, request_cls, topic_cls, partition_cls, forgotten_cls): "
     "a Fetch request body, or None when not plainly well formed."},
    {"read_fetch_response", read_fetch_response, METH_VARARGS,
     "read_fetch_response(view, offset, version, response_cls, topic_cls, partition_cls, "
     "aborted_cls, known_errors): a Fetch response body, records as views, or None when not "
     "plainly well formed."},
    {"walk_batches", walk_batches, METH_VARARGS,
     "walk_batches(buf, cls, start=0, end=-1): [(position, header)] of each complete batch."},
    {"parse_marker_at", parse_marker_at, METH_VARARGS,
     "parse_marker_at(buf, pos): (is COMMIT, coordinator epoch) of a marker, or None."},
    {"collect_latest", collect_latest, METH_VARARGS,
     "collect_latest(buf, stable, latest, suspects): first pass of a latest-per-key read."},
    {"select_latest", select_latest, METH_VARARGS,
     "select_latest(buf, stable, upper, latest, aborted): second pass of a latest-per-key read."},
    {"span_batches", span_batches, METH_VARARGS,
     "span_batches(buf, max_offset=-1): (bytes, next offset) of the whole batches below it."},
    {"plan_scan", plan_scan, METH_VARARGS,
     "plan_scan(buf, next_offset, base_offset, bytes_since_index, interval, has_entries, "
     "max_timestamp): a segment load's walk over one chunk."},
    {"new_buffer", new_buffer, METH_O,
     "new_buffer(n): a bytearray of n bytes left as they are (to be filled by a receive)."},
    {"grow_buffer", grow_buffer, METH_VARARGS,
     "grow_buffer(buf, n): extend a bytearray to n bytes without writing the new ones."},
    {"reserve_blocks", reserve_blocks, METH_VARARGS,
     "reserve_blocks(fd, offset, length): allocate file blocks past the end, size unchanged."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "C helpers for record batches.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    PyObject *crc_module = PyImport_ImportModule("crc32c");
    if (crc_module == NULL)
        return NULL;
    crc32c_func = PyObject_GetAttrString(crc_module, "crc32c");
    Py_DECREF(crc_module);
    if (crc32c_func == NULL || intern_keys() < 0)
        return NULL;
    return PyModule_Create(&module);
}
