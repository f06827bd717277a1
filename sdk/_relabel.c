/* Relabel confluent-kafka Message objects in place: their topic and partition become the logical ones.
 *
 * The SDK hands applications the confluent-kafka Message objects its physical consumers and producers
 * returned, with topic() and partition() naming the logical topic and partition. Message has set_topic()
 * but no way to set the partition, and a wrapper or a copy per message costs a bare read loop a third of
 * its speed (BENCHMARKS.md, ninth session). So this module writes the two fields itself.
 *
 * It never assumes confluent-kafka's struct layout: sdk/messages.py finds the byte offsets of the topic,
 * partition and error fields in a probe Message, checks them through the public getters, and only then
 * calls configure(); configure() refuses offsets outside the object or overlapping each other. Until it is
 * configured, every call raises. Only objects of exactly the configured type are touched.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

static PyTypeObject *message_type = NULL; /* confluent_kafka.Message, once configured */
static Py_ssize_t topic_at, partition_at, error_at;

#define OBJECT_FIELD(msg, at) (*(PyObject **)((char *)(msg) + (at)))
#define INT32_FIELD(msg, at) (*(int32_t *)((char *)(msg) + (at)))

static int field_fits(Py_ssize_t at, Py_ssize_t size, Py_ssize_t align, Py_ssize_t basicsize) {
    return at >= (Py_ssize_t)sizeof(PyObject) && at % align == 0 && at + size <= basicsize;
}

static int overlaps(Py_ssize_t a, Py_ssize_t a_size, Py_ssize_t b, Py_ssize_t b_size) {
    return a < b + b_size && b < a + a_size;
}

PyDoc_STRVAR(configure_doc,
             "configure(message_type, topic_at, partition_at, error_at)\n\n"
             "Where the topic (object pointer), partition (int32) and error (object pointer) fields lie in "
             "message_type's objects, as byte offsets. Call once, after checking them.");

static PyObject *configure(PyObject *Py_UNUSED(module), PyObject *args) {
    PyTypeObject *type;
    Py_ssize_t topic, partition, error;
    if (!PyArg_ParseTuple(args, "O!nnn:configure", &PyType_Type, &type, &topic, &partition, &error))
        return NULL;
    const Py_ssize_t ptr = (Py_ssize_t)sizeof(PyObject *), i32 = (Py_ssize_t)sizeof(int32_t);
    const Py_ssize_t basicsize = type->tp_basicsize;
    if (type->tp_itemsize != 0 || !field_fits(topic, ptr, ptr, basicsize) ||
        !field_fits(partition, i32, i32, basicsize) || !field_fits(error, ptr, ptr, basicsize) ||
        overlaps(topic, ptr, partition, i32) || overlaps(topic, ptr, error, ptr) ||
        overlaps(partition, i32, error, ptr)) {
        PyErr_Format(PyExc_ValueError, "offsets %zd, %zd, %zd do not fit %s objects of %zd bytes", topic,
                     partition, error, type->tp_name, basicsize);
        return NULL;
    }
    Py_XSETREF(message_type, (PyTypeObject *)Py_NewRef(type));
    topic_at = topic;
    partition_at = partition;
    error_at = error;
    Py_RETURN_NONE;
}

static int check_configured(void) {
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sdk._relabel is not configured");
        return 0;
    }
    return 1;
}

/* The logical partition of an origin (a tuple whose items 0 and 1 are the logical topic and partition), or
 * -1 with an exception set when it is not one. */
static int32_t origin_partition(PyObject *origin) {
    if (!PyTuple_Check(origin) || PyTuple_GET_SIZE(origin) < 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(origin, 0)) ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(origin, 1))) {
        PyErr_SetString(PyExc_TypeError, "an origin is a tuple (logical topic: str, logical partition: int, ...)");
        return -1;
    }
    long partition = PyLong_AsLong(PyTuple_GET_ITEM(origin, 1));
    if (partition < 0 || partition > INT32_MAX) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "logical partition %ld is out of range", partition);
        return -1;
    }
    return (int32_t)partition;
}

static void write_label(PyObject *msg, PyObject *topic, int32_t partition) {
    PyObject *old = OBJECT_FIELD(msg, topic_at);
    OBJECT_FIELD(msg, topic_at) = Py_NewRef(topic);
    Py_XDECREF(old); /* a str: freeing it runs no Python code */
    INT32_FIELD(msg, partition_at) = partition;
}

