/* The C form of trioqueue.core.split_dict.SplitDict: a mapping split into plain dicts
 * by the low bits of each key's hash (extendible hashing), so that no insert copies
 * more than one bucket. The Python module holds the same algorithm for machines that
 * cannot build this; see its docstring for the why. This file holds only what must be
 * fast: one lookup costs a hash read (cached for str and int), a mask and a dict lookup,
 * where a Python method would cost about 1,300 instructions more per access.
 *
 * Ownership: `buckets` (a list) holds a reference to each bucket once; the directory
 * `dir` holds borrowed pointers into it, 2**depth of them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

#define MAX_DEPTH 22

typedef struct {
    PyObject_HEAD
    PyObject **dir;         /* slot (hash & mask) -> bucket, borrowed from `buckets` */
    unsigned char *depths;  /* slot -> the number of hash bits its bucket uses */
    Py_ssize_t *limits;     /* slot -> the size past which its bucket splits */
    size_t mask;
    size_t salt;            /* makes two maps of the same keys split at other times */
    PyObject *buckets;      /* list: each bucket once (owns them) */
    Py_ssize_t max_entries; /* a bucket past this many entries splits */
} SplitDictObject;

/* The size past which the bucket of hash bits `low` (its `depth` low bits) splits:
 * between half of max_entries and all of it, spread by a mix of the bits. With one
 * limit for all, the buckets of a depth, which fill at the same rate, would all split
 * within a few thousand inserts of each other (32 splits of ~8,000 entries at 2**18
 * keys); spread, about one split comes every max_entries / 2 inserts. */
static Py_ssize_t
bucket_limit(SplitDictObject *self, size_t low, unsigned char depth)
{
    uint64_t x = ((uint64_t)(low ^ self->salt) + depth) * 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    Py_ssize_t half = self->max_entries / 2;
    return self->max_entries - half + (Py_ssize_t)(x % (uint64_t)(half + 1));
}

static int
reset(SplitDictObject *self)
{
    PyObject *first = PyDict_New();
    if (first == NULL)
        return -1;
    PyObject *buckets = PyList_New(1);
    if (buckets == NULL) {
        Py_DECREF(first);
        return -1;
    }
    PyList_SET_ITEM(buckets, 0, first);
    PyObject **dir = PyMem_Malloc(sizeof(PyObject *));
    unsigned char *depths = PyMem_Malloc(1);
    Py_ssize_t *limits = PyMem_Malloc(sizeof(Py_ssize_t));
    if (dir == NULL || depths == NULL || limits == NULL) {
        PyMem_Free(dir);
        PyMem_Free(depths);
        PyMem_Free(limits);
        Py_DECREF(buckets);
        PyErr_NoMemory();
        return -1;
    }
    dir[0] = first;
    depths[0] = 0;
    PyMem_Free(self->dir);
    PyMem_Free(self->depths);
    PyMem_Free(self->limits);
    Py_XSETREF(self->buckets, buckets);
    self->dir = dir;
    self->depths = depths;
    self->limits = limits;
    self->mask = 0;
    limits[0] = bucket_limit(self, 0, 0);
    return 0;
}

