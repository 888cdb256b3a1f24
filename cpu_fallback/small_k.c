/* cpu_fallback._small_k: the GEMM of cpu_fallback.small_k, D = alpha * A @ B for a small
 * inner extent K (at most SMALL_K_MAX).
 *
 * With few terms per element a GEMM is bound by writing D, not by arithmetic. A BLAS
 * GEMM with beta = 0 first writes zeros over D, then reads and writes it again while it
 * adds the product (OpenBLAS's dgemm of 768 x 12 x 768 took 1.7x as long as filling D);
 * this kernel writes each tile of D once, from registers. Each thread packs a panel of
 * B (K x NC, zero-padded to whole tiles) into an aligned buffer, then sweeps its rows of
 * D a tile of RB rows by CB columns at a time: the tile's RB x NV vectors stay in
 * registers over the K terms, A's elements are broadcast from wherever they lie (any
 * strides), and D's rows are written along their length (long rows write faster than
 * short pieces of many). D must have unit stride along its columns.
 *
 * Three builds of the loops, one chosen when the module loads: AVX-512 (RB 8, NV 3 of
 * 64 bytes), AVX2 with FMA (RB 4, NV 3 of 32 bytes) and the baseline (RB 4, NV 2 of 16
 * bytes); all are GCC vector extensions, so the compiler picks the instructions. With
 * threads > 0 the (panel, rows) pieces are shared among that many OpenMP threads, each
 * writing its own part of D; 0 runs on the calling thread, without a parallel region (a
 * forked child must not start one). The GIL is released while it runs; every offset is
 * checked against the buffers first.
 */
#include "kernel_common.h"

#include <stdlib.h>
#include <string.h>

/* Multiply-adds as FMA instructions where the build has them (ISO C modes leave
 * products and sums apart, at half the speed). */
#pragma GCC optimize("fp-contract=fast")

#define SMALL_K_MAX 64
/* Bytes of B one packed panel may take: with the tile of D, it stays in L2. */
#define PANEL_BYTES (512 * 1024)
/* Rows of D a piece takes at least, so that packing its panel costs little beside it. */
#define MIN_CHUNK_ROWS 64

typedef struct {
    int64_t m, n, k, a_row, a_col, b_row, b_col, d_row;
} Shape;

/* How the product is cut: panels of nc columns of B (a multiple of the tile's cb, at
 * most PANEL_BYTES packed), chunks of rc rows of D (a multiple of the tile's rb, two per
 * thread, at least MIN_CHUNK_ROWS: each piece packs its panel), and the pieces (panel,
 * chunk) the threads share. */
typedef struct {
    int64_t nc, rc, chunks, pieces;
} Split;

