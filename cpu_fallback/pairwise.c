/* cpu_fallback._pairwise: the compiled kernel of cpu_fallback.pairwise_kernel, sums of
 * rows in NumPy's pairwise order (a RowLayout and a LeafProgram, cpu_fallback/
 * sum_layout.py).
 *
 * Each piece of a row walks its blocks in address order, summing each block as NumPy
 * does (eight running sums over the multiple of 8, the rest one by one) and adding
 * partial sums on a short stack as the program says; the pieces of a row are then added
 * pairwise, neighbours first. The result has NumPy's bits however the pieces are shared.
 *
 * A contiguous block keeps its eight running sums in one vector of eight lanes (GCC's
 * vector extensions: one AVX-512 register of doubles, two AVX2 ones, one AVX2 register
 * of floats). Three builds of the pieces' loops, one chosen when the module loads:
 * AVX-512, AVX2 and the baseline, whose blocks are plain loops. On a 2-core AVX-512
 * host the whole sum of a 4096^2 float64 array, 8 pieces on 2 threads, took 4.4-4.6 ms a
 * call with the plain loops (GCC's vectorising of the eight sums: more instructions per
 * cache line read, the sums combined by extracts), 3.0-3.1 (medians) with the vector
 * blocks, the same bits.
 *
 * With threads > 0 the pieces are shared among that many OpenMP threads, each writing
 * its own outputs; 0 runs on the calling thread, without a parallel region (a forked
 * child must not start one). The GIL is released while they sum; every offset is
 * checked first against the memory the two arrays' views span (kernel_common.h).
 */
#include "kernel_common.h"

#include <stdlib.h>
#include <string.h>

#include "pairwise_pieces.h"

DEFINE_PIECES(f8_baseline, f8, double, , contiguous_f8)
DEFINE_PIECES(f4_baseline, f4, float, , contiguous_f4)
#if HAVE_ISAS
DEFINE_PIECES(f8_avx512, f8, double, ISA_AVX512, f8_avx512_block)
DEFINE_PIECES(f8_avx2, f8, double, ISA_AVX2, f8_avx2_block)
DEFINE_PIECES(f4_avx2, f4, float, ISA_AVX2, f4_avx2_block)
#endif

typedef int (*PiecesFn)(const void *, void *, const Program *, void *, int64_t, int64_t);

static PiecesFn pieces_f8 = f8_baseline, pieces_f4 = f4_baseline;
static const char *isa = "baseline";

/* The widest build this CPU runs (or GPU_TC_KERNEL_ISA's narrower one); float32 blocks
 * are eight lanes of 32 bytes, AVX2's, under AVX-512 too. */
static void choose_isa(void)
{
#if HAVE_ISAS
    const int build = widest_build();
    if (build == BUILD_AVX512)
        pieces_f8 = f8_avx512, pieces_f4 = f4_avx2, isa = "avx512f";
    else if (build == BUILD_AVX2)
        pieces_f8 = f8_avx2, pieces_f4 = f4_avx2, isa = "avx2";
#endif
}

/* Each cut row's piece sums added pairwise, neighbours first, into its element. */
#define DEFINE_COMBINE(T, TYPE)                                                            \
    static void combine_##T(void *destination, const Program *p, void *partials)          \
    {                                                                                      \
        TYPE *restrict dst = destination, *restrict partial = partials;                    \
        for (int64_t row = 0; row < p->rows; row++) {                                      \
            TYPE *part = partial + row * p->pieces;                                        \
            for (int64_t width = p->pieces / 2; width >= 1; width /= 2)                    \
                for (int64_t i = 0; i < width; i++)                                        \
                    part[i] = part[2 * i] + part[2 * i + 1];                               \
            dst[p->row_dst[row]] = part[0];                                                \
        }                                                                                  \
    }
DEFINE_COMBINE(f4, float)
DEFINE_COMBINE(f8, double)

