/* cpu_fallback._sums: the compiled strided sums of cpu_fallback.sum_kernel (the
 * pairwise ones are cpu_fallback._pairwise, pairwise.c).
 *
 * strided() runs the loop nest of a SumLayout (cpu_fallback/sum_layout.py): for each
 * outer index k, the source rows at kept_src[k] + summed_src[r] (n elements at stride
 * ss) are summed over r into the destination row at kept_dst[k] (stride ds), or, with
 * the inner axis summed too, into the one element dst[kept_dst[k]]. Five inner loops
 * (KIND_*) match cpu_fallback.sum_kernel's kinds. Rows one step apart are placed by the
 * step, and contiguous float and double rows of 64-512 bytes summed in vector registers
 * (register_rows.h).
 *
 * With threads > 0 the outer indices are shared among that many OpenMP threads, in
 * parts that a thread takes when it is free, each writing its own outputs, or (split)
 * the middle rows, each thread summing its share into its own copy of the destination,
 * the copies then added in order; 0 runs on the calling thread, without a parallel
 * region (a forked child must not start one). The GIL is released while they sum;
 * every offset is checked against the buffers first.
 */
#include "kernel_common.h"
#include "strided_loops.h"

#include <complex.h>
#include <stdlib.h>
#include <string.h>

typedef void (*StridedFn)(const void *, void *, const Nest *, int64_t, int64_t);

/* The source and destination types, as NumPy names them (kind and bytes). */
enum { T_I1, T_U1, T_I2, T_U2, T_I4, T_U4, T_I8, T_U8, T_F4, T_F8, T_C8, T_C16, T_COUNT };
static const char *type_names[T_COUNT] = {"i1", "u1", "i2", "u2", "i4", "u4",
                                          "i8", "u8", "f4", "f8", "c8", "c16"};

/* One function per pair: every type into itself, every integer into a 64-bit one,
 * float32 into float64, complex64 into complex128. */