static Split split(const Shape *s, int64_t cb, int64_t rb, int64_t size, int threads)
{
    Split w;
    const int64_t n_round = (s->n + cb - 1) / cb * cb;
    w.nc = PANEL_BYTES / (s->k * size) / cb * cb;
    w.nc = w.nc < cb ? cb : w.nc > n_round ? n_round : w.nc;
    const int64_t parts = threads > 1 ? threads : 1;
    w.rc = (s->m + 2 * parts - 1) / (2 * parts);
    if (w.rc < MIN_CHUNK_ROWS) /* few rows: pieces of whole panels, packed once */
        w.rc = s->m < MIN_CHUNK_ROWS ? s->m : MIN_CHUNK_ROWS;
    w.rc = (w.rc + rb - 1) / rb * rb;
    w.chunks = (s->m + w.rc - 1) / w.rc;
    w.pieces = (s->n + w.nc - 1) / w.nc * w.chunks;
    return w;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ISA_AVX512 __attribute__((target("avx512f")))
#define ISA_AVX2 __attribute__((target("avx2,fma")))
#define HAVE_ISAS 1
#else
#define ISA_AVX512
#define ISA_AVX2
#define HAVE_ISAS 0
#endif

/* The loops for element type T, vectors of BYTES, tiles of RB rows by NV vectors, in
 * functions named NAME_* compiled with ISA. NAME_run returns 0, or -1 where a panel
 * buffer could not be allocated. */
#define DEFINE_SMALL_K(NAME, T, BYTES, RB, NV, ISA)                                        \
    typedef T NAME##_vec __attribute__((vector_size(BYTES)));                              \
    enum { NAME##_LANES = BYTES / sizeof(T), NAME##_CB = NV * (BYTES / sizeof(T)) };       \
                                                                                           \
    static inline __attribute__((always_inline)) ISA void NAME##_tile(                     \
        int64_t k, const T *a, int64_t a_row, int64_t a_col, int64_t rows,                 \
        const T *panel, T *d, int64_t d_row, int64_t cols, T alpha)                        \
    {                                                                                      \
        NAME##_vec acc[RB][NV];                                                            \
        const T *a_rows[RB];                                                               \
        for (int r = 0; r < RB; r++) {                                                     \
            a_rows[r] = a + (r < rows ? r : rows - 1) * a_row;                             \
            for (int v = 0; v < NV; v++)                                                   \
                acc[r][v] = (NAME##_vec){0};                                               \
        }                                                                                  \
        for (int64_t p = 0; p < k; p++) {                                                  \
            NAME##_vec b[NV];                                                              \
            for (int v = 0; v < NV; v++)                                                   \
                b[v] = *(const NAME##_vec *)(panel + p * NAME##_CB + v * NAME##_LANES);    \
            for (int r = 0; r < RB; r++) {                                                 \
                const T x = a_rows[r][p * a_col];                                          \
                for (int v = 0; v < NV; v++)                                               \
                    acc[r][v] += x * b[v];                                                 \
            }                                                                              \
        }                                                                                  \
        for (int r = 0; r < rows; r++) {                                                   \
            if (cols == NAME##_CB) {                                                       \
                for (int v = 0; v < NV; v++) {                                             \
                    const NAME##_vec x = alpha * acc[r][v];                                \
                    memcpy(d + r * d_row + v * NAME##_LANES, &x, sizeof x);                \
                }                                                                          \
            } else { /* copies of the vectors: taking acc's address would spill it */     \
                T row[NAME##_CB];                                                          \
                for (int v = 0; v < NV; v++) {                                             \
                    const NAME##_vec x = alpha * acc[r][v];                                \
                    memcpy(row + v * NAME##_LANES, &x, sizeof x);                          \
                }                                                                          \
                for (int64_t c = 0; c < cols; c++)                                         \
                    d[r * d_row + c] = row[c];                                             \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    /* B's columns j0 .. j0 + width - 1 as tiles of k x CB, zero-padded. */                \
    static ISA void NAME##_pack(const T *b, const Shape *s, int64_t j0, int64_t width,     \
                                T *panel)                                                  \
    {                                                                                      \
        for (int64_t c0 = 0; c0 < width; c0 += NAME##_CB) {                                \
            T *tile = panel + c0 * s->k;                                                   \
            const int64_t cols = width - c0 < NAME##_CB ? width - c0 : NAME##_CB;          \
            for (int64_t p = 0; p < s->k; p++) {                                           \
                const T *src = b + p * s->b_row + (j0 + c0) * s->b_col;                    \
                T *dst = tile + p * NAME##_CB;                                             \
                for (int64_t c = 0; c < cols; c++)                                         \
                    dst[c] = src[c * s->b_col];                                            \
                for (int64_t c = cols; c < NAME##_CB; c++)                                 \
                    dst[c] = 0;                                                            \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    /* Piece `piece` of the product: rows i_start .. of panel j0 .. (see NAME##_run). */  \
    static ISA void NAME##_piece(const T *a, const T *b, T *d, const Shape *s, T alpha,   \
                                 const Split *w, int64_t piece, T *panel)                 \
    {                                                                                      \
        const int64_t cb = NAME##_CB;                                                      \
        const int64_t j0 = piece / w->chunks * w->nc, i_start = piece % w->chunks * w->rc; \
        const int64_t width = s->n - j0 < w->nc ? s->n - j0 : w->nc;                       \
        const int64_t i_stop = i_start + w->rc < s->m ? i_start + w->rc : s->m;            \
        NAME##_pack(b, s, j0, width, panel);                                               \
        for (int64_t i = i_start; i < i_stop; i += RB) {                                   \
            const int64_t rows = i_stop - i < RB ? i_stop - i : RB;                        \
            for (int64_t c0 = 0; c0 < width; c0 += cb)                                     \
                NAME##_tile(s->k, a + i * s->a_row, s->a_row, s->a_col, rows,              \
                            panel + c0 * s->k, d + i * s->d_row + j0 + c0, s->d_row,       \
                            width - c0 < cb ? width - c0 : cb, alpha);                     \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    static ISA int NAME##_run(const T *a, const T *b, T *d, const Shape *s, T alpha,       \
                              int threads)                                                 \
    {                                                                                      \
        const Split w = split(s, NAME##_CB, RB, sizeof(T), threads);                       \
        const size_t bytes = (size_t)((s->k * w.nc * (int64_t)sizeof(T) + 63) / 64 * 64);  \
        int failed = 0;                                                                    \
        if (threads <= 1) {                                                                \
            T *panel = aligned_alloc(64, bytes);                                           \
            if (panel == NULL)                                                             \
                return -1;                                                                 \
            for (int64_t piece = 0; piece < w.pieces; piece++)                             \
                NAME##_piece(a, b, d, s, alpha, &w, piece, panel);                         \
            free(panel);                                                                   \
            return 0;                                                                      \
        }                                                                                  \
        const int caller = launcher_cpu();                                                 \
        _Pragma("omp parallel num_threads(threads) reduction(|:failed)")                   \
        {                                                                                  \
            leave_cpu(caller);                                                             \
            T *panel = aligned_alloc(64, bytes);                                           \
            failed = panel == NULL;                                                        \
            _Pragma("omp for schedule(static)")                                            \
            for (int64_t piece = 0; piece < w.pieces; piece++)                             \
                if (panel != NULL)                                                         \
                    NAME##_piece(a, b, d, s, alpha, &w, piece, panel);                     \
            free(panel);                                                                   \
        }                                                                                  \
        return failed ? -1 : 0;                                                            \
    }

DEFINE_SMALL_K(f8_avx512, double, 64, 8, 3, ISA_AVX512)
DEFINE_SMALL_K(f4_avx512, float, 64, 8, 3, ISA_AVX512)
DEFINE_SMALL_K(f8_avx2, double, 32, 4, 3, ISA_AVX2)
DEFINE_SMALL_K(f4_avx2, float, 32, 4, 3, ISA_AVX2)
DEFINE_SMALL_K(f8_base, double, 16, 4, 2, )
DEFINE_SMALL_K(f4_base, float, 16, 4, 2, )

typedef int (*RunF8)(const double *, const double *, double *, const Shape *, double, int);
typedef int (*RunF4)(const float *, const float *, float *, const Shape *, float, int);
static RunF8 run_f8 = f8_base_run;
static RunF4 run_f4 = f4_base_run;
static const char *isa = "baseline";

/* The widest build this CPU runs. */
static void choose_isa(void)
{
#if HAVE_ISAS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        run_f8 = f8_avx512_run, run_f4 = f4_avx512_run, isa = "avx512f";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        run_f8 = f8_avx2_run, run_f4 = f4_avx2_run, isa = "avx2";
    }
#endif
}

/* Whether every element the product touches lies inside the buffers (in elements). */
static int in_bounds(const Shape *s, int64_t a0, int64_t b0, int64_t d0, Py_ssize_t a_len,
                     Py_ssize_t b_len, Py_ssize_t d_len)
{
    int64_t a_lo = a0, a_hi = a0, b_lo = b0, b_hi = b0, d_lo = d0, d_hi = d0;
    reach(s->m, s->a_row, &a_lo, &a_hi);
    reach(s->k, s->a_col, &a_lo, &a_hi);
    reach(s->k, s->b_row, &b_lo, &b_hi);
    reach(s->n, s->b_col, &b_lo, &b_hi);
    reach(s->m, s->d_row, &d_lo, &d_hi);
    reach(s->n, 1, &d_lo, &d_hi);
    return a_lo >= 0 && a_hi < a_len && b_lo >= 0 && b_hi < b_len && d_lo >= 0 &&
           d_hi < d_len;
}

PyDoc_STRVAR(gemm_doc,
"gemm(a, b, d, type, m, n, k, a0, a_row, a_col, b0, b_row, b_col, d0, d_row, alpha,\n"
"     threads)\n"
"--\n\n"
"d[d0 + i*d_row + j] = alpha * sum over p of a[a0 + i*a_row + p*a_col] *\n"
"b[b0 + p*b_row + j*b_col] for i < m, j < n, p < k (1 <= k <= 64; strides in elements,\n"
"any sign); type 'f4' or 'f8'. threads > 0 shares the work among that many OpenMP\n"
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
    PyObject *result = NULL;
    const Shape s = {m, n, k, a_row, a_col, b_row, b_col, d_row};
    const int f8 = strcmp(name, "f8") == 0;
    const Py_ssize_t size = f8 ? 8 : 4;
    if (!f8 && strcmp(name, "f4") != 0) {
        PyErr_Format(PyExc_ValueError, "the small-K GEMM runs 'f4' and 'f8', not %s", name);
        goto done;
    }
    if (m < 1 || n < 1 || k < 1 || k > SMALL_K_MAX || threads < 0) {
        PyErr_SetString(PyExc_ValueError, "needs m, n >= 1, 1 <= k <= 64 and threads >= 0");
        goto done;
    }
    if (!in_bounds(&s, a0, b0, d0, a.len / size, b.len / size, d.len / size)) {
        PyErr_SetString(PyExc_ValueError, "the product reaches outside the buffers");
        goto done;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    if (f8)
        failed = run_f8((const double *)a.buf + a0, (const double *)b.buf + b0,
                        (double *)d.buf + d0, &s, alpha, threads);
    else
        failed = run_f4((const float *)a.buf + a0, (const float *)b.buf + b0,
                        (float *)d.buf + d0, &s, (float)alpha, threads);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&d);
    return result;
}

PyDoc_STRVAR(isa_doc, "isa()\n--\n\nThe build of the loops this CPU runs: 'avx512f', 'avx2' or 'baseline'.");

static PyObject *isa_name(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(isa);
}

static PyMethodDef methods[] = {
    {"gemm", gemm, METH_VARARGS, gemm_doc},
    {"isa", isa_name, METH_NOARGS, isa_doc},
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
