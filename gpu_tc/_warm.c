/* The warm path of gpu_tc.einsum in C (gpu_tc.warm): a call of NumPy arrays whose plan
 * is cached runs here, with no Python frame of gpu_tc's own between the caller and the
 * plan's warm function; every other call goes to the Python function it wraps.
 *
 * The key is the CPU backend's warm key, (subscripts, then each array's shape, strides
 * and dtype), looked up in the plan cache level's dict of [plan, last-use tick] lists.
 * A hit takes the level's next tick and counts in its hits, as PlanCache.peek does. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

/* The most operands a warm key is made for here; calls of more take the Python path. */
#define MOST_OPERANDS 32

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;    /* the Python function: every call not served here */
    PyObject *array_type;  /* numpy.ndarray: operands of exactly this type are keyed */
    PyObject *level;       /* the cache level: its _entries, _ticks and _hits */
    PyObject *entries;     /* level._entries: key -> [plan, last-use tick] */
    PyObject *ticks;       /* level._ticks: the shared clock */
    PyObject *dict;        /* the instance's __dict__: __doc__, __name__, __wrapped__ */
    PyObject *weakrefs;    /* weak references to it, as to a function */
} WarmEinsum;

static PyObject *str_shape, *str_strides, *str_dtype, *str_fast, *str_hits, *one;

/* The warm key of the operands args[1:], or NULL (no error set) where one is not an
 * array of exactly array_type. */
static PyObject *warm_key(WarmEinsum *self, PyObject *const *args, Py_ssize_t nargs)
{
    for (Py_ssize_t i = 1; i < nargs; i++)
        if ((PyObject *)Py_TYPE(args[i]) != self->array_type)
            return NULL;
    PyObject *key = PyTuple_New(1 + 3 * (nargs - 1));
    if (key == NULL)
        return NULL;
    Py_INCREF(args[0]);
    PyTuple_SET_ITEM(key, 0, args[0]);
    Py_ssize_t slot = 1;
    for (Py_ssize_t i = 1; i < nargs; i++) {
        PyObject *names[3] = {str_shape, str_strides, str_dtype};
        for (int k = 0; k < 3; k++) {
            PyObject *value = PyObject_GetAttr(args[i], names[k]);
            if (value == NULL) {
                Py_DECREF(key);
                return NULL;
            }
            PyTuple_SET_ITEM(key, slot++, value);
        }
    }
    return key;
}

/* Mark ``entry`` as just used and count a hit in the level. 0, or -1 with an error. */
static int count_hit(WarmEinsum *self, PyObject *entry)
{
    PyObject *tick = PyIter_Next(self->ticks);
    if (tick == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the plan cache's clock stopped");
        return -1;
    }
    if (PyList_SetItem(entry, 1, tick) < 0)  /* steals tick */
        return -1;
    PyObject *hits = PyObject_GetAttr(self->level, str_hits);
    if (hits == NULL)
        return -1;
    PyObject *more = PyNumber_Add(hits, one);
    Py_DECREF(hits);
    if (more == NULL)
        return -1;
    int failed = PyObject_SetAttr(self->level, str_hits, more);
    Py_DECREF(more);
    return failed;
}

/* The result of a warm call, or NULL: with an error set where one was raised, without
 * one where the call is not warm here (then the fallback runs). */
static PyObject *warm_call(WarmEinsum *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *key = warm_key(self, args, nargs);
    if (key == NULL)
        return NULL;
    /* Owned at once: freeing the key, and every later step, may run Python code that
     * evicts the entry (an eviction while the plan runs leaves it to us). */
    PyObject *entry = Py_XNewRef(PyDict_GetItemWithError(self->entries, key));
    Py_DECREF(key);
    if (entry == NULL)
        return NULL;
    PyObject *result = NULL;
    if (PyList_CheckExact(entry) && PyList_GET_SIZE(entry) == 2) {
        PyObject *plan = Py_NewRef(PyList_GET_ITEM(entry, 0));
        PyObject *fast = PyObject_GetAttr(plan, str_fast);  /* NULL: its error is raised */
        Py_DECREF(plan);
        /* fast None: no warm function; the fallback runs the plan and counts the hit. */
        if (fast != NULL && fast != Py_None && count_hit(self, entry) == 0)
            result = PyObject_Vectorcall(fast, args + 1, (size_t)(nargs - 1), NULL);
        Py_XDECREF(fast);
    }
    Py_DECREF(entry);
    return result;
}

