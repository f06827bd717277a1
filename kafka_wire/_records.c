/* kafka_wire._records: the per-record step of placing a strict topic's records (batches.py, _split), in C,
 * with the same function in Python (batches._split_py) for when this module was not built (no C compiler at
 * install).
 *
 * In Python the regrouping costs the gateway ~3.9 us per record (varints read one call each, a bytearray per
 * record), which held a client producing keyed records to a strict topic through the gateway to a third of
 * its speed on a none topic (BENCHMARKS.md). split() reads one batch body (the records after the batch header,
 * already inflated) and appends each record, re-encoded, to its target partition's group.
 *
 * The body comes from a client: every length and varint is checked against the record's and the body's end
 * before anything is read, and a value that does not fit is a ValueError (batches.py makes it BadBatch). A
 * group is a list [records: bytearray, count: int, base timestamp: int, max timestamp: int], as in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KEY_SLOTS 16384
#define SLOT_MASK (KEY_SLOTS - 1)
#define MAX_GROUPS 1024 /* metadata_log.keymap.MAX_STRICT_PARTITIONS */

static uint32_t crc_table[256];

static void make_crc_table(void) { /* zlib.crc32's polynomial, as keyorder.routing.slot_of uses it */
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* A zigzag varint of up to 64 bits at *at, not past end; 0 when it does not fit. */
static int read_varint(const unsigned char *body, Py_ssize_t *at, Py_ssize_t end, int64_t *value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*at >= end)
            return 0;
        const unsigned char byte = body[(*at)++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *value = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return 1;
        }
    }
    return 0;
}

static Py_ssize_t varint_size(int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 1;
    while (v > 0x7F) {
        v >>= 7;
        n++;
    }
    return n;
}

static char *write_varint(char *out, int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (v > 0x7F) {
        *out++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *out++ = (char)v;
    return out;
}

typedef struct {
    long partition;
    PyObject *group; /* borrowed from the groups dict, which holds it */
    PyObject *records;
    int64_t count, base_ts, max_ts;
} Group;

/* Write the touched groups' count and timestamps back into their lists. */
static int write_back(Group *groups, int n) {
    for (int i = 0; i < n; i++) {
        PyObject *values[3] = {PyLong_FromLongLong(groups[i].count), PyLong_FromLongLong(groups[i].base_ts),
                               PyLong_FromLongLong(groups[i].max_ts)};
        if (values[0] == NULL || values[1] == NULL || values[2] == NULL) {
            Py_XDECREF(values[0]);
            Py_XDECREF(values[1]);
            Py_XDECREF(values[2]);
            return 0;
        }
        for (int k = 0; k < 3; k++)
            PyList_SetItem(groups[i].group, k + 1, values[k]); /* steals the reference */
    }
    return 1;
}

static int64_t as_int64(PyObject *value, int *ok) {
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred())
        *ok = 0;
    return (int64_t)v;
}

