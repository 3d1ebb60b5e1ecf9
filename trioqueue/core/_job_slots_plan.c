/* trioqueue.core._job_slots, the plan half: a plan's steps parsed and checked against
 * the class, the Fast callables made from them, and the module (see _job_slots.c for
 * what a plan is and how it runs). */
#include "_job_slots.h"

static const char *kind_names[] = {"always", "is_not", "is_not_ne", "truthy", "float",
                                   "float_not_none", NULL};

/* ---------------------------------------------------------------- making a plan */

/* Check that `descr` is a writable object slot of `cls` and fill in its step. */
static int
take_slot(Step *s, PyTypeObject *cls, PyObject *descr)
{
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)
            || ((PyDescrObject *)descr)->d_type != cls) {
        PyErr_SetString(PyExc_TypeError, "a step needs a member descriptor of the class");
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY) || m->offset < (Py_ssize_t)sizeof(PyObject)
            || m->offset + (Py_ssize_t)sizeof(PyObject *) > cls->tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "a step needs a writable object slot");
        return -1;
    }
    s->offset = m->offset;
    s->member = m;
    s->descr = Py_NewRef(descr);
    return 0;
}

static int
parse_kind(PyObject *name)
{
    const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    for (int k = 0; text != NULL && kind_names[k] != NULL; k++)
        if (strcmp(text, kind_names[k]) == 0)
            return k;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "unknown step kind %R", name);
    return -1;
}

/* One step of to_record or to_wire: (descriptor, key, kind, default). */
static int
parse_store(Step *s, PyTypeObject *cls, PyObject *item)
{
    PyObject *descr, *key, *kind, *value;
    if (!PyArg_ParseTuple(item, "OO!OO;a step is (descriptor, key, kind, default)",
                          &descr, &PyUnicode_Type, &key, &kind, &value))
        return -1;
    if (!PyUnicode_CheckExact(key)) {
        PyErr_SetString(PyExc_TypeError, "a step's key must be a str");
        return -1;
    }
    if ((s->kind = parse_kind(kind)) < 0 || take_slot(s, cls, descr) < 0)
        return -1;
    s->key = Py_NewRef(key);
    s->value = Py_NewRef(value);
    s->arg = -1;
    return 0;
}

/* One slot of admit: (descriptor, argument index or -1, default). */
static int
parse_fill(Step *s, PyTypeObject *cls, PyObject *item, Py_ssize_t nargs)
{
    PyObject *descr, *value;
    Py_ssize_t arg;
    if (!PyArg_ParseTuple(item, "OnO;an admit slot is (descriptor, argument, default)",
                          &descr, &arg, &value))
        return -1;
    if (arg < -1 || arg >= nargs) {
        PyErr_SetString(PyExc_ValueError, "an admit slot's argument is out of range");
        return -1;
    }
    if (take_slot(s, cls, descr) < 0)
        return -1;
    s->arg = arg;
    s->value = Py_NewRef(value);
    s->kind = K_ALWAYS;
    return 0;
}

static FastObject *
new_fast(int role, PyTypeObject *cls, PyObject *fallback, PyObject *steps,
         Py_ssize_t nargs)
{
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "the fallback must be callable");
        return NULL;
    }
    if (!PyTuple_Check(steps)) {
        PyErr_SetString(PyExc_TypeError, "the steps must be a tuple");
        return NULL;
    }
    FastObject *f = PyObject_GC_New(FastObject, &Fast_Type);
    if (f == NULL)
        return NULL;
    f->vectorcall = fast_vectorcall;
    f->role = role;
    f->cls = (PyTypeObject *)Py_NewRef(cls);
    f->fallback = Py_NewRef(fallback);
    f->base = NULL;
    f->wire_cls = NULL;
    f->name_step = -1;
    f->nargs = nargs;
    f->n = 0;
    Py_ssize_t n = PyTuple_GET_SIZE(steps);
    f->steps = PyMem_Calloc(n ? n : 1, sizeof(Step));
    PyObject_GC_Track(f);
    if (f->steps == NULL) {
        Py_DECREF(f);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Step *s = &f->steps[i];
        f->n = i + 1;  /* so that a failure frees what is filled */
        PyObject *item = PyTuple_GET_ITEM(steps, i);
        if (!PyTuple_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "a step must be a tuple");
            Py_DECREF(f);
            return NULL;
        }
        if ((role == R_ADMIT ? parse_fill(s, cls, item, nargs) : parse_store(s, cls, item)) < 0) {
            Py_DECREF(f);
            return NULL;
        }
    }
    return f;
}

