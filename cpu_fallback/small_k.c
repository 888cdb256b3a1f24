/* cpu_fallback._small_k: the GEMM of cpu_fallback.small_k, D = alpha * A @ B, made for
 * a small inner extent K, on operands of any layout.
 *
 * With few terms per element a GEMM is bound by writing D, not by arithmetic. A BLAS
 * GEMM with beta = 0 first writes zeros over D, then reads and writes it again while it
 * adds the product (OpenBLAS's dgemm of 768 x 12 x 768 took 1.7x as long as filling D);
 * this kernel writes each tile of D once, from registers; with a hundred or more terms
 * it still keeps pace with BLAS, and a larger K is summed in blocks of at most K_BLOCK
 * terms (see small_k.py). Each thread packs a panel of B (a block's terms x NC,
 * zero-padded to whole tiles) into an aligned buffer, then sweeps its rows of D a tile
 * of RB rows by CB columns at a time: the tile's RB x NV vectors stay in registers over
 * the block's terms, A's elements are broadcast from wherever they lie, and
 * D's rows are written along their length (long rows write faster than short pieces of
 * many). A tile at the end of D's columns or rows takes as few vectors and rows as it
 * needs.
 *
 * Every element is found by offsets (an Index: a stride, or a table of offsets): the
 * rows of A and D, the columns of B and D, the K terms of A and B, and a batch of such
 * products. `gemm` takes strided matrices (D with unit stride along its columns);
 * `gathered` takes tables, so that a contraction whose labels do not merge into
 * matrices is computed where its operands lie (cpu_fallback.gathered): the panels of B
 * are gathered from B's layout (copied whole where a tile's columns lie consecutively),
 * and a tile of D whose columns are not consecutive is written element by element.
 *
 * Three builds of the loops, one chosen when the module loads: AVX-512 (RB 8, NV 3 of
 * 64 bytes), AVX2 with FMA (RB 4, NV 3 of 32 bytes) and the baseline (RB 4, NV 2 of 16
 * bytes); all are GCC vector extensions, so the compiler picks the instructions. Where
 * AVX-512 is chosen a call may name the AVX2 build ('f8:avx2'), which plans time beside
 * it: which is faster depends on the CPU and the shape. With
 * threads > 0 the (batch, panel, rows) pieces are shared among that many OpenMP
 * threads, each writing its own part of D, panels narrowed where there would be fewer
 * than two pieces a thread; a thread takes the next piece when it is done with one
 * (schedule(dynamic)), so pieces of unequal cost, or a thread the host slows, leave
 * the other less idle (on a 2-core EPYC VM, 1200 x 1200 x 148 float64 in 4.00-4.46 ms
 * against 4.44-5.02 with each thread's pieces fixed in advance, three processes each;
 * TCCG at half extents in float64, cases 9, 13 and 20-48, gpu_tc's time 0.965x,
 * geomean); 0 runs on the calling thread, without a parallel region (a
 * forked child must not start one). The GIL is released while it runs; every offset is
 * checked against the buffers first. Each element of D sums its K terms in order (a
 * block's sum added to the blocks' before), so the thread count does not change a bit.
 */
#include "kernel_common.h"

#include <stdlib.h>
#include <string.h>

/* Multiply-adds as FMA instructions where the build has them (ISO C modes leave
 * products and sums apart, at half the speed); short copies as moves, not as calls of
 * memcpy or memset (a run of 12 doubles copied by `rep movsq` and a call took most of
 * the time of TCCG's case 42 at half extents). */
#pragma GCC optimize("fp-contract=fast", "no-tree-loop-distribute-patterns")
/* A tile's row of D is copied out of a buffer filled for every column the tile has;
 * GCC cannot see that a run's copy reads only those. */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "small_k_tiles.h"

#if HAVE_ISAS
#include <immintrin.h>

typedef double f8_zmm __attribute__((vector_size(64)));
typedef float f4_zmm __attribute__((vector_size(64)));

