/* Long strings and byte strings made a piece at a time (trioqueue.transport.long_strings).
 *
 * Python makes a str or bytes object in one call over all of its content: for a
 * 40 MB string in a frame, one step of the event loop of about 25 ms. Here the object
 * is allocated empty (new_ascii, new_bytes) and filled piece by piece (fill), so the
 * work is cut into slices with checkpoints between them.
 *
 * An object being filled must not be seen by anything else: fill refuses one that may
 * be shared (more references than the caller's variable and the call's argument), a
 * hashed or interned str, or another kind of object than new_ascii/new_bytes make. A str is only
 * filled with ASCII bytes (a compact ASCII str must hold ASCII only: other text is left
 * to the caller's other path), and fill says False, writing nothing, when a piece has
 * any other byte.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* The length argument of new_ascii / new_bytes; -1 with an exception set. */
static Py_ssize_t
length_of(PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return -1;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative length");
        return -1;
    }
    return n;
}

static PyObject *
new_ascii(PyObject *module, PyObject *arg)
{
    Py_ssize_t n = length_of(arg);
    /* left unwritten (zeroing would be one more pass over it, in one call): the caller
     * fills all of it before anything else sees it, or drops it unread */
    return n < 0 ? NULL : PyUnicode_New(n, 127);
}

static PyObject *
new_bytes(PyObject *module, PyObject *arg)
{
    Py_ssize_t n = length_of(arg);
    return n < 0 ? NULL : PyBytes_FromStringAndSize(NULL, n);
}

static int
all_ascii(const unsigned char *p, Py_ssize_t n)
{
    unsigned char seen = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        seen |= p[i];
    return seen < 0x80;
}

/* fill(target, offset, piece) -> bool */
static PyObject *
fill(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "fill(target, offset, piece)");
        return NULL;
    }
    PyObject *target = args[0];
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if (Py_REFCNT(target) > 2) {
        PyErr_SetString(PyExc_ValueError, "the object may be shared: not filled");
        return NULL;
    }
    char *data;
    Py_ssize_t size;
    int text;
    if (PyUnicode_CheckExact(target)) {
        if (!PyUnicode_IS_COMPACT_ASCII(target) || PyUnicode_CHECK_INTERNED(target)
                || ((PyASCIIObject *)target)->hash != -1) {
            PyErr_SetString(PyExc_ValueError, "not a str made by new_ascii");
            return NULL;
        }
        data = (char *)PyUnicode_DATA(target);
        size = PyUnicode_GET_LENGTH(target);
        text = 1;
    }
    else if (PyBytes_CheckExact(target)) {
        /* (its cached hash is not looked at: the field is deprecated, and a bytes
         * object that nothing else holds cannot have been hashed by anyone else) */
        data = PyBytes_AS_STRING(target);
        size = PyBytes_GET_SIZE(target);
        text = 0;
    }
    else {
        PyErr_SetString(PyExc_TypeError, "fill needs a str or bytes target");
        return NULL;
    }
    Py_buffer piece;
    if (PyObject_GetBuffer(args[2], &piece, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (offset < 0 || piece.len > size || offset > size - piece.len) {
        PyErr_SetString(PyExc_ValueError, "the piece does not fit at that offset");
    }
    else if (text && !all_ascii((const unsigned char *)piece.buf, piece.len)) {
        result = Py_NewRef(Py_False);
    }
    else {
        memcpy(data + offset, piece.buf, (size_t)piece.len);
        result = Py_NewRef(Py_True);
    }
    PyBuffer_Release(&piece);
    return result;
}

static PyMethodDef methods[] = {
    {"new_ascii", new_ascii, METH_O, "new_ascii(n): an ASCII str of n chars, to be filled."},
    {"new_bytes", new_bytes, METH_O, "new_bytes(n): a bytes of n bytes, to be filled."},
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL,
     "fill(target, offset, piece) -> bool: copy piece in at offset (False: not ASCII)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pieces", NULL, 0, methods,
};

PyMODINIT_FUNC
PyInit__pieces(void)
{
    return PyModule_Create(&module);
}
