/* The C form of JobRecord.to_record, to_wire and admit (trioqueue.core.job).
 *
 * The Python methods are generated from the field table, and they stay the definition:
 * trioqueue.core.job_plan hands this module the same steps, once, at import, as tuples
 * of (member descriptor, key, kind, default) or (member descriptor, argument, default),
 * and each callable here runs them in one loop. A job's slots are read at the offsets
 * of the class's own member descriptors, checked when the plan is made; a call on
 * anything but an exact instance of the class, or with other arguments than the hot
 * form, goes to the Python method, which then raises what it raises.
 *
 * The callables are descriptors that bind as functions do (Py_TPFLAGS_METHOD_DESCRIPTOR
 * lets `job.to_record()` skip the bound method), vectorcall, no keyword arguments.
 *
 * Ownership: a Fast object owns its class, its fallback, its base (the wire defaults,
 * or the set of list attributes) and, per step, the descriptor, key and default.
 * A slot read is a strong reference held for as long as it is used, and slots are read
 * again after any call that may run Python code (a comparison, a truth test), as the
 * generated code reads them again.
 */
#include "_job_slots.h"

PyObject *empty_tuple;

#define SLOT(obj, s) (*(PyObject **)((char *)(obj) + (s)->offset))

/* A new reference to the slot's value; NULL with Python's AttributeError if unset.
 * The object is of the class when a call starts; should Python code run by a step
 * (a comparison, a truth test) assign its __class__ (to a class of the same layout),
 * it is read by name from then on, as the generated code reads it. */
static inline PyObject *
read_slot(FastObject *f, PyObject *obj, Step *s)
{
    if (!Py_IS_TYPE(obj, f->cls))
        return PyObject_GetAttr(obj, PyDescr_NAME(s->descr));
    PyObject *v = SLOT(obj, s);
    if (v == NULL)
        return PyMember_GetOne((const char *)obj, s->member);  /* raises */
    Py_INCREF(v);
    return v;
}

/* float(v), as the builtin does it (a str is parsed; PyNumber_Float parses it too). */
static inline PyObject *
as_float(PyObject *v)
{
    if (PyUnicode_CheckExact(v))
        return PyFloat_FromString(v);
    return PyNumber_Float(v);
}