/* NAME(to, x, n, add): the first n lanes of x (a vector of T, __m512S for the
 * intrinsics with suffix P) into `to`, or added to it where `add`: masked moves, which
 * touch no other element. */
#define DEFINE_MASKED(NAME, T, VEC, MASK, S, P)                                            \
    static inline __attribute__((always_inline)) ISA_AVX512 void NAME(T *to, VEC x,        \
                                                                      int64_t n, int add)  \
    {                                                                                      \
        const MASK lanes = (MASK)((1u << n) - 1);                                          \
        __m512##S y = (__m512##S)x;                                                        \
        if (add)                                                                           \
            y = _mm512_add_##P(y, _mm512_maskz_loadu_##P(lanes, to));                      \
        _mm512_mask_storeu_##P(to, lanes, y);                                              \
    }
DEFINE_MASKED(f8_masked, double, f8_zmm, __mmask8, d, pd)
DEFINE_MASKED(f4_masked, float, f4_zmm, __mmask16, , ps)

/* AVX2's masked stores took longer than staging a tile on the 2-core Zen 4 (float32
 * 8000 x 36 x 36: 112-132 GFLOP/s against 150-153), so its builds stage. */
DEFINE_SMALL_K(f8_avx512, double, 64, 8, 3, ISA_AVX512, 1, f8_masked)
DEFINE_SMALL_K(f4_avx512, float, 64, 8, 3, ISA_AVX512, 1, f4_masked)
DEFINE_SMALL_K(f8_avx2, double, 32, 4, 3, ISA_AVX2, 0, NULL)
DEFINE_SMALL_K(f4_avx2, float, 32, 4, 3, ISA_AVX2, 0, NULL)
#endif
DEFINE_SMALL_K(f8_base, double, 16, 4, 2, , 0, NULL)
DEFINE_SMALL_K(f4_base, float, 16, 4, 2, , 0, NULL)

typedef int (*RunF8)(const double *, const double *, double *, const Shape *, double, int);
typedef int (*RunF4)(const float *, const float *, float *, const Shape *, float, int);
static RunF8 run_f8 = f8_base_run;
static RunF4 run_f4 = f4_base_run;
static const char *isa = "baseline";
/* Whether a caller may ask for the AVX2 build by name where a wider one is the default:
 * on a 2-core Zen 4, whose AVX-512 units are two AVX2 halves, the AVX2 build's tiles
 * ran 46656 x 36 x 36 float64 at 91-96 GFLOP/s against the AVX-512 build's 58-71
 * (plans time both: cpu_fallback.small_k.narrower_builds). */
static int avx2_by_name = 0;

/* The widest build this CPU runs, or GPU_TC_KERNEL_ISA's narrower one. */
static void choose_isa(void)
{
    const int build = widest_build();
#if HAVE_ISAS
    avx2_by_name = build == BUILD_AVX512;
    if (build == BUILD_AVX512)
        run_f8 = f8_avx512_run, run_f4 = f4_avx512_run, isa = "avx512f";
    else if (build == BUILD_AVX2)
        run_f8 = f8_avx2_run, run_f4 = f4_avx2_run, isa = "avx2";
#else
    (void)build;
#endif
}

/* Widen [low, high] by the offsets of positions 0 .. n - 1 of an index group. */
static void index_reach(const Index *x, int64_t n, int64_t *low, int64_t *high)
{
    if (x->table != NULL)
        table_reach(x->table, n, low, high);
    else
        reach(n, x->stride, low, high);
}

