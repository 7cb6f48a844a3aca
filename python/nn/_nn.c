/* _nn: the CPython binding of libnn that python/nn/__init__.py wraps.
 *
 * A C extension rather than ctypes: a call here converts its arguments with
 * the CPython and NumPy C APIs directly (no per-call ctypes structs), hands
 * the engine the arrays' own memory, and releases the GIL around every call
 * that waits on the engine.  Outputs are NumPy arrays allocated here and
 * filled by nn_predict_into; models whose output shapes are only known after
 * the run get the engine's buffers wrapped without a copy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

/* nn.Error subclasses by nn_status, handed over by __init__.py */
#define N_STATUS (NN_ERR_INTERNAL + 1)
static PyObject *error_class[N_STATUS];

static PyObject *raise_status(nn_status st) {
    PyObject *cls = st > NN_OK && st < N_STATUS && error_class[st] ? error_class[st] : PyExc_RuntimeError;
    PyObject *args = Py_BuildValue("(si)", nn_last_error(), (int)st);
    if (args) {
        PyErr_SetObject(cls, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyObject *set_errors(PyObject *self, PyObject *seq) {
    (void)self;
    PyObject *fast = PySequence_Fast(seq, "set_errors takes a sequence of classes");
    if (!fast) return NULL;
    if (PySequence_Fast_GET_SIZE(fast) != N_STATUS) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "set_errors takes %d classes", N_STATUS);
    }
    for (int i = 0; i < N_STATUS; i++) {
        PyObject *c = PySequence_Fast_GET_ITEM(fast, i);
        Py_XINCREF(c);
        Py_XSETREF(error_class[i], c == Py_None ? NULL : c);
        if (c == Py_None) Py_DECREF(c);
    }
    Py_DECREF(fast);
    Py_RETURN_NONE;
}

static int npy_type(nn_dtype t) {
    switch (t) {
    case NN_DTYPE_FLOAT: return NPY_FLOAT32;
    case NN_DTYPE_UINT8: return NPY_UINT8;
    case NN_DTYPE_INT8: return NPY_INT8;
    case NN_DTYPE_UINT16: return NPY_UINT16;
    case NN_DTYPE_INT16: return NPY_INT16;
    case NN_DTYPE_INT32: return NPY_INT32;
    case NN_DTYPE_INT64: return NPY_INT64;
    case NN_DTYPE_BOOL: return NPY_BOOL;
    case NN_DTYPE_FLOAT16: return NPY_FLOAT16;
    case NN_DTYPE_DOUBLE: return NPY_FLOAT64;
    case NN_DTYPE_UINT32: return NPY_UINT32;
    case NN_DTYPE_UINT64: return NPY_UINT64;
    default: return -1;
    }
}

typedef struct {
    PyObject_HEAD nn_model *m;
    int n_in, n_out;
    PyObject *cache_dir; /* bytes kept alive: options point into it */
} Model;

static int model_init(Model *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"path",        "batch",      "device", "threads", "optimize", "cache",    "cache_dir",
                            "micro_batch", "max_memory", "fp16",   "tf32",    "profile",  "winograd", "bf16",
                            NULL};
    PyObject *path = NULL, *cache_dir = NULL;
    const char *device = "cpu";
    nn_options opt = nn_options_default();
    long long max_memory = 0;
    int bf16 = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|isippO&iLppppp", names, PyUnicode_FSConverter, &path, &opt.batch,
                                     &device, &opt.threads, &opt.optimize, &opt.cache, PyUnicode_FSConverter,
                                     &cache_dir, &opt.micro_batch, &max_memory, &opt.fp16, &opt.tf32, &opt.profile,
                                     &opt.winograd, &bf16))
        return -1;
    opt.precision = bf16 ? NN_PRECISION_BF16 : NN_PRECISION_FP32;
    if (self->m) {
        Py_DECREF(path);
        Py_XDECREF(cache_dir);
        PyErr_SetString(PyExc_RuntimeError, "model already loaded");
        return -1;
    }
    opt.device = device;
    opt.max_memory = max_memory;
    opt.cache_dir = cache_dir ? PyBytes_AS_STRING(cache_dir) : NULL;
    nn_model *m = NULL;
    nn_status st;
    PyThreadState *ts = PyEval_SaveThread();
    st = nn_load(PyBytes_AS_STRING(path), &opt, &m);
    PyEval_RestoreThread(ts);
    Py_DECREF(path);
    if (st != NN_OK) {
        Py_XDECREF(cache_dir);
        raise_status(st);
        return -1;
    }
    for (int i = 0; i < nn_input_count(m) + nn_output_count(m); i++) {
        nn_tensor t;
        int in = i < nn_input_count(m);
        if (in ? nn_input_info(m, i, NULL, &t) : nn_output_info(m, i - nn_input_count(m), NULL, &t)) continue;
        if (t.dtype != NN_DTYPE_UNDEFINED && npy_type(t.dtype) < 0) { /* undefined: known after a run */
            PyErr_Format(error_class[NN_ERR_UNSUPPORTED] ? error_class[NN_ERR_UNSUPPORTED] : PyExc_RuntimeError,
                         "the Python binding has no NumPy type for dtype %s", nn_dtype_name(t.dtype));
            nn_free(m);
            Py_XDECREF(cache_dir);
            return -1;
        }
    }
    self->m = m;
    self->n_in = nn_input_count(m);
    self->n_out = nn_output_count(m);
    self->cache_dir = cache_dir;
    return 0;
}

