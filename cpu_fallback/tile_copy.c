/* cpu_fallback._tile_copy: the cache-blocked copy of cpu_fallback.blocked, compiled.
 *
 * One function, copy(), runs a TileLayout (cpu_fallback/tile_layout.py) between two
 * buffers of words (1, 2, 4 or 8 bytes): tile by tile, each tile read along the
 * source's rows into a buffer that stays in L1, then written along the destination's
 * rows, the lines of the next tile prefetched meanwhile; a tile of whole blocks of 4- or
 * 8-byte words, one word an element, is transposed in vector registers instead
 * (transpose_blocks.h), the buffer skipped. With chunks > 0 the tiles are
 * dealt in order to that many chunks, run by OpenMP's threads; the GIL is released
 * while it copies. cpu_fallback/tiles.py is the only caller and builds the arguments.
 *
 * Element (r, c, v), for r < nr rows, c < nc columns and v < ev words of a run, lies
 * at row_src[r] + c * sc + v * sv words into the source and at
 * r * dr + col_dst[c] + v * dv into the destination, shifted by the outer axes (rows
 * of `outer`: extent, source stride, destination stride, outermost first) and, in
 * the source, by src_off. Tiles are tr rows by tc columns.
 *
 * With stream set, the destination's rows are written with non-temporal stores where
 * they are contiguous (the two fast paths below): they go to memory without first
 * reading each line into the cache, which pays when the destination is far larger than
 * the last-level cache (128 MiB on a 2-core EPYC with 32 MiB of L3, medians of 21:
 * 'abcd->badc' 9.5 ms against 12.6, 'abcd->acbd' 8.1 against 9.3) and costs where it
 * would have stayed there (20 MiB 'abcd->acbd': 1.54 against 1.02). The permutation plan
 * times both (cpu_fallback.backend); stream is ignored where the build has no SSE2 or
 * is not for x86-64.
 */
#include "kernel_common.h"
#include "streamed_rows.h"

#include <stdlib.h>

/* The register transposes this CPU runs (transpose_blocks.h), for 8- and 4-byte words,
 * their block sides, and the build's name; chosen when the module loads. */
static TransposeTile transpose8, transpose4;
static int64_t side8, side4;
static const char *isa = "baseline";

/* Runs this long (in words) are copied straight from source to destination. */
#define DIRECT_WORDS 16

typedef struct {
    const int64_t *outer; /* n_outer rows of (extent, source stride, destination stride) */
    int64_t n_outer;
    const int64_t *row_src, *col_dst;
    int64_t src_off, nr, dr, nc, sc, ev, sv, dv, tr, tc;
    int stream; /* non-temporal stores on the fast paths */
} Geometry;

static int64_t count_jobs(const Geometry *g)
{
    int64_t jobs = ((g->nr + g->tr - 1) / g->tr) * ((g->nc + g->tc - 1) / g->tc);
    for (int64_t k = 0; k < g->n_outer; k++)
        jobs *= g->outer[3 * k];
    return jobs;
}

/* Start loading `count` words from base + first, a cache line (`line` words) at a time,
 * for reading (rw 0) or writing (1); the address is computed as an integer, since the
 * next tile's lines may lie past the buffer (a prefetch never faults). */
#define PREFETCH(base, first, count, line, rw)                                             \
    for (int64_t x_ = 0; x_ < (count); x_ += (line))                                       \
    __builtin_prefetch((const void *)((uintptr_t)(base) +                                  \
                                      (uintptr_t)(((first) + x_) * (int64_t)sizeof(*(base)))), \
                       rw, 3)

/* Copy tiles first .. last - 1 (the destination's rows advance fastest), with `buf`
 * (tr * tc * ev words, then a streamed row's scratch: tr * ev words and ROW_SLACK bytes,
 * then stream_blocks' rows: BLOCK_ROWS of tr words and ROW_SLACK bytes each)
 * and `idx` (n_outer entries) as scratch. An odometer steps from tile to tile. */
