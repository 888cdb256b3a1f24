/* What the compiled kernels (tile_copy.c, sums.c) share: their multiversioning, the
 * reading of int64 tables from buffers, the reach of offsets (to check them against the
 * buffers before any access), and OpenMP's thread count. Each extension includes it;
 * every function is static, so each keeps its own copy. */
#ifndef GPU_TC_KERNEL_COMMON_H
#define GPU_TC_KERNEL_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* The kernels are compiled for AVX-512 and AVX2 as well as the baseline, the best one
 * chosen when the module loads (GCC's function multiversioning, on x86-64). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

/* Widen [low, high] by the offsets 0 .. (extent - 1) * stride. */
static inline void reach(int64_t extent, int64_t stride, int64_t *low, int64_t *high)
{
    int64_t far = (extent - 1) * stride;
    if (far < 0)
        *low += far;
    else
        *high += far;
}

/* Widen [low, high] by the smallest and largest of n >= 1 table entries. */
static inline void table_reach(const int64_t *table, int64_t n, int64_t *low, int64_t *high)
{
    int64_t lo = table[0], hi = table[0];
    for (int64_t i = 1; i < n; i++) {
        lo = table[i] < lo ? table[i] : lo;
        hi = table[i] > hi ? table[i] : hi;
    }
    *low += lo;
    *high += hi;
}

/* An int64 table from a buffer of at least `need` entries; NULL with an error set. */
static inline const int64_t *table(Py_buffer *view, int64_t need, const char *name)
{
    if (view->itemsize != 8 || view->len < need * 8) {
        PyErr_Format(PyExc_ValueError, "%s: needs %lld int64 entries", name, (long long)need);
        return NULL;
    }
    return (const int64_t *)view->buf;
}

PyDoc_STRVAR(max_threads_doc,
"max_threads()\n--\n\n"
"OpenMP's thread count (OMP_NUM_THREADS, else one per CPU this process may use); 1 when\n"
"built without OpenMP.");

static PyObject *max_threads(PyObject *self, PyObject *unused)
{
#ifdef _OPENMP
    return PyLong_FromLong(omp_get_max_threads());
#else
    return PyLong_FromLong(1);
#endif
}

#endif
