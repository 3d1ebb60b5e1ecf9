/* The C form of trioqueue.core.presized.presized_dict: an empty dict whose table already
 * holds `count` entries, so that filling it a key at a time never resizes it (each
 * resize copies every entry in one call: about 12 ms at 600,000 keys).
 *
 * CPython has no public call for that. _PyDict_NewPresized (exported by 3.11) stops at
 * a table of 2**17 slots (87,381 entries), so a larger map still grows by resizes. On
 * CPython 3.11 this file therefore makes the table itself, exactly as the interpreter's
 * own new_keys_object does (the layout of its internal header, pycore_dict.h: a compile
 * error, not a wrong dict, if that layout moves), and puts it in a new empty dict in
 * place of the shared empty table. On any other version it answers
 * _PyDict_NewPresized's dict, or a plain one; the Python module holds the same
 * behaviour for machines that cannot build this. tests/core/test_presized.py checks
 * both: the same dicts, and no growth while `count` keys go in.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(Py_LIMITED_API)
#define OWN_TABLE 1
#define Py_BUILD_CORE 1
#include "internal/pycore_dict.h"
#undef Py_BUILD_CORE
#else
#define OWN_TABLE 0
#endif

/* The largest table made here: 2**23 slots, 5.6M entries (a job's data is at most 10M
 * characters of JSON, so at most 2M entries of a map). The caller bounds the count by
 * what its payload can hold; this is only the last guard. */
#define MAX_LOG2_SIZE 23

#if OWN_TABLE
/* As 3.11's new_keys_object, for a table of GENERAL kind (any key: a map decoded from
 * msgpack or CBOR may have keys that are not str) of 2**log2_size slots. */
static PyDictKeysObject *
new_table(uint8_t log2_size)
{
    Py_ssize_t usable = ((Py_ssize_t)1 << log2_size) * 2 / 3;  /* USABLE_FRACTION */
    uint8_t log2_bytes;
    if (log2_size < 8)
        log2_bytes = log2_size;
    else if (log2_size < 16)
        log2_bytes = log2_size + 1;
    else
        log2_bytes = log2_size + 2;  /* 4-byte indices (log2_size < 32 here) */
    size_t index_bytes = (size_t)1 << log2_bytes;
    size_t entry_bytes = sizeof(PyDictKeyEntry) * (size_t)usable;
    /* calloc: the entries zeroed as new_keys_object zeroes them, but fresh memory
     * comes zeroed by the system, its pages faulted in as the entries are filled (a
     * slice at a time) rather than all here */
    PyDictKeysObject *keys = PyObject_Calloc(1, sizeof(PyDictKeysObject) + index_bytes
                                             + entry_bytes);
    if (keys == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
#ifdef Py_REF_DEBUG
    _Py_RefTotal++;
#endif
    keys->dk_refcnt = 1;
    keys->dk_log2_size = log2_size;
    keys->dk_log2_index_bytes = log2_bytes;
    keys->dk_kind = DICT_KEYS_GENERAL;
    keys->dk_nentries = 0;
    keys->dk_usable = usable;
    keys->dk_version = 0;
    memset(&keys->dk_indices[0], 0xff, index_bytes);  /* every slot DKIX_EMPTY */
    return keys;
}
#endif

static PyObject *
presized_dict(PyObject *module, PyObject *arg)
{
    Py_ssize_t count = PyLong_AsSsize_t(arg);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must not be negative");
        return NULL;
    }
#if OWN_TABLE
    /* 2**17 slots: what _PyDict_NewPresized gives at most */
    if (count > ((Py_ssize_t)1 << 17) * 2 / 3) {
        uint8_t log2_size = 18;
        while (log2_size < MAX_LOG2_SIZE
               && ((Py_ssize_t)1 << log2_size) * 2 / 3 < count)
            log2_size++;
        PyDictKeysObject *keys = new_table(log2_size);
        if (keys == NULL)
            return NULL;
        PyObject *made = PyDict_New();
        if (made == NULL) {
            PyObject_Free(keys);
#ifdef Py_REF_DEBUG
            _Py_RefTotal--;
#endif
            return NULL;
        }
        PyDictObject *dict = (PyDictObject *)made;
        /* A new dict shares the interpreter's static empty table (one reference of it,
         * never its last: the static object holds one of its own) and has no values
         * array; it takes the new table in its place. */
        assert(dict->ma_used == 0 && dict->ma_values == NULL);
        assert(dict->ma_keys->dk_refcnt > 1);
        dict->ma_keys->dk_refcnt--;
#ifdef Py_REF_DEBUG
        _Py_RefTotal--;
#endif
        dict->ma_keys = keys;
        return made;
    }
#endif
    return _PyDict_NewPresized(count);
}

static PyMethodDef methods[] = {
    {"presized_dict", presized_dict, METH_O,
     "presized_dict(count) -> an empty dict that holds count entries without growing"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_presized",
    "An empty dict sized for a known count (see trioqueue/core/presized.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__presized(void)
{
    return PyModule_Create(&module);
}