#define DEFINE_COPY_JOBS(T)                                                               \
    CLONES static void copy_jobs_##T(const T *restrict src, T *restrict dst,                \
                                     const Geometry *g, int64_t first, int64_t last,       \
                                     T *restrict buf, int64_t *restrict idx)               \
    {                                                                                      \
        const int64_t nr = g->nr, nc = g->nc, tr = g->tr, tc = g->tc, ev = g->ev;          \
        const int64_t sc = g->sc, sv = g->sv, dr = g->dr, dv = g->dv;                      \
        const int64_t *outer = g->outer, *row_src = g->row_src, *col_dst = g->col_dst;    \
        const int64_t nbr = (nr + tr - 1) / tr, nbc = (nc + tc - 1) / tc;                  \
        const int64_t line = 64 / (int64_t)sizeof(T) > 1 ? 64 / (int64_t)sizeof(T) : 1;    \
        const int64_t width = tc * ev;                                                     \
        const int stream = g->stream;                                                      \
        int64_t br = first % nbr, rest = first / nbr;                                      \
        int64_t bc = rest % nbc;                                                           \
        int64_t so0 = g->src_off, do0 = 0;                                                 \
        rest /= nbc;                                                                       \
        for (int64_t k = g->n_outer - 1; k >= 0; k--) {                                    \
            idx[k] = rest % outer[3 * k];                                                  \
            rest /= outer[3 * k];                                                          \
            so0 += idx[k] * outer[3 * k + 1];                                              \
            do0 += idx[k] * outer[3 * k + 2];                                              \
        }                                                                                  \
        const int fast = sv == 1 && dv == 1 && sc == ev && dr == ev;                       \
        const TransposeTile transpose =                                                    \
            sizeof(T) == 8 ? transpose8 : sizeof(T) == 4 ? transpose4 : NULL;               \
        const int64_t side = sizeof(T) == 8 ? side8 : side4;                               \
        for (int64_t job = first; job < last; job++) {                                     \
            const int64_t r0 = br * tr, c0 = bc * tc, so = so0, d0 = do0;                  \
            const int64_t mr = tr < nr - r0 ? tr : nr - r0;                                \
            const int64_t mc = tc < nc - c0 ? tc : nc - c0;                                \
            if (++br == nbr) { /* the next tile along the destination's rows first */      \
                br = 0;                                                                    \
                if (++bc == nbc) {                                                         \
                    bc = 0;                                                                \
                    for (int64_t k = g->n_outer - 1; k >= 0; k--) {                        \
                        idx[k]++;                                                          \
                        so0 += outer[3 * k + 1];                                           \
                        do0 += outer[3 * k + 2];                                           \
                        if (idx[k] < outer[3 * k])                                         \
                            break;                                                         \
                        idx[k] = 0;                                                        \
                        so0 -= outer[3 * k] * outer[3 * k + 1];                            \
                        do0 -= outer[3 * k] * outer[3 * k + 2];                            \
                    }                                                                      \
                }                                                                          \
            }                                                                              \
            if (fast && ev >= DIRECT_WORDS && stream) { /* each destination row in order */ \
                for (int64_t j = 0; j < mc; j++)                                           \
                    for (int64_t i = 0; i < mr; i++)                                       \
                        stream_bytes((char *)(dst + d0 + (r0 + i) * ev + col_dst[c0 + j]),  \
                                     (const char *)(src + so + row_src[r0 + i] + (c0 + j) * ev), \
                                     (size_t)ev * sizeof(T));                              \
            } else if (fast && ev >= DIRECT_WORDS) { /* long runs: contiguous already */   \
                for (int64_t i = 0; i < mr; i++)                                           \
                    for (int64_t j = 0; j < mc; j++) {                                     \
                        const T *s = src + so + row_src[r0 + i] + (c0 + j) * ev;           \
                        T *d = dst + d0 + (r0 + i) * ev + col_dst[c0 + j];                 \
                        for (int64_t v = 0; v < ev; v++)                                   \
                            d[v] = s[v];                                                   \
                    }                                                                      \
            } else if (fast) {                                                             \
                /* Rows contiguous in the destination, columns in the source: prefetch    \
                 * the next tile (none after the last); streamed, rows by stream_tile. */  \
                const int64_t nr0 = br * tr, nc0 = bc * tc;                                \
                const int64_t pr = job + 1 < last ? (tr < nr - nr0 ? tr : nr - nr0) : 0;   \
                const int64_t pc = job + 1 < last ? (tc < nc - nc0 ? tc : nc - nc0) : 0;   \
                if (ev == 1 && transpose != NULL && mr % side == 0 && mc % side == 0) {    \
                    for (int64_t i = 0; i < pr; i++) /* whole blocks: in registers */      \
                        PREFETCH(src, so0 + row_src[nr0 + i] + nc0, pc, line, 0);          \
                    if (stream)                                                            \
                        stream_blocks((const char *)(src + so + c0), row_src + r0,         \
                                      (char *)(dst + d0 + r0), col_dst + c0, mr, mc,       \
                                      transpose, side,                                     \
                                      (char *)(buf + tr * width + tr) + ROW_SLACK,         \
                                      sizeof(T));                                          \
                    else                                                                   \
                        transpose(src + so + c0, row_src + r0, dst + d0 + r0, col_dst + c0, \
                                  mr, mc);                                                 \
                    continue;                                                              \
                }                                                                          \
                for (int64_t i = 0; i < mr; i++) {                                         \
                    const T *row = src + so + row_src[r0 + i] + c0 * ev;                   \
                    if (i < pr)                                                            \
                        PREFETCH(src, so0 + row_src[nr0 + i] + nc0 * ev, pc * ev, line, 0);  \
                    T *b = buf + i * width;                                                \
                    for (int64_t x = 0; x < mc * ev; x++)                                  \
                        b[x] = row[x];                                                     \
                }                                                                          \
                if (stream) {                                                              \
                    stream_tile_##T(dst + d0 + r0 * ev, col_dst + c0, buf,                \
                                    (char *)(buf + tr * width), mr, mc, width, ev);        \
                    continue;                                                              \
                }                                                                          \
                for (int64_t j = 0; j < mc; j++) {                                         \
                    T *row = dst + d0 + col_dst[c0 + j] + r0 * ev;                         \
                    if (j < pc)                                                            \
                        PREFETCH(dst, do0 + col_dst[nc0 + j] + nr0 * ev, pr * ev, line, 1);  \
                    if (ev == 1) {                                                         \
                        for (int64_t i = 0; i < mr; i++)                                   \
                            row[i] = buf[i * width + j];                                   \
                    } else if (ev == 2) {                                                  \
                        for (int64_t i = 0; i < mr; i++) {                                 \
                            row[2 * i] = buf[i * width + 2 * j];                           \
                            row[2 * i + 1] = buf[i * width + 2 * j + 1];                   \
                        }                                                                  \
                    } else if (ev == 4) {                                                  \
                        for (int64_t i = 0; i < mr; i++)                                   \
                            for (int64_t v = 0; v < 4; v++)                                \
                                row[4 * i + v] = buf[i * width + 4 * j + v];               \
                    } else {                                                               \
                        for (int64_t i = 0; i < mr; i++)                                   \
                            for (int64_t v = 0; v < ev; v++)                               \
                                row[i * ev + v] = buf[i * width + j * ev + v];             \
                    }                                                                      \
                }                                                                          \
            } else {                                                                       \
                for (int64_t i = 0; i < mr; i++)                                           \
                    for (int64_t j = 0; j < mc; j++) {                                     \
                        const T *s = src + so + row_src[r0 + i] + (c0 + j) * sc;           \
                        T *b = buf + i * width + j * ev;                                   \
                        for (int64_t v = 0; v < ev; v++)                                   \
                            b[v] = s[v * sv];                                              \
                    }                                                                      \
                for (int64_t j = 0; j < mc; j++)                                           \
                    for (int64_t i = 0; i < mr; i++) {                                     \
                        T *d = dst + d0 + (r0 + i) * dr + col_dst[c0 + j];                 \
                        const T *b = buf + i * width + j * ev;                             \
                        for (int64_t v = 0; v < ev; v++)                                   \
                            d[v * dv] = b[v];                                              \
                    }                                                                      \
            }                                                                              \
        }                                                                                  \
        if (stream)                                                                        \
            STREAM_FENCE();                                                                \
    }