static int rows(PiecesFn pieces, void (*combine)(void *, const Program *, void *),
                const void *src, void *dst, const Program *p, void *partial, int64_t chunks,
                int threads)
{
    const int64_t tasks = p->rows * p->pieces;
    int failed = 0;
    if (threads == 0 || chunks < 2) {
        failed = pieces(src, dst, p, partial, 0, tasks);
    } else {
        const int caller = launcher_cpu();
#pragma omp parallel num_threads(threads) reduction(| : failed)
        {
            leave_cpu(caller);
#pragma omp for schedule(static)
            for (int64_t c = 0; c < chunks; c++)
                failed |= pieces(src, dst, p, partial, c * tasks / chunks,
                                 (c + 1) * tasks / chunks);
        }
    }
    if (!failed && p->pieces > 1)
        combine(dst, p, partial);
    return failed;
}

/* Whether every piece of every row lies inside the buffers, the program's entries are
 * in order, its lengths not negative and every one past BLOCK a run (run_leaves). */
static int program_in_bounds(const Program *p, int64_t n_entries, int64_t src_len,
                             int64_t dst_len)
{
    if (p->entries[0] < 0 || p->entries[p->pieces] > n_entries)
        return 0;
    int64_t s_lo = 0, s_hi = 0, d_lo = 0, d_hi = 0;
    table_reach(p->row_src, p->rows, &s_lo, &s_hi);
    table_reach(p->row_dst, p->rows, &d_lo, &d_hi);
    if (d_lo < 0 || d_hi >= dst_len)
        return 0;
    for (int64_t piece = 0; piece < p->pieces; piece++) {
        int64_t span = 0;
        if (p->entries[piece + 1] < p->entries[piece])
            return 0;
        for (int64_t e = p->entries[piece]; e < p->entries[piece + 1]; e++) {
            const int64_t n = p->lengths[e];
            int64_t leaf;
            if (n < 0 || p->adds[e] < 0 || (n > BLOCK && run_leaves(n, &leaf) == 0))
                return 0;
            span += n;
            if (span > src_len) /* no piece is longer than the source (nor can span wrap) */
                return 0;
        }
        /* every product and sum below checked: huge offsets or steps cannot wrap */
        int64_t start, reach, lo, hi;
        if (__builtin_mul_overflow(p->offsets[piece], p->step, &start) ||
            __builtin_mul_overflow(span > 0 ? span - 1 : 0, p->step, &reach) ||
            __builtin_add_overflow(s_lo, start, &lo) || __builtin_add_overflow(s_hi, start, &hi) ||
            __builtin_add_overflow(hi, reach, &hi))
            return 0;
        if (lo < 0 || (span > 0 && hi >= src_len))
            return 0;
    }
    return 1;
}

PyDoc_STRVAR(pairwise_doc,
"pairwise(src, dst, type, row_src, row_dst, offsets, lengths, adds, entries, chunks,\n"
"         threads, step, src_base, dst_base, ahead)\n"
"--\n\n"
"Write the pairwise sum of each row of array src into writable array dst (any objects\n"
"exporting strided buffers: NumPy's views as they are), each row cut into the pieces\n"
"whose recursions the program spells out (see cpu_fallback.pairwise_kernel.run); type\n"
"'f4' or 'f8'. The tables' offsets count elements from each array's lowest address,\n"
"src_base and dst_base elements below its element 0. threads > 0 shares `chunks`\n"
"chunks of the pieces among that many OpenMP threads. A row's elements lie step\n"
"elements apart. A true `ahead` asks the lines of contiguous blocks into L2 before\n"
"they are read (for sums larger than the caches).");