/* Run the steps on `obj`, storing into the dict `d`; 0, or -1 with an exception. */
static int
run_steps(FastObject *f, PyObject *obj, PyObject *d)
{
    for (Py_ssize_t i = 0; i < f->n; i++) {
        Step *s = &f->steps[i];
        PyObject *v = read_slot(f, obj, s);
        if (v == NULL)
            return -1;
        int keep;
        switch (s->kind) {
        case K_ALWAYS:
            keep = 1;
            break;
        case K_IS_NOT:
            keep = v != s->value;
            break;
        case K_FLOAT_NOT_NONE:
            if (v == Py_None) {
                keep = 0;
                break;
            }
            /* fall through */
        case K_FLOAT:
            Py_SETREF(v, as_float(v));
            if (v == NULL)
                return -1;
            keep = 1;
            break;
        case K_IS_NOT_NE:
            if (v == s->value) {
                keep = 0;
                break;
            }
            else {
                PyObject *ne = PyObject_RichCompare(v, s->value, Py_NE);
                Py_DECREF(v);
                if (ne == NULL)
                    return -1;
                keep = PyObject_IsTrue(ne);
                Py_DECREF(ne);
            }
            goto reread;
        case K_TRUTHY:
            keep = PyObject_IsTrue(v);
            Py_DECREF(v);
        reread:
            if (keep < 0)
                return -1;
            if (!keep)
                continue;
            v = read_slot(f, obj, s);  /* the store reads the attribute anew */
            if (v == NULL)
                return -1;
            break;
        default:
            keep = 0;
        }
        if (keep && PyDict_SetItem(d, s->key, v) < 0) {
            Py_DECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    return 0;
}

static PyObject *
to_record(FastObject *f, PyObject *obj)
{
    /* (not _PyDict_NewPresized: it makes a table for any keys, larger than the str-only
     * table of the generated code's dict display; this one ends the same size.) */
    PyObject *r = PyDict_New();
    if (r == NULL)
        return NULL;
    if (run_steps(f, obj, r) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

/* JobWire(defaults) as dict's own new, init and setitem do it: true while the class
 * overrides none of them (checked per call: a class can change). */
static inline int
wire_is_plain(FastObject *f)
{
    PyTypeObject *t = f->wire_cls;
    return t->tp_new == PyDict_Type.tp_new && t->tp_init == PyDict_Type.tp_init
        && t->tp_as_mapping != NULL
        && t->tp_as_mapping->mp_ass_subscript == PyDict_Type.tp_as_mapping->mp_ass_subscript;
}

static PyObject *
to_wire(FastObject *f, PyObject *obj)
{
    PyObject *w = PyDict_Type.tp_new(f->wire_cls, empty_tuple, NULL);
    if (w == NULL)
        return NULL;
    if (PyDict_Merge(w, f->base, 1) < 0 || run_steps(f, obj, w) < 0) {
        Py_DECREF(w);
        return NULL;
    }
    return w;
}

/* for attr, value in options.items():
 *     if attr in list_attrs: value = () if not value else list(value)
 *     setattr(self, attr, value) */
static int
set_options(FastObject *f, PyObject *obj, PyObject *options)
{
    Py_ssize_t pos = 0, size = PyDict_GET_SIZE(options);
    PyObject *key, *value;
    while (PyDict_Next(options, &pos, &key, &value)) {
        Py_INCREF(key);
        Py_INCREF(value);
        int is_list = PySet_Contains(f->base, key);
        if (is_list > 0) {
            int truth = PyObject_IsTrue(value);
            if (truth < 0)
                is_list = -1;
            else
                Py_SETREF(value, truth ? PySequence_List(value) : Py_NewRef(empty_tuple));
            if (value == NULL) {
                Py_DECREF(key);
                return -1;
            }
        }
        int done = is_list < 0 ? -1 : PyObject_SetAttr(obj, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (done < 0)
            return -1;
        if (PyDict_GET_SIZE(options) != size) {
            PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
            return -1;
        }
    }
    return 0;
}

static PyObject *
admit(FastObject *f, PyObject *const *args)
{
    PyObject *obj = f->cls->tp_alloc(f->cls, 0);  /* object.__new__(cls) */
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < f->n; i++) {
        Step *s = &f->steps[i];
        PyObject *v = s->arg >= 0 ? args[s->arg] : s->value;
        Py_INCREF(v);
        Py_XSETREF(SLOT(obj, s), v);
    }
    if (set_options(f, obj, args[f->nargs]) < 0)
        goto fail;
    /* if type(self.name) is str: self.name = intern(self.name) */
    Step *s = &f->steps[f->name_step];
    PyObject *name = read_slot(f, obj, s);
    if (name == NULL)
        goto fail;
    if (PyUnicode_CheckExact(name)) {
        PyUnicode_InternInPlace(&name);
        if (Py_IS_TYPE(obj, f->cls))
            Py_XSETREF(SLOT(obj, s), name);
        else {  /* an option assigned __class__ */
            int done = PyObject_SetAttr(obj, PyDescr_NAME(s->descr), name);
            Py_DECREF(name);
            if (done < 0)
                goto fail;
        }
    }
    else
        Py_DECREF(name);
    return obj;
fail:
    Py_DECREF(obj);
    return NULL;
}

PyObject *
fast_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastObject *f = (FastObject *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL) {
        if (f->role == R_ADMIT) {
            if (nargs == f->nargs + 1 && PyDict_CheckExact(args[f->nargs]))
                return admit(f, args);
        }
        else if (nargs == 1 && Py_IS_TYPE(args[0], f->cls)) {
            if (f->role == R_RECORD)
                return to_record(f, args[0]);
            if (wire_is_plain(f))
                return to_wire(f, args[0]);
        }
    }
    return PyObject_Vectorcall(f->fallback, args, nargsf, kwnames);
}

/* Bind as a function does: the class's attribute is this object, an instance's a
 * bound method (which LOAD_METHOD skips, given Py_TPFLAGS_METHOD_DESCRIPTOR). */
static PyObject *
fast_descr_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

void
free_steps(FastObject *f)
{
    Step *steps = f->steps;
    Py_ssize_t n = f->n;
    f->steps = NULL;
    f->n = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(steps[i].descr);
        Py_XDECREF(steps[i].key);
        Py_XDECREF(steps[i].value);
    }
    PyMem_Free(steps);
}

static int
fast_traverse(FastObject *f, visitproc visit, void *arg)
{
    Py_VISIT(f->cls);
    Py_VISIT(f->fallback);
    Py_VISIT(f->base);
    Py_VISIT(f->wire_cls);
    for (Py_ssize_t i = 0; i < f->n; i++) {
        Py_VISIT(f->steps[i].descr);
        Py_VISIT(f->steps[i].key);
        Py_VISIT(f->steps[i].value);
    }
    return 0;
}

static int
fast_clear(FastObject *f)
{
    free_steps(f);
    Py_CLEAR(f->cls);
    Py_CLEAR(f->fallback);
    Py_CLEAR(f->base);
    Py_CLEAR(f->wire_cls);
    return 0;
}

static void
fast_dealloc(FastObject *f)
{
    PyObject_GC_UnTrack(f);
    fast_clear(f);
    PyObject_GC_Del(f);
}

static PyObject *
fast_fallback_attr(FastObject *f, void *name)
{
    return PyObject_GetAttrString(f->fallback, (const char *)name);
}

static PyGetSetDef fast_getset[] = {
    {"__name__", (getter)fast_fallback_attr, NULL, NULL, "__name__"},
    {"__qualname__", (getter)fast_fallback_attr, NULL, NULL, "__qualname__"},
    {"__doc__", (getter)fast_fallback_attr, NULL, NULL, "__doc__"},
    {NULL}
};

static PyMemberDef fast_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(FastObject, fallback), READONLY,
     "the Python method, which defines this one and takes every other call"},
    {NULL}
};

PyTypeObject Fast_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trioqueue.core._job_slots.Fast",
    .tp_basicsize = sizeof(FastObject),
    .tp_dealloc = (destructor)fast_dealloc,
    .tp_vectorcall_offset = offsetof(FastObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
        | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A JobRecord method run from a plan of its steps (see job_plan.py).",
    .tp_traverse = (traverseproc)fast_traverse,
    .tp_clear = (inquiry)fast_clear,
    .tp_members = fast_members,
    .tp_getset = fast_getset,
    .tp_descr_get = fast_descr_get,
};