#define SAME(T, TYPE, ACC)                                                                 \
    DEFINE_STRIDED(strided_##T##_##T, TYPE, ACC, TYPE, NO_REGISTER_ROWS)
SAME(i1, int8_t, uint64_t)
SAME(u1, uint8_t, uint64_t)
SAME(i2, int16_t, uint64_t)
SAME(u2, uint16_t, uint64_t)
SAME(i4, int32_t, uint64_t)
SAME(u4, uint32_t, uint64_t)
SAME(i8, int64_t, uint64_t)
SAME(u8, uint64_t, uint64_t)
DEFINE_STRIDED(strided_f4_f4, float, float, float, float_rows_in_registers)
DEFINE_STRIDED(strided_f8_f8, double, double, double, double_rows_in_registers)
SAME(c8, float complex, float complex)
SAME(c16, double complex, double complex)
#define WIDE(T, TYPE)                                                                      \
    DEFINE_STRIDED(strided_##T##_i8, TYPE, uint64_t, int64_t, NO_REGISTER_ROWS)            \
    DEFINE_STRIDED(strided_##T##_u8, TYPE, uint64_t, uint64_t, NO_REGISTER_ROWS)
WIDE(i1, int8_t)
WIDE(u1, uint8_t)
WIDE(i2, int16_t)
WIDE(u2, uint16_t)
WIDE(i4, int32_t)
WIDE(u4, uint32_t)
DEFINE_STRIDED(strided_i8_u8, int64_t, uint64_t, uint64_t, NO_REGISTER_ROWS)
DEFINE_STRIDED(strided_u8_i8, uint64_t, uint64_t, int64_t, NO_REGISTER_ROWS)
DEFINE_STRIDED(strided_f4_f8, float, double, double, NO_REGISTER_ROWS)
DEFINE_STRIDED(strided_c8_c16, float complex, double complex, double complex, NO_REGISTER_ROWS)

#define F(name) ((StridedFn)(name))
static StridedFn strided_fn(int s, int d)
{
    static StridedFn same[T_COUNT] = {
        F(strided_i1_i1), F(strided_u1_u1), F(strided_i2_i2), F(strided_u2_u2),
        F(strided_i4_i4), F(strided_u4_u4), F(strided_i8_i8), F(strided_u8_u8),
        F(strided_f4_f4), F(strided_f8_f8), F(strided_c8_c8), F(strided_c16_c16)};
    static StridedFn into_i8[T_I8] = {F(strided_i1_i8), F(strided_u1_i8), F(strided_i2_i8),
                                      F(strided_u2_i8), F(strided_i4_i8), F(strided_u4_i8)};
    static StridedFn into_u8[T_I8] = {F(strided_i1_u8), F(strided_u1_u8), F(strided_i2_u8),
                                      F(strided_u2_u8), F(strided_i4_u8), F(strided_u4_u8)};
    if (s == d)
        return same[s];
    if (d == T_I8)
        return s < T_I8 ? into_i8[s] : s == T_U8 ? F(strided_u8_i8) : NULL;
    if (d == T_U8)
        return s < T_I8 ? into_u8[s] : s == T_I8 ? F(strided_i8_u8) : NULL;
    if (s == T_F4 && d == T_F8)
        return F(strided_f4_f8);
    if (s == T_C8 && d == T_C16)
        return F(strided_c8_c16);
    return NULL;
}
#undef F

static const size_t type_sizes[T_COUNT] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16};

/* The type named `name`; -1 with an error set. */
static int type_of(const char *name)
{
    for (int t = 0; t < T_COUNT; t++)
        if (strcmp(name, type_names[t]) == 0)
            return t;
    PyErr_Format(PyExc_ValueError, "no sum kernel reads or writes type %s", name);
    return -1;
}

static int nest_in_bounds(const Nest *g, int64_t src_len, int64_t dst_len)
{
    int64_t s_lo = 0, s_hi = 0, d_lo = 0, d_hi = 0;
    table_reach(g->kept_src, g->n_kept, &s_lo, &s_hi);
    if (g->step) {
        int64_t lo = g->first, hi = g->first;
        reach(g->n_summed, g->step, &lo, &hi);
        s_lo = saturated_add(s_lo, lo);
        s_hi = saturated_add(s_hi, hi);
    } else {
        table_reach(g->summed_src, g->n_summed, &s_lo, &s_hi);
    }
    reach(g->n, g->ss, &s_lo, &s_hi);
    table_reach(g->kept_dst, g->n_kept, &d_lo, &d_hi);
    if (g->kind != KIND_REGISTERS)
        reach(g->n, g->ds, &d_lo, &d_hi);
    return s_lo >= 0 && s_hi < src_len && d_lo >= 0 && d_hi < dst_len;
}

/* One thread's share of a strided sum: outer indices k0 .. k1 - 1 of `nest`. */
typedef struct {
    void *dst;
    const Nest *nest;
    int64_t k0, k1;
} Part;

/* The outer indices are cut into at most PARTS_PER_THREAD parts a thread, and a thread
 * takes the next part when it is done with one (schedule(dynamic)): where the host
 * slows one vCPU for a while, the other thread takes more parts. Runs as the benchmark
 * runs them (a 0.15 s pause, then 60 calls) on the 2-core Xeon: a 64^4 'ijkj->ik' by
 * fours ran about 3x slower (a median call of 0.9-1.0 ms against 0.30) in 9 of 60, 9 of
 * 45 and 14 of 45 runs with each thread's half fixed in advance, in 0, 1 and 0 with 8
 * parts a thread taken as free (TBLIS in 3, 0 and 0), in 13 of 40 with 16 parts fixed
 * in advance (1 of 40 taken as free); 'bii->b' of 4096 x 64 x 64 in 4 of 45 against 0.
 * The median runs alike (stop71-probes in benchmarks/results/xeon-avx512/current). */
#define PARTS_PER_THREAD 8

/* The parts run by `fn` on `threads` OpenMP threads, each thread leaving the caller's
 * CPU (kernel_common.h), taking the next part when done with one. */
static void run_parts(StridedFn fn, const void *src, const Part *parts, int64_t count,
                      int threads)
{
    const int caller = launcher_cpu();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    {
        leave_cpu(caller);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t p = 0; p < count; p++)
            fn(src, parts[p].dst, parts[p].nest, parts[p].k0, parts[p].k1);
    }
}

/* The nest's summed rows cut into `threads` parts in order (for fewer outer indices
 * than threads), each part summed on its own thread into its own copy of D's span, and
 * the copies added into D part by part (by `add`, D's type summed into itself). 0, or -1
 * with an error set. */
static int split_rows(StridedFn fn, StridedFn add, Py_buffer *src, Py_buffer *dst,
                      size_t dst_size, const Nest *g, int threads)
{
    const int64_t span = (int64_t)(dst->len / (Py_ssize_t)dst_size);
    const int64_t parts = g->n_summed < threads ? g->n_summed : threads;
    char *copies = malloc((size_t)(parts * span) * dst_size);
    Nest *nests = malloc((size_t)parts * sizeof(Nest));
    Part *shares = malloc((size_t)parts * sizeof(Part));
    int64_t *offsets = malloc((size_t)parts * sizeof(int64_t));
    if (copies == NULL || nests == NULL || shares == NULL || offsets == NULL) {
        free(copies);
        free(nests);
        free(shares);
        free(offsets);
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t p = 0; p < parts; p++) {
        const int64_t lo = p * g->n_summed / parts, hi = (p + 1) * g->n_summed / parts;
        nests[p] = *g;
        nests[p].summed_src = g->summed_src + lo;
        nests[p].first = g->step ? g->first + lo * g->step : 0;
        nests[p].n_summed = hi - lo;
        offsets[p] = p * span;
        shares[p] = (Part){copies + (size_t)(p * span) * dst_size, &nests[p], 0, g->n_kept};
    }
    /* Each outer index's outputs in the copies, summed over the parts: an inner axis
     * summed leaves one element per index (a row of one). */
    const int registers = g->kind == KIND_REGISTERS;
    const Nest sum = {registers ? KIND_ROWS : g->kind, g->kept_dst, g->kept_dst, offsets,
                      g->n_kept, parts, registers ? 1 : g->n, g->ds, g->ds, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    run_parts(fn, src->buf, shares, parts, threads);
    add(copies, dst->buf, &sum, 0, g->n_kept);
    Py_END_ALLOW_THREADS
    free(copies);
    free(nests);
    free(shares);
    free(offsets);
    return 0;
}

PyDoc_STRVAR(strided_doc,
"strided(src, dst, src_type, dst_type, kind, kept_src, kept_dst, summed_src, n, ss, ds,\n"
"        threads, split=False, step=0)\n"
"--\n\n"
"Sum buffer src into writable buffer dst as the loop nest says (see\n"
"cpu_fallback.sum_kernel.bound); the types are NumPy's kind and bytes ('f8', 'i1', ...).\n"
"threads > 0 shares the outer indices among that many OpenMP threads, or with split\n"
"the middle rows, each part into its own copy of dst, the copies then added in order.\n"
"A step other than 0 places middle row r at summed_src[0] + r * step (the table's\n"
"other entries are not read).");

static PyObject *strided(PyObject *self, PyObject *args)
{
    Py_buffer src, dst, kept_src, kept_dst, summed_src;
    const char *src_name, *dst_name;
    int kind, threads, split = 0;
    long long n, ss, ds, step = 0;
    if (!PyArg_ParseTuple(args, "y*w*ssiy*y*y*LLLi|pL:strided", &src, &dst, &src_name,
                          &dst_name, &kind, &kept_src, &kept_dst, &summed_src, &n, &ss, &ds,
                          &threads, &split, &step))
        return NULL;
    PyObject *result = NULL;
    Nest g = {kind, NULL, NULL, NULL, (int64_t)(kept_src.len / 8),
              (int64_t)(summed_src.len / 8), n, ss, ds, 0, step};
    const int s = type_of(src_name), d = s < 0 ? -1 : type_of(dst_name);
    if (d < 0)
        goto done;
    StridedFn fn = strided_fn(s, d);
    if (fn == NULL) {
        PyErr_Format(PyExc_ValueError, "no sum kernel sums %s into %s", src_name, dst_name);
        goto done;
    }
    if (kind < KIND_REGISTERS || kind > KIND_COLUMNS_BY_FOURS || n < 1 || threads < 0 ||
        g.n_kept < 1 || g.n_summed < 1) {
        PyErr_SetString(PyExc_ValueError, "bad kind, extent, thread count or empty table");
        goto done;
    }
    if ((g.kept_src = table(&kept_src, g.n_kept, "kept_src")) == NULL ||
        (g.kept_dst = table(&kept_dst, g.n_kept, "kept_dst")) == NULL ||
        (g.summed_src = table(&summed_src, g.n_summed, "summed_src")) == NULL)
        goto done;
    g.first = step ? g.summed_src[0] : 0;
    if (!nest_in_bounds(&g, src.len / (Py_ssize_t)type_sizes[s],
                        dst.len / (Py_ssize_t)type_sizes[d])) {
        PyErr_SetString(PyExc_ValueError, "the loop nest reaches outside the buffers");
        goto done;
    }
    if (split && threads > 1 && g.n_summed > 1 && kind < KIND_COLUMNS) {
        if (split_rows(fn, strided_fn(d, d), &src, &dst, type_sizes[d], &g, threads) == 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    if (threads == 0 || g.n_kept == 1) {
        Py_BEGIN_ALLOW_THREADS
        fn(src.buf, dst.buf, &g, 0, g.n_kept);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
        goto done;
    }
    const int64_t most = (int64_t)threads * PARTS_PER_THREAD;
    const int64_t parts = g.n_kept < most ? g.n_kept : most;
    Part *shares = malloc((size_t)parts * sizeof(Part));
    if (shares == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t p = 0; p < parts; p++)
        shares[p] = (Part){dst.buf, &g, p * g.n_kept / parts, (p + 1) * g.n_kept / parts};
    Py_BEGIN_ALLOW_THREADS
    run_parts(fn, src.buf, shares, parts, threads);
    Py_END_ALLOW_THREADS
    free(shares);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&kept_src);
    PyBuffer_Release(&kept_dst);
    PyBuffer_Release(&summed_src);
    return result;
}

static PyMethodDef methods[] = {
    {"strided", strided, METH_VARARGS, strided_doc},
    {"max_threads", max_threads, METH_NOARGS, max_threads_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sums",
    "The compiled strided sums of cpu_fallback.sum_kernel (see sums.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__sums(void)
{
    return PyModule_Create(&module);
}
