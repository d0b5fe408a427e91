/*
 * sealbox._speedups: the plain-I-JSON copy of sealbox.canonical in C.
 *
 * copy_plain(value, limit) -> (copy, floats)
 *
 * The same answer as sealbox.canonical._copy_plain(value, 0, limit, seen), which stays the
 * reference (a property test checks the two agree on generated values): a fresh copy of
 * ``value`` when it is plain I-JSON -- exactly ``dict`` (ASCII ``str`` keys, none holding
 * ``$``), ``list``, ``tuple`` (made a list), ``str`` without surrogate code points, ``int``
 * within +-(2**53 - 1), finite ``float``, ``bool`` and ``None``, nested within ``limit``
 * containers -- and whether a float was met. Strings, numbers, booleans and None are shared
 * with ``value`` (immutable); every dict and list is new. Anything else (a subclass, an enum
 * member, a tag-like key, a cycle or nesting past ``limit``, a container changed while it was
 * copied) raises NotPlain, and the caller leaves the whole value to the Python encoder.
 *
 * Built by setup.py as an optional extension: without a C compiler the package installs
 * and runs on the Python reference alone (sealbox.canonical.SPEEDUPS says which is used).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define INT_LIMIT 9007199254740991LL /* 2**53 - 1: I-JSON, RFC 7493 section 2.2 */

static PyObject *NotPlain; /* sealbox._speedups.NotPlain */

static int
not_plain(void)
{
    PyErr_SetNone(NotPlain);
    return -1;
}

/* 1: no surrogate code point (str.encode("utf-8") succeeds); 0: one is there. */
static int
valid_unicode(PyObject *s)
{
    if (PyUnicode_IS_ASCII(s)) {
        return 1;
    }
    int kind = PyUnicode_KIND(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        return 1;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF) {
            return 0;
        }
    }
    return 1;
}

/* A key the plain path accepts: exactly str, ASCII, without '$'. */
static int
plain_key(PyObject *k)
{
    if (Py_TYPE(k) != &PyUnicode_Type || !PyUnicode_IS_ASCII(k)) {
        return 0;
    }
    return memchr(PyUnicode_1BYTE_DATA(k), '$', (size_t)PyUnicode_GET_LENGTH(k)) == NULL;
}

static PyObject *copy(PyObject *v, int level, int limit, int *floats);

/* A dict's copy; ``level`` counts the containers around its values (this one included). */
static PyObject *
copy_dict(PyObject *v, int level, int limit, int *floats)
{
    Py_ssize_t size = PyDict_GET_SIZE(v);
    PyObject *out = PyDict_New();
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *x;
    while (PyDict_Next(v, &pos, &k, &x)) {
        if (!plain_key(k)) {
            not_plain();
            goto fail;
        }
        Py_INCREF(k);
        Py_INCREF(x);
        PyObject *c;
        if (Py_TYPE(x) == &PyUnicode_Type && PyUnicode_IS_ASCII(x)) {
            c = Py_NewRef(x);
        }
        else {
            c = copy(x, level, limit, floats);
        }
        int rc = c == NULL ? -1 : PyDict_SetItem(out, k, c);
        Py_XDECREF(c);
        Py_DECREF(x);
        Py_DECREF(k);
        if (rc < 0) {
            goto fail;
        }
    }
    /* Changed meanwhile (a finalizer run by a collection, another thread): the Python
       reference raises "changed size during iteration" there, and the encoder decides. */
    if (PyDict_GET_SIZE(v) != size || PyDict_GET_SIZE(out) != size) {
        not_plain();
        goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
copy_sequence(PyObject *v, int is_list, int level, int limit, int *floats)
{
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < (is_list ? PyList_GET_SIZE(v) : PyTuple_GET_SIZE(v)); i++) {
        PyObject *x = is_list ? PyList_GET_ITEM(v, i) : PyTuple_GET_ITEM(v, i);
        Py_INCREF(x);
        PyObject *c;
        if (Py_TYPE(x) == &PyUnicode_Type && PyUnicode_IS_ASCII(x)) {
            c = Py_NewRef(x);
        }
        else {
            c = copy(x, level, limit, floats);
        }
        int rc = c == NULL ? -1 : PyList_Append(out, c);
        Py_XDECREF(c);
        Py_DECREF(x);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *
copy(PyObject *v, int level, int limit, int *floats)
{
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type) {
        if (valid_unicode(v)) {
            return Py_NewRef(v);
        }
        not_plain();
        return NULL;
    }
    if (t == &PyLong_Type) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow == 0 && x >= -INT_LIMIT && x <= INT_LIMIT) {
            return Py_NewRef(v);
        }
        not_plain();
        return NULL;
    }
    if (t == &PyDict_Type || t == &PyList_Type || t == &PyTuple_Type) {
        if (level + 3 > limit) {
            not_plain();
            return NULL;
        }
        /* limit may be up to 100000 (deeper than the C stack): the reference raises RecursionError
           there, and so does this copy instead of overflowing the stack */
        if (Py_EnterRecursiveCall(" while copying a value (sealbox._speedups)")) {
            return NULL;
        }
        PyObject *out = t == &PyDict_Type ? copy_dict(v, level + 1, limit, floats)
                                          : copy_sequence(v, t == &PyList_Type, level + 1, limit, floats);
        Py_LeaveRecursiveCall();
        return out;
    }
    if (v == Py_None || t == &PyBool_Type) {
        return Py_NewRef(v);
    }
    if (t == &PyFloat_Type) {
        if (isfinite(PyFloat_AS_DOUBLE(v))) {
            *floats = 1;
            return Py_NewRef(v);
        }
    }
    not_plain();
    return NULL;
}

static PyObject *
copy_plain(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "copy_plain(value, limit) takes exactly 2 arguments");
        return NULL;
    }
    long limit = PyLong_AsLong(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (limit < 0 || limit > 100000) {
        PyErr_SetString(PyExc_ValueError, "copy_plain: limit must be between 0 and 100000");
        return NULL;
    }
    int floats = 0;
    PyObject *out = copy(args[0], 0, (int)limit, &floats);
    if (out == NULL) {
        return NULL;
    }
    return Py_BuildValue("(NO)", out, floats ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"copy_plain", (PyCFunction)(void (*)(void))copy_plain, METH_FASTCALL,
     "copy_plain(value, limit) -> (copy, floats): sealbox.canonical._copy_plain(value, 0, limit, seen) in C.\n\n"
     "Raises NotPlain where the Python reference raises _NotPlain."},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *module)
{
    NotPlain = PyErr_NewExceptionWithDoc("sealbox._speedups.NotPlain",
                                         "The value is not plain I-JSON: the Python encoder decides.",
                                         PyExc_ValueError, NULL);
    if (NotPlain == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "NotPlain", NotPlain) < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "sealbox._speedups",
    "The plain-I-JSON copy of sealbox.canonical in C (optional; the Python reference is used without it).",
    0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&moduledef);
}