DEFINE_COPY_JOBS(uint8_t)
DEFINE_COPY_JOBS(uint16_t)
DEFINE_COPY_JOBS(uint32_t)
DEFINE_COPY_JOBS(uint64_t)

/* Copy jobs first .. last - 1 with scratch of its own; 0, or -1 where malloc failed. */
static int copy_range(const void *src, void *dst, int word, const Geometry *g,
                      int64_t first, int64_t last)
{
    const size_t scratch = (size_t)((g->tr * g->tc + g->tr) * g->ev) * (size_t)word + ROW_SLACK;
    void *buf = malloc(scratch + BLOCK_ROWS * ((size_t)g->tr * (size_t)word + ROW_SLACK));
    int64_t *idx = malloc((size_t)(g->n_outer > 0 ? g->n_outer : 1) * sizeof(int64_t));
    int failed = buf == NULL || idx == NULL;
    if (!failed) {
        switch (word) {
        case 1: copy_jobs_uint8_t(src, dst, g, first, last, buf, idx); break;
        case 2: copy_jobs_uint16_t(src, dst, g, first, last, buf, idx); break;
        case 4: copy_jobs_uint32_t(src, dst, g, first, last, buf, idx); break;
        default: copy_jobs_uint64_t(src, dst, g, first, last, buf, idx); break;
        }
    }
    free(buf);
    free(idx);
    return failed ? -1 : 0;
}

