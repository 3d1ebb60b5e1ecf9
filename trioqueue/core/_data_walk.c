/* The C form of the two walks every pushed job goes through, for their common case:
 *
 * - validated(value): trioqueue.transport.datamodel's check of a decoded tree;
 * - json_bound(value, depth): trioqueue.core.job_data's bound of the JSON text of job
 *   data (its _json_bound).
 *
 * The Python functions stay the one statement of the rules. This file only settles
 * what they would settle without a change or an error, at no bytecode per value (the
 * Python walks cost 130-170 bytecodes per job for validated, about 80 for the bound):
 *
 * - validated: a container whose members are all plain (exact dict with exact-str
 *   keys, exact list, leaves of the exact types of datamodel._LEAF_TYPES) within the
 *   depth limit is left as it is. At the first member that is anything else, the
 *   container is handed whole to datamodel._clean_map / _clean_list with its depth,
 *   which rebuilds it or raises with the texts it has; the walk then goes on with the
 *   container's siblings. Handing over a container that is partly walked is sound
 *   because cleaning is idempotent: what C walked had nothing to change, and what the
 *   Python functions cleaned below it is clean when they walk it again.
 * - json_bound: the same integer as the Python function, or the same _Unsure for what
 *   it does not model. Should the bound overflow 64 bits (a shared subtree counted a
 *   great many times), the Python function, with its unbounded ints, answers instead.
 *
 * Recursion is bounded: neither walk goes deeper than its configured depth limit, past
 * which the value is handed to Python (which raises) or said unsure. Neither walk runs
 * Python code except the fallbacks, and no C API used here calls user code (exact
 * types only, PyDict_Next), so a container cannot change under the walk but by the
 * fallbacks; a container member is held by a reference while it is walked, in case.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Set once by configure_validated / configure_json_bound (owned references). */
static PyObject *clean_map_py;   /* datamodel._clean_map(m, depth) */
static PyObject *clean_list_py;  /* datamodel._clean_list(items, depth) */
static PyObject *validated_py;   /* datamodel's Python validated(value) */
static Py_ssize_t max_depth;     /* datamodel.MAX_DEPTH */
static PyObject *unsure_exc;     /* job_data._Unsure */
static PyObject *json_bound_py;  /* job_data's Python _json_bound(value, depth) */
static Py_ssize_t fast_depth;    /* job_data._FAST_DEPTH */
static PyObject *uint64_max;     /* 2**64 - 1, made at import */

/* ------------------------------------------------------------------------ validated */

/* datamodel._LEAF_TYPES: str, int, float, bool, NoneType, bytes (exact types). */
static inline int
is_leaf(PyTypeObject *t)
{
    return t == &PyUnicode_Type || t == &PyLong_Type || t == &PyFloat_Type
        || t == &PyBool_Type || t == Py_TYPE(Py_None) || t == &PyBytes_Type;
}

/* fn(container, depth), the Python walk of one container; 0 or -1 with its error. */
static int
hand_over(PyObject *fn, PyObject *container, Py_ssize_t depth)
{
    PyObject *d = PyLong_FromSsize_t(depth);
    if (d == NULL)
        return -1;
    PyObject *args[2] = {container, d};
    PyObject *res = PyObject_Vectorcall(fn, args, 2, NULL);
    Py_DECREF(d);
    if (res == NULL)
        return -1;
    Py_DECREF(res);
    return 0;
}

static int walk_list(PyObject *items, Py_ssize_t depth);

/* A member of a container at `depth`: 0 for a leaf, or a container (exact dict or list)
 * walked at depth + 1 that needed nothing; -1 with an error; 1 for anything else (the
 * caller hands its own container over). One body for a map's and an array's members. */
static inline int walk_member(PyObject *value, Py_ssize_t depth);

static int
walk_map(PyObject *m, Py_ssize_t depth)
{
    if (depth > max_depth)
        return hand_over(clean_map_py, m, depth);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(m, &pos, &key, &value)) {
        int r = PyUnicode_CheckExact(key) ? walk_member(value, depth) : 1;
        if (r != 0)
            return r < 0 ? -1 : hand_over(clean_map_py, m, depth);
    }
    return 0;
}