static PyObject *warm_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    WarmEinsum *self = (WarmEinsum *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if ((kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0) && nargs >= 2
            && nargs <= MOST_OPERANDS + 1 && PyUnicode_CheckExact(args[0])) {
        PyObject *result = warm_call(self, args, nargs);
        if (result != NULL || PyErr_Occurred())
            return result;
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *warm_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"fallback", "array_type", "level", NULL};
    PyObject *fallback, *array_type, *level;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:WarmEinsum", keywords, &fallback,
                                     &array_type, &level))
        return NULL;
    if (!PyCallable_Check(fallback) || !PyType_Check(array_type)) {
        PyErr_SetString(PyExc_TypeError,
                        "WarmEinsum(fallback, array_type, level): a callable and a type");
        return NULL;
    }
    PyObject *entries = PyObject_GetAttrString(level, "_entries");
    if (entries == NULL)
        return NULL;
    PyObject *ticks = PyObject_GetAttrString(level, "_ticks");
    if (ticks == NULL || !PyDict_CheckExact(entries) || !PyIter_Check(ticks)) {
        if (ticks != NULL)
            PyErr_SetString(PyExc_TypeError,
                            "WarmEinsum: the level needs a dict _entries and an iterator _ticks");
        Py_DECREF(entries);
        Py_XDECREF(ticks);
        return NULL;
    }
    WarmEinsum *self = (WarmEinsum *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(entries);
        Py_DECREF(ticks);
        return NULL;
    }
    self->vectorcall = warm_vectorcall;
    Py_INCREF(fallback);
    self->fallback = fallback;
    Py_INCREF(array_type);
    self->array_type = array_type;
    Py_INCREF(level);
    self->level = level;
    self->entries = entries;
    self->ticks = ticks;
    self->dict = NULL;
    self->weakrefs = NULL;
    return (PyObject *)self;
}

static int warm_traverse(WarmEinsum *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->array_type);
    Py_VISIT(self->level);
    Py_VISIT(self->entries);
    Py_VISIT(self->ticks);
    Py_VISIT(self->dict);
    return 0;
}

static int warm_clear(WarmEinsum *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->array_type);
    Py_CLEAR(self->level);
    Py_CLEAR(self->entries);
    Py_CLEAR(self->ticks);
    Py_CLEAR(self->dict);
    return 0;
}

static void warm_dealloc(WarmEinsum *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    warm_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Bound as a method where it is a class attribute, as a Python function would be. */
static PyObject *warm_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

/* As a function's: its module and name, and what it is. */
static PyObject *warm_repr(PyObject *self)
{
    PyObject *module = PyObject_GetAttrString(self, "__module__");
    PyObject *name = module == NULL ? NULL : PyObject_GetAttrString(self, "__qualname__");
    PyObject *text = name == NULL ? NULL : PyUnicode_FromFormat(
        "<function %S.%S, its warm calls of NumPy arrays in C>", module, name);
    Py_XDECREF(module);
    Py_XDECREF(name);
    return text;
}

/* Pickled by name (gpu_tc.einsum), as a function is. */
static PyObject *warm_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyMethodDef warm_methods[] = {
    {"__reduce__", warm_reduce, METH_NOARGS, "The qualified name: pickled as a global."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef warm_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WarmEinsumType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpu_tc._warm.WarmEinsum",
    .tp_doc = PyDoc_STR(
        "WarmEinsum(fallback, array_type, level): einsum whose warm calls of arrays of "
        "exactly array_type, with a plan cached in level, run in C; fallback serves the "
        "rest."),
    .tp_basicsize = sizeof(WarmEinsum),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = warm_new,
    .tp_traverse = (traverseproc)warm_traverse,
    .tp_clear = (inquiry)warm_clear,
    .tp_dealloc = (destructor)warm_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(WarmEinsum, vectorcall),
    .tp_dictoffset = offsetof(WarmEinsum, dict),
    .tp_weaklistoffset = offsetof(WarmEinsum, weakrefs),
    .tp_repr = warm_repr,
    .tp_descr_get = warm_get,
    .tp_methods = warm_methods,
    .tp_getset = warm_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_warm",
    "The warm path of gpu_tc.einsum in C (see gpu_tc/_warm.c and gpu_tc.warm).", -1, NULL,
};

PyMODINIT_FUNC PyInit__warm(void)
{
    str_shape = PyUnicode_InternFromString("shape");
    str_strides = PyUnicode_InternFromString("strides");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_fast = PyUnicode_InternFromString("fast");
    str_hits = PyUnicode_InternFromString("_hits");
    one = PyLong_FromLong(1);
    if (!str_shape || !str_strides || !str_dtype || !str_fast || !str_hits || !one)
        return NULL;
    if (PyType_Ready(&WarmEinsumType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WarmEinsumType);
    if (PyModule_AddObject(m, "WarmEinsum", (PyObject *)&WarmEinsumType) < 0) {
        Py_DECREF(&WarmEinsumType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