/* Smallest and largest offset (in words) that sum_k i_k * stride_k reaches, i_k < extent_k. */
/* Whether every word the copy touches lies inside buffers of src_words and dst_words. */
static int in_bounds(const Geometry *g, int64_t src_words, int64_t dst_words)
{
    int64_t s_lo = g->src_off, s_hi = g->src_off, d_lo = 0, d_hi = 0;
    for (int64_t k = 0; k < g->n_outer; k++) {
        if (g->outer[3 * k] < 1)
            return 0;
        reach(g->outer[3 * k], g->outer[3 * k + 1], &s_lo, &s_hi);
        reach(g->outer[3 * k], g->outer[3 * k + 2], &d_lo, &d_hi);
    }
    table_reach(g->row_src, g->nr, &s_lo, &s_hi);
    reach(g->nc, g->sc, &s_lo, &s_hi);
    reach(g->ev, g->sv, &s_lo, &s_hi);
    reach(g->nr, g->dr, &d_lo, &d_hi);
    table_reach(g->col_dst, g->nc, &d_lo, &d_hi);
    reach(g->ev, g->dv, &d_lo, &d_hi);
    return s_lo >= 0 && s_hi < src_words && d_lo >= 0 && d_hi < dst_words;
}

PyDoc_STRVAR(copy_doc,
"copy(src, dst, word, outer, row_src, col_dst, src_off, nr, dr, nc, sc, ev, sv, dv, tr, tc,\n"
"     chunks, threads, stream=False)\n"
"--\n\n"
"Copy words from buffer src to writable buffer dst as the tile layout says (see\n"
"cpu_fallback.tiles.copy); chunks > 0 deals the tiles to that many chunks run on\n"
"`threads` OpenMP threads, 0 copies on the calling thread; stream writes contiguous\n"
"rows of the destination with non-temporal stores.");

