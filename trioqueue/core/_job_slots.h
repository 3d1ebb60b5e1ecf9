/* What the two halves of trioqueue.core._job_slots share: a plan's steps, the Fast
 * callable's layout, and the functions the plan half (_job_slots_plan.c: parsing a plan,
 * the module) takes from the runtime half (_job_slots.c: running one). */
#ifndef TRIOQUEUE_JOB_SLOTS_H
#define TRIOQUEUE_JOB_SLOTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

enum kind { K_ALWAYS, K_IS_NOT, K_IS_NOT_NE, K_TRUTHY, K_FLOAT, K_FLOAT_NOT_NONE };
enum role { R_RECORD, R_WIRE, R_ADMIT };



typedef struct {
    Py_ssize_t offset;    /* of the slot in the object */
    PyMemberDef *member;  /* of `descr`, for the AttributeError of an unset slot */
    PyObject *descr;
    PyObject *key;        /* the dict key (NULL for admit) */
    PyObject *value;      /* the default tested against; admit: the default stored */
    int kind;             /* enum kind (record, wire) */
    Py_ssize_t arg;       /* admit: the argument stored, or -1 for `value` */
} Step;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int role;
    PyTypeObject *cls;
    PyObject *fallback;    /* the Python method: called for every other call */
    PyObject *base;        /* wire: the defaults' Job object; admit: the list attrs */
    PyTypeObject *wire_cls;
    Py_ssize_t name_step;  /* admit: the step of `name`, interned at the end */
    Py_ssize_t nargs;      /* admit: the arguments before `options` */
    Py_ssize_t n;
    Step *steps;
} FastObject;

extern PyTypeObject Fast_Type;
extern PyObject *empty_tuple;  /* made at import */

PyObject *fast_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                          PyObject *kwnames);
void free_steps(FastObject *f);

#endif
