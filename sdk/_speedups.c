/* sdk._speedups: the SDK's per-message paths in C, each with a Python fallback for when this module was not
 * built (no C compiler at install). A confluent-kafka loop spends about a microsecond per message, so a Python
 * call or object per message costs it a large part of its speed (the sdk rows of BENCHMARKS.md).
 *
 * Relabelling: the SDK hands applications the confluent-kafka Message objects its physical consumers and
 * producers returned, with topic() and partition() naming the logical topic and partition. Message has
 * set_topic() but no way to set the partition, so this module writes the two fields itself (relabel,
 * relabel_batch, Reporter). It never assumes confluent-kafka's struct layout: sdk/messages.py finds the byte
 * offsets of the topic, partition and error fields in a probe Message, checks them through the public getters,
 * and only then calls configure(); configure() refuses offsets outside the object or overlapping each other.
 * Until it is configured, those calls raise. Only objects of exactly the configured type are touched.
 *
 * Routing: KeylessRouter is FederatedProducer.produce for its usual call, a key-less message with no extras
 * (sdk/producer.py); it needs no configuration.
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
    return at >= (Py_ssize_t)sizeof(PyObject) && at % align == 0 && at <= basicsize - size; /* no overflow */
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
        PyErr_SetString(PyExc_RuntimeError, "sdk._speedups is not configured");
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
    INT32_FIELD(msg, partition_at) = partition;
    Py_XDECREF(old); /* last: set_topic() takes any object, whose freeing may run Python code */
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

/* Reporter and KeylessRouter are callables that hold a few object references and their vectorcall entry. They
 * share one layout (a Holder first), so that one set of GC functions and one type template serve both. */
#define HOLDER_REFS 3
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *refs[HOLDER_REFS]; /* each type names its own (an enum); NULL past them */
} Holder;

static int holder_traverse(Holder *h, visitproc visit, void *arg) {
    for (int i = 0; i < HOLDER_REFS; i++)
        Py_VISIT(h->refs[i]);
    return 0;
}

static int holder_clear(Holder *h) {
    for (int i = 0; i < HOLDER_REFS; i++)
        Py_CLEAR(h->refs[i]);
    return 0;
}

static void holder_dealloc(Holder *h) {
    PyObject_GC_UnTrack(h);
    holder_clear(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

/* A new object of a Holder type, holding new references to refs[0..n). */
static Holder *holder_new(PyTypeObject *type, vectorcallfunc call, PyObject *const *refs, int n) {
    Holder *h = (Holder *)type->tp_alloc(type, 0);
    if (h == NULL)
        return NULL;
    for (int i = 0; i < n; i++)
        h->refs[i] = Py_NewRef(refs[i]);
    h->vectorcall = call;
    return h;
}

#define HOLDER_TYPE(c_type, name, doc, new_function)                                                                \
    {                                                                                                              \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = name, .tp_doc = PyDoc_STR(doc), .tp_basicsize = sizeof(c_type),   \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,                          \
        .tp_vectorcall_offset = offsetof(Holder, vectorcall), .tp_call = PyVectorcall_Call, .tp_new = new_function, \
        .tp_traverse = (traverseproc)holder_traverse, .tp_clear = (inquiry)holder_clear,                           \
        .tp_dealloc = (destructor)holder_dealloc,                                                                  \
    }

/* A delivery callback for confluent-kafka's producer: Reporter(callback, origin, on_error)(err, msg) relabels a
 * delivered msg with origin and calls callback(None, msg) (nothing when callback is None); a failed one goes to
 * on_error(err, msg) as it is, without a Python call per message (a closure doing this costs a key-less
 * produce loop a measurable part of its speed). */
enum { CALLBACK, ORIGIN, ON_ERROR };
typedef struct {
    Holder base;
    int32_t partition; /* of the origin */
} Reporter;

static PyObject *reporter_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Reporter *r = (Reporter *)self;
    PyObject *const *refs = r->base.refs;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a Reporter is called as (err, msg)");
        return NULL;
    }
    PyObject *err = args[0], *msg = args[1];
    if (err != Py_None)
        return PyObject_Vectorcall(refs[ON_ERROR], args, 2, NULL);
    if (refs[CALLBACK] == Py_None)
        Py_RETURN_NONE;
    if (Py_TYPE(msg) != message_type) {
        PyErr_Format(PyExc_TypeError, "expected a %s, got %s", message_type->tp_name, Py_TYPE(msg)->tp_name);
        return NULL;
    }
    write_label(msg, PyTuple_GET_ITEM(refs[ORIGIN], 0), r->partition);
    return PyObject_Vectorcall(refs[CALLBACK], args, 2, NULL);
}

static PyObject *reporter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *refs[3];
    static char *keywords[] = {"callback", "origin", "on_error", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:Reporter", keywords, &refs[CALLBACK], &refs[ORIGIN],
                                     &refs[ON_ERROR]))
        return NULL;
    if (!check_configured())
        return NULL;
    if ((refs[CALLBACK] != Py_None && !PyCallable_Check(refs[CALLBACK])) || !PyCallable_Check(refs[ON_ERROR])) {
        PyErr_SetString(PyExc_TypeError, "callback (or None) and on_error must be callable");
        return NULL;
    }
    const int32_t partition = origin_partition(refs[ORIGIN]);
    if (partition < 0)
        return NULL;
    Reporter *r = (Reporter *)holder_new(type, reporter_vectorcall, refs, 3);
    if (r != NULL)
        r->partition = partition;
    return (PyObject *)r;
}