static int
walk_list(PyObject *items, Py_ssize_t depth)
{
    if (depth > max_depth)
        return hand_over(clean_list_py, items, depth);
    /* The size is read again each round: a fallback may only replace slots, but an
     * index past the end must never be read whatever it does. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        int r = walk_member(PyList_GET_ITEM(items, i), depth);
        if (r != 0)
            return r < 0 ? -1 : hand_over(clean_list_py, items, depth);
    }
    return 0;
}

static inline int
walk_member(PyObject *value, Py_ssize_t depth)
{
    PyTypeObject *t = Py_TYPE(value);
    if (is_leaf(t))
        return 0;
    int r;
    if (t == &PyDict_Type) {
        Py_INCREF(value);
        r = walk_map(value, depth + 1);
    }
    else if (t == &PyList_Type) {
        Py_INCREF(value);
        r = walk_list(value, depth + 1);
    }
    else
        return 1;
    Py_DECREF(value);
    return r;
}

static int
require(PyObject *fn, const char *what)
{
    if (fn != NULL)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "_data_walk.%s is not configured", what);
    return -1;
}

static PyObject *
validated(PyObject *Py_UNUSED(module), PyObject *value)
{
    if (require(validated_py, "configure_validated") < 0)
        return NULL;
    PyTypeObject *t = Py_TYPE(value);
    int r;
    if (t == &PyDict_Type)
        r = walk_map(value, 1);
    else if (t == &PyList_Type)
        r = walk_list(value, 1);
    else if (is_leaf(t))
        r = 0;
    else  /* an absent marker (None) or a refusal: the Python function's business */
        return PyObject_CallOneArg(validated_py, value);
    if (r < 0)
        return NULL;
    return Py_NewRef(value);
}

static PyObject *
configure_validated(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *cm, *cl, *v;
    Py_ssize_t depth;
    if (!PyArg_ParseTuple(args, "OOOn:configure_validated", &cm, &cl, &v, &depth))
        return NULL;
    if (!PyCallable_Check(cm) || !PyCallable_Check(cl) || !PyCallable_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "configure_validated takes three callables");
        return NULL;
    }
    /* The recursion above goes max_depth C frames deep: keep it a nesting limit. */
    if (depth < 0 || depth > 10000) {
        PyErr_SetString(PyExc_ValueError, "max_depth out of range");
        return NULL;
    }
    Py_XSETREF(clean_map_py, Py_NewRef(cm));
    Py_XSETREF(clean_list_py, Py_NewRef(cl));
    Py_XSETREF(validated_py, Py_NewRef(v));
    max_depth = depth;
    Py_RETURN_NONE;
}

/* ----------------------------------------------------------------------- json_bound */

/* The constants of job_data._json_bound_py: a scalar's text is at most 24 characters, an
 * int only within [-(2**63), 2**64 - 1]; bytes are sized as a Buffer's JSON. */
#define SCALAR_BOUND 24
#define UNSURE (-2)
#define OVERFLOW (-3)

typedef int64_t bound_t;  /* >= 0: a bound; UNSURE, OVERFLOW, or -1 with an error */

/* 1 for the scalars sized SCALAR_BOUND whatever their value: float, bool, None, and an
 * int within 64 bits (signed or not); 0 for anything else. */
static inline int
is_scalar(PyObject *v, PyTypeObject *t)
{
    if (t == &PyFloat_Type || t == &PyBool_Type || t == Py_TYPE(Py_None))
        return 1;
    if (t != &PyLong_Type)
        return 0;
    int overflow;
    (void)PyLong_AsLongLongAndOverflow(v, &overflow);  /* cannot fail on an exact int */
    if (overflow == 0)
        return 1;
    if (overflow < 0)
        return 0;
    /* Past 2**63 - 1: compared with 2**64 - 1, which for exact ints neither fails nor
     * allocates (PyLong_AsUnsignedLongLong would raise, and an allocation may run a
     * collection, thus finalizers, while this walk holds borrowed references). */
    return PyObject_RichCompareBool(v, uint64_max, Py_LE) == 1;
}

/* total += a * k + b, OVERFLOW on overflow (the Python function has no limit). */
static inline int
add(bound_t *total, bound_t a, bound_t k, bound_t b)
{
    bound_t x;
    if (__builtin_mul_overflow(a, k, &x) || __builtin_add_overflow(x, b, &x)
            || __builtin_add_overflow(*total, x, total))
        return OVERFLOW;
    return 0;
}

static bound_t bound(PyObject *value, Py_ssize_t depth);

/* job_data._array_bound, of a list or a tuple. */
static bound_t
array_bound(PyObject *seq, Py_ssize_t depth)
{
    if (depth > fast_depth)
        return UNSURE;
    bound_t total = 2;
    int is_list = PyList_CheckExact(seq);
    /* A list's size is read each round: no code runs here, but never read past it. */
    for (Py_ssize_t i = 0; i < (is_list ? PyList_GET_SIZE(seq) : PyTuple_GET_SIZE(seq));
            i++) {
        PyObject *item = is_list ? PyList_GET_ITEM(seq, i) : PyTuple_GET_ITEM(seq, i);
        PyTypeObject *t = Py_TYPE(item);
        int r;
        if (t == &PyUnicode_Type)
            r = add(&total, 6, PyUnicode_GET_LENGTH(item), 3);
        else if (is_scalar(item, t))
            r = add(&total, 1, 1, SCALAR_BOUND);
        else {
            bound_t b = bound(item, depth + 1);
            if (b < 0)
                return b;
            r = add(&total, 1, b, 1);
        }
        if (r < 0)
            return r;
    }
    return total;
}