PyDoc_STRVAR(relabel_batch_doc,
             "relabel_batch(messages, slots) -> bool\n\n"
             "slots maps a physical topic to a list indexed by physical partition of origins (logical topic, "
             "logical partition, ...) or None. When every message is a Message without error() whose physical "
             "topic and partition have an origin, relabel them all and return True; otherwise change nothing "
             "and return False.");

static PyObject *relabel_batch(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *messages, *slots_by_topic;
    if (!PyArg_ParseTuple(args, "O!O!:relabel_batch", &PyList_Type, &messages, &PyDict_Type, &slots_by_topic))
        return NULL;
    if (!check_configured())
        return NULL;
    const Py_ssize_t n = PyList_GET_SIZE(messages);
    if (n == 0)
        Py_RETURN_TRUE;
    PyObject **origins = PyMem_New(PyObject *, n);
    int32_t *partitions = PyMem_New(int32_t, n);
    if (origins == NULL || partitions == NULL) {
        PyMem_Free(origins);
        PyMem_Free(partitions);
        return PyErr_NoMemory();
    }
    PyObject *result = Py_False;
    /* First pass: place every message, or give up before anything changed. Nothing in it runs Python code
     * (the dictionary's keys are str), so the list and its messages stay as they are. */
    PyObject *last_topic = NULL, *slots = NULL, *last_origin = NULL;
    int32_t last_partition = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *msg = PyList_GET_ITEM(messages, i);
        if (Py_TYPE(msg) != message_type)
            goto done;
        PyObject *error = OBJECT_FIELD(msg, error_at);
        if (error != NULL && error != Py_None)
            goto done;
        PyObject *topic = OBJECT_FIELD(msg, topic_at);
        if (topic == NULL || !PyUnicode_CheckExact(topic))
            goto done;
        if (topic != last_topic) {
            /* each message has its own topic string: compare it with the last one before hashing it */
            if (last_topic == NULL || PyUnicode_Compare(topic, last_topic) != 0) {
                slots = PyDict_GetItemWithError(slots_by_topic, topic);
                if (slots == NULL) {
                    if (PyErr_Occurred())
                        result = NULL;
                    goto done;
                }
                if (!PyList_CheckExact(slots)) {
                    PyErr_SetString(PyExc_TypeError, "slots of a physical topic must be a list");
                    result = NULL;
                    goto done;
                }
            }
            last_topic = topic;
        }
        const int32_t physical = INT32_FIELD(msg, partition_at);
        if (physical < 0 || physical >= PyList_GET_SIZE(slots))
            goto done;
        PyObject *origin = PyList_GET_ITEM(slots, physical);
        if (origin == Py_None)
            goto done;
        if (origin != last_origin) {
            last_partition = origin_partition(origin);
            if (last_partition < 0) {
                result = NULL;
                goto done;
            }
            last_origin = origin;
        }
        origins[i] = origin;
        partitions[i] = last_partition;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        write_label(PyList_GET_ITEM(messages, i), PyTuple_GET_ITEM(origins[i], 0), partitions[i]);
    result = Py_True;
done:
    PyMem_Free(origins);
    PyMem_Free(partitions);
    return Py_XNewRef(result);
}

PyDoc_STRVAR(relabel_doc,
             "relabel(message, origin) -> message\n\n"
             "Give one Message the logical topic and partition of origin (logical topic, logical partition, "
             "...), whatever its error; returns it.");

static PyObject *relabel(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *msg, *origin;
    if (!PyArg_ParseTuple(args, "OO:relabel", &msg, &origin))
        return NULL;
    if (!check_configured())
        return NULL;
    if (Py_TYPE(msg) != message_type) {
        PyErr_Format(PyExc_TypeError, "expected a %s, got %s", message_type->tp_name, Py_TYPE(msg)->tp_name);
        return NULL;
    }
    const int32_t partition = origin_partition(origin);
    if (partition < 0)
        return NULL;
    write_label(msg, PyTuple_GET_ITEM(origin, 0), partition);
    return Py_NewRef(msg);
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, configure_doc},
    {"relabel_batch", relabel_batch, METH_VARARGS, relabel_batch_doc},
    {"relabel", relabel, METH_VARARGS, relabel_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "sdk._relabel",
    .m_doc = "Relabel confluent-kafka Message objects in place with their logical topic and partition.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__relabel(void) { return PyModule_Create(&module_def); }