static PyObject *pairwise(PyObject *self, PyObject *args)
{
    PyObject *src_array, *dst_array;
    Py_buffer src = {0}, dst = {0}; /* no object held until strided_memory fills them */
    Py_buffer row_src, row_dst, offsets, lengths, adds, entries;
    const char *name;
    long long chunks, step, src_base, dst_base;
    int threads, ahead;
    if (!PyArg_ParseTuple(args, "OOsy*y*y*y*y*y*LiLLLp:pairwise", &src_array, &dst_array,
                          &name, &row_src, &row_dst, &offsets, &lengths, &adds, &entries,
                          &chunks, &threads, &step, &src_base, &dst_base, &ahead))
        return NULL;
    PyObject *result = NULL;
    void *partial = NULL;
    int failed = 0;
    char *src_origin, *dst_origin;
    int64_t src_len, dst_len;
    const int f8 = strcmp(name, "f8") == 0;
    const Py_ssize_t size = f8 ? sizeof(double) : sizeof(float);
    Program p = {NULL, NULL, NULL, NULL, NULL, NULL, (int64_t)(row_src.len / 8),
                 (int64_t)(offsets.len / 8), (int64_t)step, ahead};
    const int64_t n_entries = (int64_t)(lengths.len / 8);
    if (!f8 && strcmp(name, "f4") != 0) {
        PyErr_Format(PyExc_ValueError, "pairwise sums are float32 or float64, not %s", name);
        goto done;
    }
    if (p.rows < 1 || p.pieces < 1 || (p.pieces & (p.pieces - 1)) != 0 || chunks < 1 ||
        threads < 0 || p.step < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "needs rows, a power-of-two count of pieces, chunks, threads and a "
                        "positive step");
        goto done;
    }
    if ((p.row_src = table(&row_src, p.rows, "row_src")) == NULL ||
        (p.row_dst = table(&row_dst, p.rows, "row_dst")) == NULL ||
        (p.offsets = table(&offsets, p.pieces, "offsets")) == NULL ||
        (p.lengths = table(&lengths, n_entries, "lengths")) == NULL ||
        (p.adds = table(&adds, n_entries, "adds")) == NULL ||
        (p.entries = table(&entries, p.pieces + 1, "entries")) == NULL)
        goto done;
    if (strided_memory(src_array, 0, size, src_base, &src, &src_origin, &src_len) < 0 ||
        strided_memory(dst_array, 1, size, dst_base, &dst, &dst_origin, &dst_len) < 0)
        goto done;
    if (!program_in_bounds(&p, n_entries, src_len, dst_len)) {
        PyErr_SetString(PyExc_ValueError,
                        "the row program reaches outside the buffers, or holds a block of more "
                        "than 128 elements that is not a run (2^k leaves of 72-128 elements)");
        goto done;
    }
    const int64_t tasks = p.rows * p.pieces;
    if (p.pieces > 1 && (partial = malloc((size_t)tasks * (size_t)size)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (chunks > tasks)
        chunks = tasks;
    Py_BEGIN_ALLOW_THREADS
    failed = f8 ? rows(pieces_f8, combine_f8, src_origin, dst_origin, &p, partial, chunks,
                       threads)
                : rows(pieces_f4, combine_f4, src_origin, dst_origin, &p, partial, chunks,
                       threads);
    Py_END_ALLOW_THREADS
    if (failed)
        PyErr_SetString(PyExc_ValueError, "the row program overflows its stack");
    else
        result = Py_NewRef(Py_None);
done:
    free(partial);
    PyBuffer_Release(&src); /* nothing to release where none was taken */
    PyBuffer_Release(&dst);
    PyBuffer_Release(&row_src);
    PyBuffer_Release(&row_dst);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&adds);
    PyBuffer_Release(&entries);
    return result;
}

PyDoc_STRVAR(isa_doc,
"isa()\n--\n\nThe build of the pieces' loops this CPU runs: 'avx512f', 'avx2' or "
"'baseline'.");

static PyObject *isa_name(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(isa);
}

static PyMethodDef methods[] = {
    {"pairwise", pairwise, METH_VARARGS, pairwise_doc},
    {"max_threads", max_threads, METH_NOARGS, max_threads_doc},
    {"isa", isa_name, METH_NOARGS, isa_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pairwise",
    "The compiled pairwise sums of cpu_fallback.pairwise_kernel (see pairwise.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__pairwise(void)
{
    choose_isa();
    return PyModule_Create(&module);
}