/* job_data._json_bound_py. */
static bound_t
bound(PyObject *value, Py_ssize_t depth)
{
    PyTypeObject *kind = Py_TYPE(value);
    bound_t total = 0;
    if (kind == &PyUnicode_Type)
        return add(&total, 6, PyUnicode_GET_LENGTH(value), 2) < 0 ? OVERFLOW : total;
    if (kind == &PyDict_Type) {
        if (depth > fast_depth)
            return UNSURE;
        total = 2;
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &pos, &key, &item)) {
            if (!PyUnicode_CheckExact(key))
                return UNSURE;
            bound_t klen = PyUnicode_GET_LENGTH(key);
            PyTypeObject *t = Py_TYPE(item);
            int r;
            if (t == &PyUnicode_Type) {  /* 6 * (len(key) + len(item)) + 8 */
                r = add(&total, 6, klen, 8);
                if (r == 0)
                    r = add(&total, 6, PyUnicode_GET_LENGTH(item), 0);
            }
            else if (is_scalar(item, t))
                r = add(&total, 6, klen, 4 + SCALAR_BOUND);
            else {
                bound_t b = bound(item, depth + 1);
                if (b < 0)
                    return b;
                r = add(&total, 6, klen, 4);
                if (r == 0)
                    r = add(&total, 1, b, 0);
            }
            if (r < 0)
                return r;
        }
        return total;
    }
    if (kind == &PyList_Type || kind == &PyTuple_Type)
        return array_bound(value, depth);
    if (is_scalar(value, kind))
        return SCALAR_BOUND;
    if (kind == &PyBytes_Type)
        return add(&total, 4, PyBytes_GET_SIZE(value), 27) < 0 ? OVERFLOW : total;
    if (kind == &PyByteArray_Type)
        return add(&total, 4, PyByteArray_GET_SIZE(value), 27) < 0 ? OVERFLOW : total;
    return UNSURE;
}

static PyObject *
json_bound(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (require(json_bound_py, "configure_json_bound") < 0)
        return NULL;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "json_bound(value, depth)");
        return NULL;
    }
    /* A depth the walk does not take (not a small int >= 0) is the Python function's. */
    Py_ssize_t depth = -1;
    if (PyLong_CheckExact(args[1])) {
        depth = PyLong_AsSsize_t(args[1]);
        if (depth == -1 && PyErr_Occurred())
            PyErr_Clear();
    }
    bound_t b = depth < 0 || depth > PY_SSIZE_T_MAX / 2 ? OVERFLOW : bound(args[0], depth);
    if (b >= 0)
        return PyLong_FromLongLong(b);
    if (b == UNSURE) {
        PyErr_SetNone(unsure_exc);
        return NULL;
    }
    /* Past 64 bits, or that depth: the Python function. */
    return PyObject_Vectorcall(json_bound_py, args, 2, NULL);
}

static PyObject *
configure_json_bound(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *exc, *fn;
    Py_ssize_t depth;
    if (!PyArg_ParseTuple(args, "OOn:configure_json_bound", &exc, &fn, &depth))
        return NULL;
    if (!PyExceptionClass_Check(exc) || !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError,
                        "configure_json_bound takes an exception class and a callable");
        return NULL;
    }
    if (depth < 0 || depth > 10000) {
        PyErr_SetString(PyExc_ValueError, "fast_depth out of range");
        return NULL;
    }
    Py_XSETREF(unsure_exc, Py_NewRef(exc));
    Py_XSETREF(json_bound_py, Py_NewRef(fn));
    fast_depth = depth;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"validated", (PyCFunction)validated, METH_O,
     "datamodel.validated, its common case in C (see the module's comment)."},
    {"configure_validated", (PyCFunction)configure_validated, METH_VARARGS,
     "configure_validated(clean_map, clean_list, validated, max_depth)"},
    {"json_bound", (PyCFunction)(void (*)(void))json_bound, METH_FASTCALL,
     "job_data._json_bound, in C (see the module's comment)."},
    {"configure_json_bound", (PyCFunction)configure_json_bound, METH_VARARGS,
     "configure_json_bound(unsure, json_bound, fast_depth)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_data_walk", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__data_walk(void)
{
    uint64_max = PyLong_FromUnsignedLongLong(UINT64_MAX);
    if (uint64_max == NULL)
        return NULL;
    return PyModule_Create(&module);
}