static PyObject *
sd_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"items", "bucket_max_entries", NULL};
    PyObject *items = NULL;
    Py_ssize_t max_entries = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$n", kwlist, &items, &max_entries))
        return NULL;
    if (max_entries < 1) {
        PyErr_SetString(PyExc_ValueError, "bucket_max_entries must be at least 1");
        return NULL;
    }
    SplitDictObject *self = (SplitDictObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->max_entries = max_entries;
    self->salt = (size_t)self >> 4;
    if (reset(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
sd_traverse(SplitDictObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->buckets);
    return 0;
}

static int
sd_clear_refs(SplitDictObject *self)
{
    Py_CLEAR(self->buckets);
    PyMem_Free(self->dir);
    PyMem_Free(self->depths);
    PyMem_Free(self->limits);
    self->dir = NULL;
    self->depths = NULL;
    self->limits = NULL;
    self->mask = 0;
    return 0;
}

static void
sd_dealloc(SplitDictObject *self)
{
    PyObject_GC_UnTrack(self);
    sd_clear_refs(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline int
check_live(SplitDictObject *self)
{
    if (self->dir == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "SplitDict was cleared by the collector");
        return -1;
    }
    return 0;
}

/* The bucket of `key` (borrowed), its hash in *hash; NULL with an error set. */
static inline PyObject *
bucket_of(SplitDictObject *self, PyObject *key, Py_hash_t *hash)
{
    Py_hash_t h = PyObject_Hash(key);
    if (h == -1 || check_live(self) < 0)
        return NULL;
    *hash = h;
    return self->dir[(size_t)h & self->mask];
}

static void
set_key_error(PyObject *key)
{
    PyObject *tup = PyTuple_Pack(1, key);  /* a tuple key must not become the args */
    if (tup != NULL) {
        PyErr_SetObject(PyExc_KeyError, tup);
        Py_DECREF(tup);
    }
}

/* Split the bucket at `slot` by its next hash bit: 1 if split, 0 past MAX_DEPTH. */
static int
split(SplitDictObject *self, size_t slot)
{
    unsigned char depth = self->depths[slot];
    if (depth >= MAX_DEPTH)
        return 0;
    size_t size = self->mask + 1;
    if (((size_t)1 << depth) == size) {  /* it uses every bit: double the directory */
        PyObject **dir = PyMem_Realloc(self->dir, 2 * size * sizeof(PyObject *));
        if (dir == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->dir = dir;
        unsigned char *depths = PyMem_Realloc(self->depths, 2 * size);
        if (depths == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->depths = depths;
        Py_ssize_t *limits = PyMem_Realloc(self->limits, 2 * size * sizeof(Py_ssize_t));
        if (limits == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->limits = limits;
        memcpy(dir + size, dir, size * sizeof(PyObject *));
        memcpy(depths + size, depths, size);
        memcpy(limits + size, limits, size * sizeof(Py_ssize_t));
        size *= 2;
        self->mask = size - 1;
    }
    PyObject *old = self->dir[slot];
    size_t bit = (size_t)1 << depth;
    PyObject *low = PyDict_New();
    PyObject *high = PyDict_New();
    if (low == NULL || high == NULL)
        goto fail;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(old, &pos, &key, &value)) {
        Py_hash_t h = PyObject_Hash(key);
        if (h == -1 || PyDict_SetItem(((size_t)h & bit) ? high : low, key, value) < 0)
            goto fail;
    }
    Py_ssize_t index = -1;
    Py_ssize_t n = PyList_GET_SIZE(self->buckets);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_ITEM(self->buckets, i) == old) {
            index = i;
            break;
        }
    }
    if (index < 0 || PyList_Append(self->buckets, high) < 0)
        goto fail;
    /* Every slot that pointed at the old bucket shares its low `depth` bits. */
    size_t low_bits = slot & (bit - 1);
    Py_ssize_t low_limit = bucket_limit(self, low_bits, depth + 1);
    Py_ssize_t high_limit = bucket_limit(self, low_bits | bit, depth + 1);
    for (size_t i = low_bits; i < size; i += bit) {
        self->dir[i] = (i & bit) ? high : low;
        self->depths[i] = depth + 1;
        self->limits[i] = (i & bit) ? high_limit : low_limit;
    }
    Py_DECREF(high);  /* the list holds it */
    PyList_SetItem(self->buckets, index, low);  /* steals low, drops old */
    return 1;
fail:
    Py_XDECREF(low);
    Py_XDECREF(high);
    return -1;
}

static Py_ssize_t
sd_length(SplitDictObject *self)
{
    if (check_live(self) < 0)
        return -1;
    Py_ssize_t total = 0;
    Py_ssize_t n = PyList_GET_SIZE(self->buckets);
    for (Py_ssize_t i = 0; i < n; i++)
        total += PyDict_GET_SIZE(PyList_GET_ITEM(self->buckets, i));
    return total;
}

static PyObject *
sd_subscript(SplitDictObject *self, PyObject *key)
{
    Py_hash_t h;
    PyObject *bucket = bucket_of(self, key, &h);
    if (bucket == NULL)
        return NULL;
    PyObject *value = PyDict_GetItemWithError(bucket, key);
    if (value == NULL) {
        if (!PyErr_Occurred())
            set_key_error(key);
        return NULL;
    }
    return Py_NewRef(value);
}

static int
sd_ass_subscript(SplitDictObject *self, PyObject *key, PyObject *value)
{
    Py_hash_t h;
    PyObject *bucket = bucket_of(self, key, &h);
    if (bucket == NULL)
        return -1;
    if (value == NULL)
        return PyDict_DelItem(bucket, key);
    if (PyDict_SetItem(bucket, key, value) < 0)
        return -1;
    while (PyDict_GET_SIZE(bucket) > self->limits[(size_t)h & self->mask]) {
        /* (all of it may have gone to one side: then that side splits again) */
        int done = split(self, (size_t)h & self->mask);
        if (done <= 0)
            return done;
        bucket = self->dir[(size_t)h & self->mask];
    }
    return 0;
}

static int
sd_contains(SplitDictObject *self, PyObject *key)
{
    Py_hash_t h;
    PyObject *bucket = bucket_of(self, key, &h);
    if (bucket == NULL)
        return -1;
    return PyDict_Contains(bucket, key);
}

/* The argument check and lookup that get and pop share: -1 error, 0 missing, 1 found
 * (the bucket and the borrowed value then set). */
static int
lookup_args(SplitDictObject *self, PyObject *const *args, Py_ssize_t nargs,
            const char *name, PyObject **bucket, PyObject **value)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s expected 1 or 2 arguments", name);
        return -1;
    }
    Py_hash_t h;
    *bucket = bucket_of(self, args[0], &h);
    if (*bucket == NULL)
        return -1;
    *value = PyDict_GetItemWithError(*bucket, args[0]);
    if (*value == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return 1;
}

static PyObject *
sd_get(SplitDictObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *bucket, *value;
    int found = lookup_args(self, args, nargs, "get", &bucket, &value);
    if (found < 0)
        return NULL;
    if (!found)
        value = nargs == 2 ? args[1] : Py_None;
    return Py_NewRef(value);
}

static PyObject *
sd_pop(SplitDictObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *bucket, *value;
    int found = lookup_args(self, args, nargs, "pop", &bucket, &value);
    if (found < 0)
        return NULL;
    if (!found) {
        if (nargs == 2)
            return Py_NewRef(args[1]);
        set_key_error(args[0]);
        return NULL;
    }
    Py_INCREF(value);
    if (PyDict_DelItem(bucket, args[0]) < 0) {
        Py_DECREF(value);
        return NULL;
    }
    return value;
}

static PyObject *
sd_clear(SplitDictObject *self, PyObject *Py_UNUSED(ignored))
{
    if (reset(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Put `fresh` (a list as long as `buckets`) in place of the buckets, slot by slot. */
static PyObject *
sd_replace_buckets(SplitDictObject *self, PyObject *fresh)
{
    if (check_live(self) < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(self->buckets);
    if (!PyList_CheckExact(fresh) || PyList_GET_SIZE(fresh) != n) {
        PyErr_SetString(PyExc_ValueError, "one new bucket per bucket");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyDict_CheckExact(PyList_GET_ITEM(fresh, i))) {
            PyErr_SetString(PyExc_TypeError, "buckets are dicts");
            return NULL;
        }
    }
    PyObject *map = PyDict_New();  /* id of an old bucket -> its index */
    if (map == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyLong_FromVoidPtr(PyList_GET_ITEM(self->buckets, i));
        PyObject *v = PyLong_FromSsize_t(i);
        if (k == NULL || v == NULL || PyDict_SetItem(map, k, v) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_DECREF(map);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
    }
    for (size_t s = 0; s <= self->mask; s++) {
        PyObject *k = PyLong_FromVoidPtr(self->dir[s]);
        if (k == NULL) {
            Py_DECREF(map);
            return NULL;
        }
        PyObject *v = PyDict_GetItemWithError(map, k);
        Py_DECREF(k);
        if (v == NULL) {
            Py_DECREF(map);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "a slot without its bucket");
            return NULL;
        }
        self->dir[s] = PyList_GET_ITEM(fresh, PyLong_AsSsize_t(v));
    }
    Py_DECREF(map);
    Py_INCREF(fresh);
    Py_SETREF(self->buckets, fresh);
    Py_RETURN_NONE;
}

static PyMethodDef sd_methods[] = {
    {"get", (PyCFunction)(void (*)(void))sd_get, METH_FASTCALL, NULL},
    {"pop", (PyCFunction)(void (*)(void))sd_pop, METH_FASTCALL, NULL},
    {"clear", (PyCFunction)sd_clear, METH_NOARGS, NULL},
    {"_replace_buckets", (PyCFunction)sd_replace_buckets, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef sd_members[] = {
    {"_buckets", T_OBJECT, offsetof(SplitDictObject, buckets), READONLY, NULL},
    {"_mask", T_PYSSIZET, offsetof(SplitDictObject, mask), READONLY, NULL},
    {"bucket_max_entries", T_PYSSIZET, offsetof(SplitDictObject, max_entries), READONLY,
     NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMappingMethods sd_as_mapping = {
    (lenfunc)sd_length,
    (binaryfunc)sd_subscript,
    (objobjargproc)sd_ass_subscript,
};

static PySequenceMethods sd_as_sequence = {
    .sq_contains = (objobjproc)sd_contains,
};

static PyTypeObject SplitDictType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trioqueue.core._split_dict.SplitDictBase",
    .tp_basicsize = sizeof(SplitDictObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = sd_new,
    .tp_dealloc = (destructor)sd_dealloc,
    .tp_traverse = (traverseproc)sd_traverse,
    .tp_clear = (inquiry)sd_clear_refs,
    .tp_methods = sd_methods,
    .tp_members = sd_members,
    .tp_as_mapping = &sd_as_mapping,
    .tp_as_sequence = &sd_as_sequence,
    .tp_hash = PyObject_HashNotImplemented,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_split_dict", NULL, -1, NULL,
};

PyMODINIT_FUNC
PyInit__split_dict(void)
{
    if (PyType_Ready(&SplitDictType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "SplitDictBase", (PyObject *)&SplitDictType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