static PyObject *copy(PyObject *self, PyObject *args)
{
    Py_buffer src, dst, outer, row_src, col_dst;
    int word, threads, stream = 0;
    long long v[11]; /* src_off, nr, dr, nc, sc, ev, sv, dv, tr, tc, chunks */
    if (!PyArg_ParseTuple(args, "y*w*iy*y*y*LLLLLLLLLLLi|p:copy", &src, &dst, &word, &outer,
                          &row_src, &col_dst, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                          &v[7], &v[8], &v[9], &v[10], &threads, &stream))
        return NULL;
    Geometry g = {NULL, 0, NULL, NULL, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9],
                  stream && HAVE_STREAM};
    const int64_t chunks = v[10];
    PyObject *result = NULL;
    int failed = 0;
    if (word != 1 && word != 2 && word != 4 && word != 8) {
        PyErr_Format(PyExc_ValueError, "word: %d bytes, not 1, 2, 4 or 8", word);
        goto done;
    }
    if (g.nr < 1 || g.nc < 1 || g.ev < 1 || g.tr < 1 || g.tc < 1 || chunks < 0 || threads < 1) {
        PyErr_SetString(PyExc_ValueError, "extents, tiles and threads must be positive");
        goto done;
    }
    g.n_outer = outer.len / 24;
    if ((g.outer = table(&outer, 3 * g.n_outer, "outer")) == NULL ||
        (g.row_src = table(&row_src, g.nr, "row_src")) == NULL ||
        (g.col_dst = table(&col_dst, g.nc, "col_dst")) == NULL)
        goto done;
    if (!in_bounds(&g, src.len / word, dst.len / word)) {
        PyErr_SetString(PyExc_ValueError, "the tile layout reaches outside the buffers");
        goto done;
    }
    int64_t jobs = count_jobs(&g);
    Py_BEGIN_ALLOW_THREADS
    if (chunks == 0) {
        failed = copy_range(src.buf, dst.buf, word, &g, 0, jobs);
    } else {
        int64_t n = chunks < jobs ? chunks : jobs;
        const int caller = launcher_cpu();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(| : failed)
#endif
        {
            leave_cpu(caller);
            /* Chunks taken as threads come free: a thread slowed on its CPU (OpenBLAS's
             * idle worker spins for ~0.1 s after a GEMM, on the CPU this region's worker
             * moves to) takes fewer, where a static deal waited for its share. */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t c = 0; c < n; c++)
                failed |= copy_range(src.buf, dst.buf, word, &g, c * jobs / n,
                                     (c + 1) * jobs / n);
        }
    }
    Py_END_ALLOW_THREADS
    if (failed)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&outer);
    PyBuffer_Release(&row_src);
    PyBuffer_Release(&col_dst);
    return result;
}

PyDoc_STRVAR(isa_doc, "isa()\n--\n\nThe build of the register transposes this module runs: "
                      "'avx512f', 'avx2' or 'baseline' (none).");

static PyObject *isa_name(PyObject *self, PyObject *noargs)
{
    return PyUnicode_FromString(isa);
}

static PyMethodDef methods[] = {
    {"copy", copy, METH_VARARGS, copy_doc},
    {"isa", isa_name, METH_NOARGS, isa_doc},
    {"max_threads", max_threads, METH_NOARGS, max_threads_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tile_copy",
    "The compiled cache-blocked copy of cpu_fallback.blocked (see tile_copy.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__tile_copy(void)
{
    const int build = widest_build();
    transpose8 = transpose_for(build, 8, &side8);
    transpose4 = transpose_for(build, 4, &side4);
    if (transpose8 != NULL)
        isa = build == BUILD_AVX512 ? "avx512f" : "avx2";
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "streams", HAVE_STREAM) < 0)
        Py_CLEAR(m);
    return m;
}
