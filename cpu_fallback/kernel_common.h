/* What the compiled kernels (tile_copy.c, sums.c, pairwise.c, small_k.c) share: their
 * multiversioning and the choice of their hand-built variants, the reading of int64
 * tables from buffers, the memory a strided array spans, the reach of offsets (to check
 * them against the buffers before any access), OpenMP's thread count, and where a
 * parallel region's workers run. Each extension includes it; every function is static,
 * so each keeps its own copy. */
#ifndef GPU_TC_KERNEL_COMMON_H
#define GPU_TC_KERNEL_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef __linux__
#include <sched.h>
#include <unistd.h>
#endif

/* The kernels are compiled for AVX-512 and AVX2 as well as the baseline, the best one
 * chosen when the module loads (GCC's function multiversioning, on x86-64). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

/* The hand-built variants of small_k.c's and pairwise.c's loops: each function compiled
 * for one instruction set, the widest one this CPU runs chosen when the module loads. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ISA_AVX512 __attribute__((target("avx512f")))
#define ISA_AVX2 __attribute__((target("avx2,fma")))
#define HAVE_ISAS 1
#else
#define ISA_AVX512
#define ISA_AVX2
#define HAVE_ISAS 0
#endif

enum { BUILD_BASELINE, BUILD_AVX2, BUILD_AVX512 };

/* The widest build this CPU runs, or a narrower one that GPU_TC_KERNEL_ISA names
 * ("avx2" or "baseline"; another value is ignored): how the tests run every build on
 * one host. */
static inline int widest_build(void)
{
#if HAVE_ISAS
    const char *cap = getenv("GPU_TC_KERNEL_ISA");
    const int baseline = cap != NULL && strcmp(cap, "baseline") == 0;
    const int avx512 = !baseline && !(cap != NULL && strcmp(cap, "avx2") == 0);
    __builtin_cpu_init();
    if (avx512 && __builtin_cpu_supports("avx512f"))
        return BUILD_AVX512;
    if (!baseline && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return BUILD_AVX2;
#endif
    return BUILD_BASELINE;
}

/* a + b, held at INT64_MAX or INT64_MIN where it would overflow: a reach that does not
 * fit in int64 then fails every bounds check instead of wrapping into one that passes. */
static inline int64_t saturated_add(int64_t a, int64_t b)
{
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return sum;
}

/* Widen [low, high] by the offsets 0 .. (extent - 1) * stride (extent >= 1). */
static inline void reach(int64_t extent, int64_t stride, int64_t *low, int64_t *high)
{
    int64_t far;
    if (__builtin_mul_overflow(extent - 1, stride, &far))
        far = stride > 0 ? INT64_MAX : INT64_MIN;
    if (far < 0)
        *low = saturated_add(*low, far);
    else
        *high = saturated_add(*high, far);
}

/* Widen [low, high] by the smallest and largest of n >= 1 table entries. */
static inline void table_reach(const int64_t *table, int64_t n, int64_t *low, int64_t *high)
{
    int64_t lo = table[0], hi = table[0];
    for (int64_t i = 1; i < n; i++) {
        lo = table[i] < lo ? table[i] : lo;
        hi = table[i] > hi ? table[i] : hi;
    }
    *low = saturated_add(*low, lo);
    *high = saturated_add(*high, hi);
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

/* The memory an array's view spans, for offsets that count `size`-byte elements from
 * its lowest address, `base` such elements before its element 0: the array's strided
 * buffer in *view (released by the caller), its lowest address in *origin and the
 * elements from there to its highest, + 1, in *len. Every address in that span lies in
 * the array's own memory, so a program checked against *len reads and writes nothing
 * else (a view's owner is never needed: a trace reads a matrix's diagonal through the
 * diagonal itself). 0, or -1 with an error set and nothing held: the array exports no
 * such buffer (a read-only one asked to be written), has no element, or its element
 * size, a stride, or its base differs from the layout's. */
static inline int strided_memory(PyObject *array, int writable, Py_ssize_t size,
                                 int64_t base, Py_buffer *view, char **origin,
                                 int64_t *len)
{
    if (PyObject_GetBuffer(array, view, PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    int64_t low = 0, high = 0;
    int fits = view->itemsize == size && view->len > 0;
    for (int i = 0; fits && i < view->ndim; i++) {
        fits = view->strides[i] % size == 0;
        reach(view->shape[i], view->strides[i], &low, &high);
    }
    if (!fits || low / size != -base) {
        PyErr_Format(PyExc_ValueError,
                     "the array's elements, strides or start differ from the layout's "
                     "(%zd-byte elements, element 0 %lld elements above the lowest address)",
                     size, (long long)base);
        PyBuffer_Release(view);
        return -1;
    }
    *origin = (char *)view->buf + low;
    *len = (high - low) / size + 1;
    return 0;
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

/* Keeping a team's workers off the CPU of the thread that launches the region.
 *
 * When another thread keeps a CPU busy (OpenBLAS's idle workers spin, yielding, for
 * about 0.1 s after each threaded BLAS call), Linux wakes an OpenMP worker onto the CPU
 * of the thread that woke it: both then share one CPU while libgomp's waits spin on it
 * (a 768 x 12 x 768 small-K GEMM on 2 cores: 0.86-0.88 ms a call, 0.20-0.22 ms apart,
 * medians). A worker that finds itself on the launcher's CPU therefore narrows its own
 * affinity to the CPUs the main thread may use (what taskset or the main thread's own
 * setting allows), less that one, and keeps it until it next lands on its launcher's
 * CPU. The launcher is never narrowed. Nothing moves where OpenMP binds its threads
 * itself (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY). A launcher pinned apart from
 * the main thread has its workers' moves bounded by the main thread's CPUs, not its own.
 * The workers are libgomp's, shared with any library of the process that loads the same
 * libgomp.so.1 (torch's wheels do): its regions find them where these left them (torch's
 * own times beside these kernels held or improved, benchmarks/results/xeon-avx512/
 * worker-placement). Costs a sched_getcpu per thread per region, two system calls when a
 * worker moves. */
#if defined(__linux__) && defined(_OPENMP)
/* The CPU that the workers of the region the caller is about to launch should leave:
 * the caller's; -1 where it is not known or OpenMP binds the region's threads. */
static inline int launcher_cpu(void)
{
    return omp_get_proc_bind() == omp_proc_bind_false ? sched_getcpu() : -1;
}

/* Called by every thread of a region at its start with launcher_cpu()'s value: a worker
 * running on that CPU moves off it. */
static inline void leave_cpu(int cpu)
{
    if (cpu < 0 || omp_get_thread_num() == 0 || sched_getcpu() != cpu)
        return;
    cpu_set_t allowed;
    if (sched_getaffinity(getpid(), sizeof allowed, &allowed) != 0)
        return;
    CPU_CLR(cpu, &allowed);
    if (CPU_COUNT(&allowed) > 0)
        sched_setaffinity(0, sizeof allowed, &allowed);
}
#else
static inline int launcher_cpu(void)
{
    return -1;
}

static inline void leave_cpu(int cpu)
{
    (void)cpu;
}
#endif

#endif