static PyTypeObject ReporterType = HOLDER_TYPE(
    Reporter, "sdk._speedups.Reporter",
    "Reporter(callback, origin, on_error): a delivery callback that hands callback(None, msg) the delivered "
    "message relabelled with origin, and on_error(err, msg) a failed one.",
    reporter_new);

/* FederatedProducer.produce(topic, value=None, key=None, partition=None, headers=None, on_delivery=None,
 * timestamp=0) for a key-less message with no extras: KeylessRouter(routes, fallback). routes maps a logical
 * topic to an endless iterator (round-robin) of tuples (send, physical topic, physical partition, report, ...);
 * such a message goes to send(physical topic, value, None, physical partition, report). Any other call (a
 * key, a partition, headers, a callback, a timestamp, a topic not in routes, an unknown argument) goes to
 * fallback with the arguments as given. */
enum { ROUTES, FALLBACK };

enum { TOPIC, VALUE, KEY, PARTITION, HEADERS, ON_DELIVERY, TIMESTAMP, N_PRODUCE_ARGS };
static const char *const produce_args[N_PRODUCE_ARGS] = {"topic",   "value",       "key",      "partition",
                                                         "headers", "on_delivery", "timestamp"};

/* The produce() arguments of a call by position, or 0 when the call is not a plain key-less one. */
static int keyless_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **arg) {
    if (nargs > N_PRODUCE_ARGS)
        return 0;
    for (Py_ssize_t i = 0; i < nargs; i++)
        arg[i] = args[i];
    const Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        int at = 0;
        while (at < N_PRODUCE_ARGS && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), produce_args[at]))
            at++;
        if (at == N_PRODUCE_ARGS || arg[at] != NULL)
            return 0; /* unknown or given twice: the fallback raises TypeError */
        arg[at] = args[nargs + k];
    }
    for (int at = KEY; at <= ON_DELIVERY; at++)
        if (arg[at] != NULL && arg[at] != Py_None)
            return 0;
    PyObject *timestamp = arg[TIMESTAMP];
    if (timestamp != NULL) {
        int overflow = 0;
        if (!PyLong_CheckExact(timestamp) || PyLong_AsLongAndOverflow(timestamp, &overflow) != 0 || overflow)
            return 0;
    }
    return arg[TOPIC] != NULL && PyUnicode_CheckExact(arg[TOPIC]);
}

static PyObject *router_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *const *refs = ((Holder *)self)->refs;
    PyObject *arg[N_PRODUCE_ARGS] = {NULL};
    if (!keyless_args(args, PyVectorcall_NARGS(nargsf), kwnames, arg))
        return PyObject_Vectorcall(refs[FALLBACK], args, nargsf, kwnames);
    PyObject *targets = PyDict_GetItemWithError(refs[ROUTES], arg[TOPIC]);
    if (targets == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_Vectorcall(refs[FALLBACK], args, nargsf, kwnames); /* no route yet: fallback makes it */
    }
    if (!PyIter_Check(targets)) {
        PyErr_SetString(PyExc_TypeError, "a KeylessRouter's routes must be iterators");
        return NULL;
    }
    Py_INCREF(targets); /* borrowed from routes, which an iterator running Python code could change */
    PyObject *target = PyIter_Next(targets);
    Py_DECREF(targets);
    if (target == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_Vectorcall(refs[FALLBACK], args, nargsf, kwnames);
    }
    if (!PyTuple_CheckExact(target) || PyTuple_GET_SIZE(target) < 4) {
        Py_DECREF(target);
        PyErr_SetString(PyExc_TypeError, "a route yields (send, physical topic, physical partition, report, ...)");
        return NULL;
    }
    PyObject *send_args[5] = {PyTuple_GET_ITEM(target, 1), arg[VALUE] != NULL ? arg[VALUE] : Py_None, Py_None,
                              PyTuple_GET_ITEM(target, 2), PyTuple_GET_ITEM(target, 3)};
    PyObject *result = PyObject_Vectorcall(PyTuple_GET_ITEM(target, 0), send_args, 5, NULL);
    Py_DECREF(target);
    return result;
}

static PyObject *router_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *refs[2];
    static char *keywords[] = {"routes", "fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O:KeylessRouter", keywords, &PyDict_Type, &refs[ROUTES],
                                     &refs[FALLBACK]))
        return NULL;
    if (!PyCallable_Check(refs[FALLBACK])) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return NULL;
    }
    return (PyObject *)holder_new(type, router_vectorcall, refs, 2);
}

static PyTypeObject KeylessRouterType = HOLDER_TYPE(
    Holder, "sdk._speedups.KeylessRouter",
    "KeylessRouter(routes, fallback): FederatedProducer.produce, with key-less messages without extras sent in C "
    "over routes[topic] (see sdk/_speedups.c).",
    router_new);

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, configure_doc},
    {"relabel_batch", relabel_batch, METH_VARARGS, relabel_batch_doc},
    {"relabel", relabel, METH_VARARGS, relabel_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "sdk._speedups",
    .m_doc = "The SDK's per-message paths in C: Message relabelling and key-less routing.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (PyType_Ready(&ReporterType) < 0 || PyType_Ready(&KeylessRouterType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "Reporter", (PyObject *)&ReporterType) < 0 ||
        PyModule_AddObjectRef(module, "KeylessRouter", (PyObject *)&KeylessRouterType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
