/* metadata_log._columns: the leader's per-record step of encoding a command, in C, with a Python fallback in
 * codec.py (_take_run_py) for when this module was not built (no C compiler at install).
 *
 * A command of version 2 writes consecutive records of one type as a run: a column per field (codec.py,
 * encode_runs). Building those columns in Python takes an attrgetter map per field, a set of value types per
 * column to check them and a count per column to shorten it, all on the leader's event-loop thread, which
 * holds the GIL: it sets the leader's pace (benchmark 1c, the raft row of BENCHMARKS.md). take_run does it in
 * one pass over the records.
 *
 * It reads each field through its slot's member descriptor (PyMember_GetOne, the descriptor's own getter) of
 * records of exactly the descriptor's class. The records come as a tuple: a list could be changed under the
 * loop by Python code that a garbage collection runs (a __del__), which any allocation here may trigger. A
 * value's type is compared by identity with the field's accepted types, which may only be str, int, bool and
 * NoneType, and values are compared for equality only when their type is one of those: built-ins.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* PyMember_GetOne (in Python.h itself from 3.12) */

PyDoc_STRVAR(take_run_doc,
             "take_run(records, start, cls, members, types) -> (stop, columns, typed, same)\n\n"
             "records[start:stop] (records: a tuple) are the records from start on whose type is exactly cls "
             "(stop > start: records[start] must be one). members holds cls's member descriptors, one per "
             "field, in order; types, per field, a tuple of the exact types it accepts, each str, int, bool "
             "or NoneType. columns holds one list per "
             "field with the run's values; typed[i] says whether every value of column i has one of "
             "types[i]; same[i] whether, in addition, every value equals the first.");

static int builtin_value_type(PyObject *type) {
    return type == (PyObject *)&PyUnicode_Type || type == (PyObject *)&PyLong_Type ||
           type == (PyObject *)&PyBool_Type || type == (PyObject *)Py_TYPE(Py_None);
}

static int accepted_types(PyObject *accepted) {
    if (!PyTuple_Check(accepted))
        return 0;
    for (Py_ssize_t t = 0; t < PyTuple_GET_SIZE(accepted); t++)
        if (!builtin_value_type(PyTuple_GET_ITEM(accepted, t)))
            return 0;
    return 1;
}

static PyObject *take_run(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *records, *members, *types;
    PyTypeObject *cls;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!nO!O!O!:take_run", &PyTuple_Type, &records, &start, &PyType_Type, &cls,
                          &PyTuple_Type, &members, &PyTuple_Type, &types))
        return NULL;
    if (!PyTuple_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "take_run: records must be a tuple, not a subclass");
        return NULL;
    }
    const Py_ssize_t fields = PyTuple_GET_SIZE(members);
    if (fields == 0 || PyTuple_GET_SIZE(types) != fields) {
        PyErr_SetString(PyExc_ValueError, "take_run: one member and one tuple of types per field, at least one");
        return NULL;
    }
    for (Py_ssize_t f = 0; f < fields; f++) {
        PyObject *member = PyTuple_GET_ITEM(members, f);
        if (!Py_IS_TYPE(member, &PyMemberDescr_Type) ||
            !PyType_IsSubtype(cls, ((PyMemberDescrObject *)member)->d_common.d_type) ||
            !accepted_types(PyTuple_GET_ITEM(types, f))) {
            PyErr_Format(PyExc_TypeError,
                         "take_run: field %zd is not a slot of %s with a tuple of types (str, int, bool, NoneType)",
                         f, cls->tp_name);
            return NULL;
        }
    }
    PyObject **items = &PyTuple_GET_ITEM(records, 0);
    const Py_ssize_t size = PyTuple_GET_SIZE(records);
    if (start < 0 || start >= size || Py_TYPE(items[start]) != cls) {
        PyErr_Format(PyExc_ValueError, "take_run: records[%zd] is not a %s", start, cls->tp_name);
        return NULL;
    }
    Py_ssize_t stop = start + 1;
    while (stop < size && Py_TYPE(items[stop]) == cls)
        stop++;
    const Py_ssize_t n = stop - start;

    PyObject *columns = PyList_New(fields), *typed = PyList_New(fields), *same = PyList_New(fields);
    PyObject *result = NULL;
    if (columns == NULL || typed == NULL || same == NULL)
        goto done;
    for (Py_ssize_t f = 0; f < fields; f++) {
        PyMemberDef *slot = ((PyMemberDescrObject *)PyTuple_GET_ITEM(members, f))->d_member;
        PyObject *accepted = PyTuple_GET_ITEM(types, f);
        PyObject *column = PyList_New(n);
        if (column == NULL)
            goto done;
        PyList_SET_ITEM(columns, f, column);
        int is_typed = 1, is_same = 1;
        PyTypeObject *last_ok = NULL; /* the type of the last value found accepted: usually all of them */
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *value = PyMember_GetOne((const char *)items[start + i], slot);
            if (value == NULL) /* a slot never set: AttributeError, as attrgetter raises */
                goto done;
            PyList_SET_ITEM(column, i, value);
            if (!is_typed)
                continue;
            if (Py_TYPE(value) != last_ok) {
                is_typed = 0;
                for (Py_ssize_t t = 0; t < PyTuple_GET_SIZE(accepted); t++)
                    if ((PyObject *)Py_TYPE(value) == PyTuple_GET_ITEM(accepted, t))
                        is_typed = 1;
                if (!is_typed)
                    continue;
                last_ok = Py_TYPE(value);
            }
            if (is_same && i > 0 && value != PyList_GET_ITEM(column, 0)) {
                int equal = PyObject_RichCompareBool(value, PyList_GET_ITEM(column, 0), Py_EQ);
                if (equal < 0)
                    goto done;
                is_same = equal;
            }
        }
        PyList_SET_ITEM(typed, f, Py_NewRef(is_typed ? Py_True : Py_False));
        PyList_SET_ITEM(same, f, Py_NewRef(is_typed && is_same ? Py_True : Py_False));
    }
    result = Py_BuildValue("nOOO", stop, columns, typed, same);
done:
    Py_XDECREF(columns);
    Py_XDECREF(typed);
    Py_XDECREF(same);
    return result;
}

static PyMethodDef methods[] = {
    {"take_run", take_run, METH_VARARGS, take_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "metadata_log._columns",
    .m_doc = "The leader's encoding of record runs, in C (see metadata_log/_columns.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