/* Whether every element the product touches lies inside the buffers (in elements). */
static int in_bounds(const Shape *s, Py_ssize_t a_len, Py_ssize_t b_len, Py_ssize_t d_len)
{
    int64_t a_lo = 0, a_hi = 0, b_lo = 0, b_hi = 0, d_lo = 0, d_hi = 0;
    index_reach(&s->a_batch, s->batches, &a_lo, &a_hi);
    index_reach(&s->a_rows, s->m, &a_lo, &a_hi);
    index_reach(&s->a_k, s->k, &a_lo, &a_hi);
    index_reach(&s->b_batch, s->batches, &b_lo, &b_hi);
    index_reach(&s->b_k, s->k, &b_lo, &b_hi);
    index_reach(&s->b_cols, s->n, &b_lo, &b_hi);
    index_reach(&s->d_batch, s->batches, &d_lo, &d_hi);
    index_reach(&s->d_rows, s->m, &d_lo, &d_hi);
    index_reach(&s->d_cols, s->n, &d_lo, &d_hi);
    return a_lo >= 0 && a_hi < a_len && b_lo >= 0 && b_hi < b_len && d_lo >= 0 &&
           d_hi < d_len;
}

/* Check the arguments, then run the product; None, or NULL with an error set. */
static PyObject *multiply(Py_buffer *a, Py_buffer *b, Py_buffer *d, const char *name,
                          const Shape *s, double alpha, int threads)
{
    const int f8 = strncmp(name, "f8", 2) == 0, f4 = strncmp(name, "f4", 2) == 0;
    const int avx2 = (f8 || f4) && strcmp(name + 2, ":avx2") == 0;
    const Py_ssize_t size = f8 ? 8 : 4;
    if (!(f8 || f4) || (name[2] != '\0' && !avx2)) {
        PyErr_Format(PyExc_ValueError, "the small-K GEMM runs 'f4' and 'f8' (':avx2' for "
                     "its AVX2 build), not %s", name);
        return NULL;
    }
    if (avx2 && !avx2_by_name) {
        PyErr_Format(PyExc_ValueError, "the small-K GEMM's %s build is the widest this CPU "
                     "runs; %s names none", isa, name);
        return NULL;
    }
    RunF8 f8_run = run_f8;
    RunF4 f4_run = run_f4;
#if HAVE_ISAS
    if (avx2)
        f8_run = f8_avx2_run, f4_run = f4_avx2_run;
#endif
    if (s->m < 1 || s->n < 1 || s->k < 1 || s->batches < 1 ||
        threads < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "needs m, n, k, batches >= 1 and threads >= 0");
        return NULL;
    }
    if (!in_bounds(s, a->len / size, b->len / size, d->len / size)) {
        PyErr_SetString(PyExc_ValueError, "the product reaches outside the buffers");
        return NULL;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    if (f8)
        failed = f8_run(a->buf, b->buf, d->buf, s, alpha, threads);
    else
        failed = f4_run(a->buf, b->buf, d->buf, s, (float)alpha, threads);
    Py_END_ALLOW_THREADS
    if (failed)
        return PyErr_NoMemory();
    return Py_NewRef(Py_None);
}

PyDoc_STRVAR(gemm_doc,
"gemm(a, b, d, type, m, n, k, a0, a_row, a_col, b0, b_row, b_col, d0, d_row, alpha,\n"
"     threads)\n"
"--\n\n"
"d[d0 + i*d_row + j] = alpha * sum over p of a[a0 + i*a_row + p*a_col] *\n"
"b[b0 + p*b_row + j*b_col] for i < m, j < n, p < k (k >= 1; strides in elements,\n"
"any sign); type 'f4' or 'f8' (the widest build), or 'f4:avx2' or 'f8:avx2' where\n"
"narrower() names 'avx2'. threads > 0 shares the work among that many OpenMP\n"
"threads.");