/* The group of a partition: one of this call's, else the dict's (made when new). NULL with an exception set. */
static Group *group_of(Group *groups, int *n, PyObject *dict, long partition, int64_t timestamp) {
    for (int i = 0; i < *n; i++)
        if (groups[i].partition == partition)
            return &groups[i];
    if (*n >= MAX_GROUPS) {
        PyErr_SetString(PyExc_ValueError, "records placed on more partitions than a strict topic has");
        return NULL;
    }
    PyObject *key = PyLong_FromLong(partition);
    if (key == NULL)
        return NULL;
    PyObject *group = PyDict_GetItemWithError(dict, key);
    if (group == NULL && PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    if (group == NULL) {
        group = Py_BuildValue("[NLLL]", PyByteArray_FromStringAndSize(NULL, 0), 0LL, (long long)timestamp,
                              (long long)timestamp);
        if (group == NULL || PyDict_SetItem(dict, key, group) < 0) {
            Py_XDECREF(group);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(group); /* the dict holds it */
    }
    Py_DECREF(key);
    if (!PyList_CheckExact(group) || PyList_GET_SIZE(group) != 4 || !PyByteArray_CheckExact(PyList_GET_ITEM(group, 0))) {
        PyErr_SetString(PyExc_TypeError, "a group is a list [bytearray, count, base_ts, max_ts]");
        return NULL;
    }
    Group *g = &groups[(*n)++];
    int ok = 1;
    g->partition = partition;
    g->group = group;
    g->records = PyList_GET_ITEM(group, 0);
    g->count = as_int64(PyList_GET_ITEM(group, 1), &ok);
    g->base_ts = as_int64(PyList_GET_ITEM(group, 2), &ok);
    g->max_ts = as_int64(PyList_GET_ITEM(group, 3), &ok);
    if (!ok) {
        (*n)--;
        return NULL;
    }
    return g;
}

#define BAD(...)                                                                                                   \
    do {                                                                                                           \
        PyErr_Format(PyExc_ValueError, __VA_ARGS__);                                                               \
        goto fail;                                                                                                 \
    } while (0)

PyDoc_STRVAR(split_doc,
             "split(body, count, base_ts, targets, stamped, keyless, header, groups) -> int | None\n\n"
             "Place the count records of a batch body (base_ts: its base timestamp) and append each, re-encoded, "
             "to its partition's group in groups (partition -> [bytearray, count, base_ts, max_ts]). targets: "
             "16,384 native int32, each slot's partition or -1 when it takes no writes now; stamped: 16,384 "
             "bytes, nonzero for a slot whose records get header first among their headers; keyless: the "
             "partition of key-less records, or -1. Returns None, or the slot (-1: a key-less record) of the "
             "first record that has no partition now. ValueError for records that do not fit.");

static PyObject *split(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer body = {0}, targets = {0}, stamped = {0}, header = {0};
    Py_ssize_t count;
    long long base_ts;
    long keyless;
    PyObject *dict, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nLy*y*ly*O!:split", &body, &count, &base_ts, &targets, &stamped, &keyless,
                          &header, &PyDict_Type, &dict))
        return NULL;
    Group *touched = NULL; /* the groups this call touched: at most MAX_GROUPS */
    int n = 0;
    if (targets.len != KEY_SLOTS * (Py_ssize_t)sizeof(int32_t) || stamped.len != KEY_SLOTS) {
        PyErr_SetString(PyExc_ValueError, "targets must be 16,384 int32 and stamped 16,384 bytes");
        goto fail;
    }
    touched = PyMem_New(Group, MAX_GROUPS);
    if (touched == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    const unsigned char *p = body.buf;
    const char *table = targets.buf;
    const unsigned char *stamps = stamped.buf;
    const Py_ssize_t size = body.len;
    Py_ssize_t at = 0;
    for (Py_ssize_t r = 0; r < count; r++) {
        int64_t length, ts_delta, ignored, key_length, value_length, headers_count = 0;
        if (!read_varint(p, &at, size, &length) || length < 1 || length > size - at)
            BAD("a record at byte %zd says it is too long or cannot be read", at);
        const Py_ssize_t start = at, end = at + (Py_ssize_t)length;
        Py_ssize_t cursor = start + 1; /* after the attributes */
        if (!read_varint(p, &cursor, end, &ts_delta))
            BAD("the record at byte %zd has no timestamp delta", start);
        if (!read_varint(p, &cursor, end, &ignored)) /* the offset delta: renumbered */
            BAD("the record at byte %zd has no offset delta", start);
        const Py_ssize_t after_delta = cursor;
        if (!read_varint(p, &cursor, end, &key_length) || key_length < -1 || key_length > end - cursor)
            BAD("the record at byte %zd has a key that does not fit", start);
        const Py_ssize_t key_at = cursor;
        cursor += key_length > 0 ? (Py_ssize_t)key_length : 0;
        if (!read_varint(p, &cursor, end, &value_length) || value_length < -1 || value_length > end - cursor)
            BAD("the record at byte %zd has a value that does not fit", start);
        const Py_ssize_t headers_at = cursor + (value_length > 0 ? (Py_ssize_t)value_length : 0);
        if (headers_at >= end)
            BAD("the record at byte %zd does not fit its length", start);
        long partition;
        int stamp = 0;
        if (key_length < 0) {
            if (keyless < 0) {
                result = PyLong_FromLong(-1);
                goto done;
            }
            partition = keyless;
        } else {
            const uint32_t slot = crc32_of(p + key_at, (Py_ssize_t)key_length) & SLOT_MASK;
            int32_t target;
            memcpy(&target, table + slot * sizeof(int32_t), sizeof(int32_t)); /* any alignment */
            if (target < 0) {
                result = PyLong_FromUnsignedLong(slot);
                goto done;
            }
            partition = target;
            stamp = stamps[slot] != 0;
        }
        Py_ssize_t after_count = headers_at;
        if (stamp && (!read_varint(p, &after_count, end, &headers_count) || headers_count < 0))
            BAD("the record at byte %zd has headers that cannot be read", start);
        const int64_t timestamp = (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
        Group *g = group_of(touched, &n, dict, partition, timestamp);
        if (g == NULL)
            goto fail;
        if (timestamp > g->max_ts)
            g->max_ts = timestamp;
        const int64_t ts = (int64_t)((uint64_t)timestamp - (uint64_t)g->base_ts);
        Py_ssize_t record_length = 1 + varint_size(ts) + varint_size(g->count);
        if (stamp)
            record_length += (headers_at - after_delta) + varint_size(headers_count + 1) + header.len +
                             (end - after_count);
        else
            record_length += end - after_delta;
        const Py_ssize_t old = PyByteArray_GET_SIZE(g->records);
        if (PyByteArray_Resize(g->records, old + varint_size(record_length) + record_length) < 0)
            goto fail;
        char *out = PyByteArray_AS_STRING(g->records) + old;
        out = write_varint(out, record_length);
        *out++ = (char)p[start];
        out = write_varint(out, ts);
        out = write_varint(out, g->count);
        if (stamp) {
            memcpy(out, p + after_delta, headers_at - after_delta);
            out += headers_at - after_delta;
            out = write_varint(out, headers_count + 1);
            memcpy(out, header.buf, header.len); /* first: consumers read the first kfed-epoch header */
            out += header.len;
            memcpy(out, p + after_count, end - after_count);
        } else {
            memcpy(out, p + after_delta, end - after_delta);
        }
        g->count++;
        at = end;
    }
    if (at != size)
        BAD("a record batch's records end at byte %zd of %zd", at, size);
    result = Py_NewRef(Py_None);
done:
    if (!write_back(touched, n))
        Py_CLEAR(result);
fail:
    PyMem_Free(touched);
    PyBuffer_Release(&body);
    PyBuffer_Release(&targets);
    PyBuffer_Release(&stamped);
    PyBuffer_Release(&header);
    return result;
}

static PyMethodDef methods[] = {
    {"split", split, METH_VARARGS, split_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kafka_wire._records", "A strict topic's records placed (see the C file's comment).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__records(void) {
    make_crc_table();
    return PyModule_Create(&module);
}