static void model_dealloc(Model *self) {
    nn_free(self->m);
    Py_XDECREF(self->cache_dir);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *info_list(Model *self, int outputs) {
    int n = outputs ? self->n_out : self->n_in;
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        const char *name;
        nn_tensor t;
        nn_status st = outputs ? nn_output_info(self->m, i, &name, &t) : nn_input_info(self->m, i, &name, &t);
        if (st != NN_OK) {
            Py_DECREF(list);
            return raise_status(st);
        }
        PyObject *dims = PyTuple_New(t.ndim > 0 ? t.ndim : 0);
        for (int d = 0; dims && d < t.ndim; d++)
            PyTuple_SET_ITEM(dims, d, PyLong_FromLongLong(t.dims[d]));
        int axis = outputs ? nn_output_batch_axis(self->m, i) : nn_input_batch_axis(self->m, i);
        PyObject *item = dims ? Py_BuildValue("(sNiii)", name, dims, npy_type(t.dtype), axis, t.ndim) : NULL;
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* (name, dims, numpy type number, batch axis, ndim) per input / output */
static PyObject *model_inputs(Model *self, PyObject *unused) {
    (void)unused;
    return info_list(self, 0);
}
static PyObject *model_outputs(Model *self, PyObject *unused) {
    (void)unused;
    return info_list(self, 1);
}

static PyObject *model_stats(Model *self, PyObject *unused) {
    (void)unused;
    nn_model_stats s;
    nn_status st = nn_model_get_stats(self->m, &s);
    if (st != NN_OK) return raise_status(st);
    static const char *const cache[] = {"off", "miss", "hit"};
    return Py_BuildValue("{s:i,s:i,s:L,s:L,s:i,s:i,s:i,s:i,s:L,s:L,s:s,s:z,s:z}", "nodes", s.nodes, "nodes_parsed",
                         s.nodes_parsed, "parameters", (long long)s.parameters, "arena_bytes", (long long)s.arena_bytes,
                         "batch", s.batch, "plan_batch", s.plan_batch, "lanes", s.lanes, "threads", s.threads,
                         "weight_bytes", (long long)s.weight_bytes, "workspace_bytes", (long long)s.workspace_bytes,
                         "cache", s.cache <= NN_CACHE_HIT ? cache[s.cache] : "?", "cache_path", s.cache_path,
                         "cache_warning", s.cache_warning);
}

static PyObject *model_profile(Model *self, PyObject *unused) {
    (void)unused;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return PyErr_NoMemory();
    nn_status st = nn_profile_print(self->m, f);
    fclose(f);
    PyObject *r = st == NN_OK ? PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace") : raise_status(st);
    free(buf);
    return r;
}

static PyObject *model_index(Model *self, PyObject *args) {
    const char *name;
    int outputs = 0;
    if (!PyArg_ParseTuple(args, "s|p", &name, &outputs)) return NULL;
    int i = outputs ? nn_output_index(self->m, name) : nn_input_index(self->m, name);
    return i < 0 ? raise_status(NN_ERR_ARG) : PyLong_FromLong(i);
}

/* The inputs as arrays of the model's dtypes, C-contiguous: the caller's
 * own arrays when they already are, converted copies otherwise. */
static int take_inputs(Model *self, PyObject *seq, PyObject **arrays, nn_tensor *t) {
    PyObject *fast = PySequence_Fast(seq, "inputs must be a sequence of arrays");
    if (!fast) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != self->n_in) {
        Py_DECREF(fast);
        PyErr_Format(error_class[NN_ERR_ARG] ? error_class[NN_ERR_ARG] : PyExc_ValueError,
                     "model takes %d inputs, got %zd", self->n_in, PySequence_Fast_GET_SIZE(fast));
        return -1;
    }
    for (int i = 0; i < self->n_in; i++) {
        nn_tensor info;
        const char *name;
        nn_input_info(self->m, i, &name, &info);
        /* converted as NumPy's same-kind casting allows (float64 to float32, int to float), refused otherwise */
        PyObject *any = PyArray_FROM_O(PySequence_Fast_GET_ITEM(fast, i));
        if (!any) goto fail;
        PyArray_Descr *want = PyArray_DescrFromType(npy_type(info.dtype));
        if (!PyArray_CanCastTypeTo(PyArray_DESCR((PyArrayObject *)any), want, NPY_SAME_KIND_CASTING)) {
            PyErr_Format(error_class[NN_ERR_ARG] ? error_class[NN_ERR_ARG] : PyExc_TypeError,
                         "input '%s' must be %s, got an array of %S", name, nn_dtype_name(info.dtype),
                         (PyObject *)PyArray_DESCR((PyArrayObject *)any));
            Py_DECREF(want);
            Py_DECREF(any);
            goto fail;
        }
        arrays[i] = PyArray_FromAny(any, want, 0, 0, NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST, NULL); /* steals want */
        Py_DECREF(any);
        if (!arrays[i]) goto fail;
        PyArrayObject *a = (PyArrayObject *)arrays[i];
        if (PyArray_NDIM(a) > NN_MAX_DIMS) {
            PyErr_Format(error_class[NN_ERR_SHAPE] ? error_class[NN_ERR_SHAPE] : PyExc_ValueError,
                         "input '%s' has %d dimensions, more than %d", name, PyArray_NDIM(a), NN_MAX_DIMS);
            Py_CLEAR(arrays[i]);
            goto fail;
        }
        t[i] = (nn_tensor){.dtype = info.dtype, .ndim = PyArray_NDIM(a), .data = PyArray_DATA(a)};
        for (int d = 0; d < t[i].ndim; d++)
            t[i].dims[d] = PyArray_DIM(a, d);
        continue;
    fail:
        for (int j = 0; j < i; j++)
            Py_CLEAR(arrays[j]);
        Py_DECREF(fast);
        return -1;
    }
    Py_DECREF(fast);
    return 0;
}

enum call { CALL_INTO, CALL_SHAPES, CALL_ALLOC };

/* The engine calls that wait (on the model's lock, then the computation)
 * run without the GIL, so other Python threads go on meanwhile. */
static nn_status call_nogil(enum call c, nn_model *m, const nn_tensor *in, int n_in, nn_tensor *out, int n_out) {
    nn_status st;
    PyThreadState *ts = PyEval_SaveThread();
    st = c == CALL_INTO     ? nn_predict_into(m, in, n_in, out, n_out)
         : c == CALL_SHAPES ? nn_output_shapes(m, in, n_in, out, n_out)
                            : nn_predict(m, in, n_in, out, n_out);
    PyEval_RestoreThread(ts);
    return st;
}

static void free_engine_buffer(PyObject *capsule) { free(PyCapsule_GetPointer(capsule, NULL)); }

/* An array over a buffer nn_predict allocated, freed with the array. */
static PyObject *wrap_engine_output(nn_tensor *t) {
    npy_intp dims[NN_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
        dims[d] = (npy_intp)t->dims[d];
    void *data = t->data;
    PyObject *cap = PyCapsule_New(data, NULL, free_engine_buffer);
    if (!cap) return NULL;
    t->data = NULL; /* the capsule owns it now */
    PyObject *arr = PyArray_SimpleNewFromData(t->ndim, dims, npy_type(t->dtype), data);
    if (!arr || PyArray_SetBaseObject((PyArrayObject *)arr, cap) < 0) {
        Py_XDECREF(arr);
        Py_DECREF(cap);
        return NULL;
    }
    return arr;
}

/* run(inputs[, outputs]): inputs in the model's order; outputs, when given,
 * are C-contiguous writable arrays of the exact shapes to fill (the async
 * pipeline's slices).  Returns the tuple of output arrays. */
static PyObject *model_run(Model *self, PyObject *args) {
    PyObject *seq, *outs = Py_None;
    if (!PyArg_ParseTuple(args, "O|O", &seq, &outs)) return NULL;
    PyObject *arrays[64] = {0}, *results = NULL;
    nn_tensor tin[64], tout[64];
    if (self->n_in > 64 || self->n_out > 64)
        return PyErr_Format(PyExc_ValueError, "the binding takes at most 64 inputs and outputs");
    if (take_inputs(self, seq, arrays, tin) < 0) return NULL;
    nn_status st = NN_OK;
    results = PyTuple_New(self->n_out);
    if (!results) goto done;
    if (outs != Py_None) {
        PyObject *fast = PySequence_Fast(outs, "outputs must be a sequence of arrays");
        if (!fast) goto fail;
        int ok = PySequence_Fast_GET_SIZE(fast) == self->n_out;
        for (int i = 0; ok && i < self->n_out; i++) {
            PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
            ok = PyArray_Check(o) && PyArray_ISCARRAY((PyArrayObject *)o) &&
                 PyArray_NDIM((PyArrayObject *)o) <= NN_MAX_DIMS;
            if (!ok) break;
            PyArrayObject *a = (PyArrayObject *)o;
            nn_tensor info;
            nn_output_info(self->m, i, NULL, &info);
            ok = PyArray_TYPE(a) == npy_type(info.dtype);
            tout[i] = (nn_tensor){.dtype = info.dtype, .ndim = PyArray_NDIM(a), .data = PyArray_DATA(a)};
            for (int d = 0; d < tout[i].ndim; d++)
                tout[i].dims[d] = PyArray_DIM(a, d);
            Py_INCREF(o);
            PyTuple_SET_ITEM(results, i, o);
        }
        Py_DECREF(fast);
        if (!ok) {
            PyErr_Format(error_class[NN_ERR_ARG] ? error_class[NN_ERR_ARG] : PyExc_ValueError,
                         "outputs must be %d C-contiguous writable arrays of the outputs' dtypes", self->n_out);
            goto fail;
        }
        st = call_nogil(CALL_INTO, self->m, tin, self->n_in, tout, self->n_out);
        goto done;
    }
    st = call_nogil(CALL_SHAPES, self->m, tin, self->n_in, tout, self->n_out);
    if (st == NN_OK) {
        for (int i = 0; i < self->n_out; i++) {
            npy_intp dims[NN_MAX_DIMS];
            for (int d = 0; d < tout[i].ndim; d++)
                dims[d] = (npy_intp)tout[i].dims[d];
            PyObject *a = PyArray_SimpleNew(tout[i].ndim, dims, npy_type(tout[i].dtype));
            if (!a) goto fail;
            tout[i].data = PyArray_DATA((PyArrayObject *)a);
            PyTuple_SET_ITEM(results, i, a);
        }
        st = call_nogil(CALL_INTO, self->m, tin, self->n_in, tout, self->n_out);
        goto done;
    }
    if (st != NN_ERR_UNSUPPORTED) goto done;
    /* shapes known only after the run: the engine allocates, the arrays adopt its buffers */
    st = call_nogil(CALL_ALLOC, self->m, tin, self->n_in, tout, self->n_out);
    if (st != NN_OK) goto done;
    for (int i = 0; i < self->n_out; i++) {
        PyObject *a = results ? wrap_engine_output(&tout[i]) : NULL;
        if (!a) {
            for (int j = i; j < self->n_out; j++)
                nn_tensor_release(&tout[j]);
            goto fail;
        }
        PyTuple_SET_ITEM(results, i, a);
    }
done:
    for (int i = 0; i < self->n_in; i++)
        Py_XDECREF(arrays[i]);
    if (st != NN_OK) {
        Py_XDECREF(results);
        return raise_status(st);
    }
    return results;
fail:
    for (int i = 0; i < self->n_in; i++)
        Py_XDECREF(arrays[i]);
    Py_XDECREF(results);
    return NULL;
}

/* output_shapes(inputs): the shapes run would return, as tuples; None when
 * they depend on run-time values. */
static PyObject *model_output_shapes(Model *self, PyObject *seq) {
    PyObject *arrays[64] = {0};
    nn_tensor tin[64], tout[64];
    if (self->n_in > 64 || self->n_out > 64)
        return PyErr_Format(PyExc_ValueError, "the binding takes at most 64 inputs and outputs");
    if (take_inputs(self, seq, arrays, tin) < 0) return NULL;
    nn_status st;
    st = call_nogil(CALL_SHAPES, self->m, tin, self->n_in, tout, self->n_out);
    for (int i = 0; i < self->n_in; i++)
        Py_XDECREF(arrays[i]);
    if (st == NN_ERR_UNSUPPORTED) Py_RETURN_NONE;
    if (st != NN_OK) return raise_status(st);
    PyObject *list = PyList_New(self->n_out);
    for (int i = 0; list && i < self->n_out; i++) {
        PyObject *dims = PyTuple_New(tout[i].ndim);
        for (int d = 0; dims && d < tout[i].ndim; d++)
            PyTuple_SET_ITEM(dims, d, PyLong_FromLongLong(tout[i].dims[d]));
        if (!dims) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, dims);
    }
    return list;
}

static PyMethodDef model_methods[] = {
    {"inputs", (PyCFunction)model_inputs, METH_NOARGS, "inputs as (name, dims, type number, batch axis, ndim)"},
    {"outputs", (PyCFunction)model_outputs, METH_NOARGS, "outputs as (name, dims, type number, batch axis, ndim)"},
    {"stats", (PyCFunction)model_stats, METH_NOARGS, "nn_model_get_stats as a dict"},
    {"profile", (PyCFunction)model_profile, METH_NOARGS, "nn_profile_print as a string"},
    {"index", (PyCFunction)model_index, METH_VARARGS, "index(name, outputs=False)"},
    {"run", (PyCFunction)model_run, METH_VARARGS, "run(inputs[, outputs]) -> tuple of arrays"},
    {"output_shapes", (PyCFunction)model_output_shapes, METH_O, "output_shapes(inputs) -> list of tuples or None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nn._nn.Model",
    .tp_basicsize = sizeof(Model),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A loaded nn model (use nn.load)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)model_init,
    .tp_dealloc = (destructor)model_dealloc,
    .tp_methods = model_methods,
};

static PyMethodDef module_methods[] = {
    {"set_errors", set_errors, METH_O, "the exception class for each nn_status"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "nn._nn", "libnn's C API", -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__nn(void) {
    import_array();
    if (PyType_Ready(&ModelType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (!mod) return NULL;
    Py_INCREF(&ModelType);
    if (PyModule_AddObject(mod, "Model", (PyObject *)&ModelType) < 0 ||
        PyModule_AddStringConstant(mod, "version", NN_VERSION_STRING) < 0) {
        Py_DECREF(&ModelType);
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