static PyObject *
record_method(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyTypeObject *cls;
    PyObject *fallback, *steps;
    if (!PyArg_ParseTuple(args, "O!OO!:record_method", &PyType_Type, &cls, &fallback,
                          &PyTuple_Type, &steps))
        return NULL;
    return (PyObject *)new_fast(R_RECORD, cls, fallback, steps, 0);
}

static PyObject *
wire_method(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyTypeObject *cls, *wire_cls;
    PyObject *fallback, *steps, *defaults;
    if (!PyArg_ParseTuple(args, "O!OO!O!O!:wire_method", &PyType_Type, &cls, &fallback,
                          &PyTuple_Type, &steps, &PyType_Type, &wire_cls,
                          &PyDict_Type, &defaults))
        return NULL;
    if (!PyType_IsSubtype(wire_cls, &PyDict_Type)) {
        PyErr_SetString(PyExc_TypeError, "the wire class must be a dict");
        return NULL;
    }
    FastObject *f = new_fast(R_WIRE, cls, fallback, steps, 0);
    if (f == NULL)
        return NULL;
    f->wire_cls = (PyTypeObject *)Py_NewRef(wire_cls);
    f->base = Py_NewRef(defaults);
    return (PyObject *)f;
}

static PyObject *
admit_function(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyTypeObject *cls;
    PyObject *fallback, *steps, *list_attrs, *name_descr;
    Py_ssize_t nargs;
    if (!PyArg_ParseTuple(args, "O!OO!nO!O:admit_function", &PyType_Type, &cls, &fallback,
                          &PyTuple_Type, &steps, &nargs, &PyFrozenSet_Type, &list_attrs,
                          &name_descr))
        return NULL;
    if (nargs < 0) {
        PyErr_SetString(PyExc_ValueError, "admit takes its arguments, then the options");
        return NULL;
    }
    FastObject *f = new_fast(R_ADMIT, cls, fallback, steps, nargs);
    if (f == NULL)
        return NULL;
    f->base = Py_NewRef(list_attrs);
    for (Py_ssize_t i = 0; i < f->n; i++)
        if (f->steps[i].descr == name_descr)
            f->name_step = i;
    if (f->name_step < 0) {
        PyErr_SetString(PyExc_ValueError, "admit needs the name slot among its slots");
        Py_DECREF(f);
        return NULL;
    }
    return (PyObject *)f;
}

static PyMethodDef module_methods[] = {
    {"record_method", record_method, METH_VARARGS,
     "record_method(cls, fallback, steps): to_record run from its steps."},
    {"wire_method", wire_method, METH_VARARGS,
     "wire_method(cls, fallback, steps, wire_cls, defaults): to_wire run from its steps."},
    {"admit_function", admit_function, METH_VARARGS,
     "admit_function(cls, fallback, slots, nargs, list_attrs, name_descr): admit."},
    {NULL}
};

static struct PyModuleDef job_slots_module = {
    PyModuleDef_HEAD_INIT, "_job_slots", NULL, -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__job_slots(void)
{
    if (PyType_Ready(&Fast_Type) < 0)
        return NULL;
    if (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&job_slots_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Fast", (PyObject *)&Fast_Type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
