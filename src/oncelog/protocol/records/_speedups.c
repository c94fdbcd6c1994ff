/* C version of oncelog.protocol.records.record.check_records: walks the records of a v2
 * batch (length varint, attributes, timestampDelta varlong, offsetDelta varint) to check the
 * count and the offset deltas without a Python-level loop per record. With require_key (a
 * compacted topic) it also reads each key's length varint and counts null keys. Same rules and
 * messages as the Python version, which stays the reference and the fallback. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

static PyObject *check_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, count;
    int require_key = 0;
    if (!PyArg_ParseTuple(args, "y*nnn|p", &view, &start, &end, &count, &require_key))
        return NULL;
    /* Null keys do not stop the walk: a malformed later record is reported first, as Kafka's
     * record iteration fails before its per-record errors are gathered. */
    Py_ssize_t first_keyless = -1;
    int64_t keyless = 0;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const char *error = NULL;
    Py_ssize_t index = 0;
    int64_t bad = 0;
    if (start < 0 || end > view.len || start > end) {
        error = "record region outside the buffer";
        goto done;
    }
    Py_ssize_t pos = start;
    for (index = 0; index < count; index++) {
        int64_t length, ts_delta, offset_delta;
        if (read_varint(buf, &pos, end, &length) < 0) {
            error = "varint overruns the record or is longer than 10 bytes";
            goto done;
        }
        Py_ssize_t body = pos;
        if (length < 4 || length > end - body) {
            error = "overruns";
            bad = length;
            goto done;
        }
        Py_ssize_t record_end = body + (Py_ssize_t)length;
        Py_ssize_t p = body + 1;
        if (read_varint(buf, &p, record_end, &ts_delta) < 0 ||
            read_varint(buf, &p, record_end, &offset_delta) < 0) {
            error = "varint overruns the record or is longer than 10 bytes";
            goto done;
        }
        if (offset_delta != index) {
            error = "delta";
            bad = offset_delta;
            goto done;
        }
        if (require_key) {
            int64_t key_length;
            if (read_varint(buf, &p, record_end, &key_length) < 0) {
                error = "varint overruns the record or is longer than 10 bytes";
                goto done;
            }
            if (key_length < 0) {
                if (first_keyless < 0)
                    first_keyless = index;
                keyless++;
            }
        }
        pos = record_end;
    }
    if (pos != end) {
        error = "trailing";
        bad = end - pos;
    } else if (first_keyless >= 0) {
        error = "nokey";
        index = first_keyless;
        bad = keyless;
    }
done:
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

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(body, count): (start, end, body, after_ts, ts_delta, offset_delta, "
     "key_start, key_length, value_length) of each record of a decompressed batch body."},
    {"check_records", check_records, METH_VARARGS,
     "check_records(buf, start, end, count, require_key=False): walk the records of a batch; "
     "return None, or (problem, record index, value)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "C helpers for record batches.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