static PyObject *gemm(PyObject *self, PyObject *args)
{
    Py_buffer a, b, d;
    const char *name;
    long long m, n, k, a0, a_row, a_col, b0, b_row, b_col, d0, d_row;
    double alpha;
    int threads;
    if (!PyArg_ParseTuple(args, "y*y*w*sLLLLLLLLLLLdi:gemm", &a, &b, &d, &name, &m, &n, &k,
                          &a0, &a_row, &a_col, &b0, &b_row, &b_col, &d0, &d_row, &alpha,
                          &threads))
        return NULL;
    const int64_t starts[3] = {a0, b0, d0};
    const Shape s = {m, n, k, 1, {NULL, a_row}, {NULL, a_col}, {NULL, b_row}, {NULL, b_col},
                     {NULL, d_row}, {NULL, 1}, {starts, 0}, {starts + 1, 0}, {starts + 2, 0}};
    PyObject *result = multiply(&a, &b, &d, name, &s, alpha, threads);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&d);
    return result;
}

PyDoc_STRVAR(gathered_doc,
"gathered(a, b, d, type, m, n, k, batches, offsets, alpha, threads)\n"
"--\n\n"
"For each batch t, d[d_batch[t] + d_rows[i] + d_cols[j]] = alpha * sum over p of\n"
"a[a_batch[t] + a_rows[i] + a_k[p]] * b[b_batch[t] + b_k[p] + b_cols[j]] for i < m,\n"
"j < n, p < k (k >= 1): offsets in elements, an int64 buffer holding a_rows and\n"
"d_rows (m each), b_cols and d_cols (n each), a_k and b_k (k each), a_batch, b_batch\n"
"and d_batch (batches each), in that order. type and threads as gemm's.");

static PyObject *gathered(PyObject *self, PyObject *args)
{
    Py_buffer a, b, d, offsets;
    const char *name;
    long long m, n, k, batches;
    double alpha;
    int threads;
    if (!PyArg_ParseTuple(args, "y*y*w*sLLLLy*di:gathered", &a, &b, &d, &name, &m, &n, &k,
                          &batches, &offsets, &alpha, &threads))
        return NULL;
    PyObject *result = NULL;
    const long long entries = offsets.len / 8; /* bounds m, n, k, batches before any product */
    if (m < 1 || n < 1 || k < 1 || batches < 1 || m > entries || n > entries ||
        k > entries || batches > entries) {
        PyErr_SetString(PyExc_ValueError, "needs m, n, k, batches >= 1, each within the "
                        "offsets");
        goto done;
    }
    const int64_t *t = table(&offsets, 2 * (m + n + k) + 3 * batches, "offsets");
    if (t == NULL)
        goto done;
    const Shape s = {m, n, k, batches,
                     {t, 0}, {t + 2 * (m + n), 0}, {t + 2 * (m + n) + k, 0},
                     {t + 2 * m, 0}, {t + m, 0}, {t + 2 * m + n, 0},
                     {t + 2 * (m + n + k), 0}, {t + 2 * (m + n + k) + batches, 0},
                     {t + 2 * (m + n + k) + 2 * batches, 0}};
    result = multiply(&a, &b, &d, name, &s, alpha, threads);
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&d);
    PyBuffer_Release(&offsets);
    return result;
}

PyDoc_STRVAR(isa_doc, "isa()\n--\n\nThe build of the loops this CPU runs: 'avx512f', 'avx2' or 'baseline'.");

static PyObject *isa_name(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(isa);
}

PyDoc_STRVAR(narrower_doc, "narrower()\n--\n\nThe builds a type may name besides the widest: ('avx2',) or ().");

static PyObject *narrower(PyObject *self, PyObject *unused)
{
    return avx2_by_name ? Py_BuildValue("(s)", "avx2") : PyTuple_New(0);
}

static PyMethodDef methods[] = {
    {"gemm", gemm, METH_VARARGS, gemm_doc},
    {"gathered", gathered, METH_VARARGS, gathered_doc},
    {"isa", isa_name, METH_NOARGS, isa_doc},
    {"narrower", narrower, METH_NOARGS, narrower_doc},
    {"max_threads", max_threads, METH_NOARGS, max_threads_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_small_k",
    "The small-K GEMM of cpu_fallback.small_k (see small_k.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__small_k(void)
{
    choose_isa();
    return PyModule_Create(&module);
}
