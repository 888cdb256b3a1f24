/* The loops of cpu_fallback._pairwise (included by pairwise.c, which says what they
 * compute): the Program a kernel call runs, NumPy's pairwise sum of one block, plain
 * and in vector registers, the requests for memory ahead, and DEFINE_PIECES, the sum
 * of a range of rows' pieces for one element type and build. */
#ifndef GPU_TC_PAIRWISE_PIECES_H
#define GPU_TC_PAIRWISE_PIECES_H

#include "kernel_common.h"

/* Partial sums one pairwise piece may hold at once (one per level of halving, and one
 * more: 2^63 elements need fewer). */
#define STACK 64
/* The longest block of NumPy's recursion (its PW_BLOCKSIZE): most blocks are this long. */
#define BLOCK 128
/* How far ahead of a contiguous block its lines are asked into L2, where the sum is
 * larger than twice the last-level cache (Program.ahead, pairwise_kernel.asks_ahead). The
 * hardware's own prefetch fell
 * behind from memory right after an idle spell: the whole sum of a 4096^2 float64 array
 * (8 pieces, 2 threads) in the benchmark's rounds (a 0.15 s pause, then a run of calls)
 * took 3.4-4.3 ms a call without, 3.2-3.5 asked 2 KiB ahead, back to back 2.7-3.2 either
 * way (an equivalent loop outside gpu_tc; 2-core Xeon, AVX-512); on a 2-core Zen 4
 * (32 MiB L3) a 128 MiB float64 sum after pauses ran 34-36 GB/s without, 38-40 asked.
 * From the caches asking only cost there: a 16 MiB float32 sum ran 124-129 GB/s
 * asked, 152-159 not; 32 MiB 39-57 against 54-83 (stop75-probes). */
#define AHEAD_BYTES 2048

typedef struct {
    const int64_t *row_src, *row_dst, *offsets, *lengths, *adds, *entries;
    int64_t rows, pieces, step; /* step: elements between a row's neighbours (>= 1) */
    int ahead;                  /* ask contiguous blocks' lines into L2 ahead (ask_ahead) */
} Program;

/* NumPy's pairwise sum of a block (n <= 128 in NumPy's recursion) whose elements lie
 * `step` apart (1: contiguous): under 8 elements one running sum; else eight (element i
 * into sum i % 8) over the multiple of 8, combined as
 * ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), the rest added one by one. Each
 * running sum adds in order: no reassociation. */
#define DEFINE_BLOCK(T, TYPE)                                                              \
    static inline TYPE block_##T(const TYPE *restrict s, int64_t n, int64_t step)          \
    {                                                                                      \
        TYPE total = 0;                                                                    \
        if (n < 8) {                                                                       \
            for (int64_t i = 0; i < n; i++)                                                \
                total += s[i * step];                                                      \
            return total;                                                                  \
        }                                                                                  \
        const int64_t end = n - n % 8;                                                     \
        TYPE r[8];                                                                         \
        for (int j = 0; j < 8; j++)                                                        \
            r[j] = s[j * step];                                                            \
        for (int64_t i = 8; i < end; i += 8)                                               \
            for (int j = 0; j < 8; j++)                                                    \
                r[j] += s[(i + j) * step];                                                 \
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));         \
        for (int64_t i = end; i < n; i++)                                                  \
            total += s[i * step];                                                          \
        return total;                                                                      \
    }                                                                                      \
                                                                                           \
    static inline TYPE contiguous_##T(const TYPE *restrict s, int64_t n)                   \
    {                                                                                      \
        return block_##T(s, n, 1);                                                         \
    }
DEFINE_BLOCK(f4, float)
DEFINE_BLOCK(f8, double)

#if HAVE_ISAS
/* block_T of a contiguous block, its running sums the lanes of one vector (INDEX: the
 * integers of a shuffle's lane numbers, as wide as T), added in NumPy's order: each lane
 * with its neighbour, each pair with the next pair, then the two halves (shuffles of the
 * whole vector, whose lane 0 ends with the total: AVX-512F's own instructions, where
 * reading lane 4 took an AVX-512DQ one). */
#define DEFINE_VECTOR_BLOCK(NAME, T, TYPE, INDEX, ISA)                                    \
    typedef TYPE NAME##_vec __attribute__((vector_size(8 * sizeof(TYPE))));                \
    typedef INDEX NAME##_lanes __attribute__((vector_size(8 * sizeof(TYPE))));            \
                                                                                           \
    static inline __attribute__((always_inline)) ISA TYPE NAME(const TYPE *restrict s,    \
                                                               int64_t n)                 \
    {                                                                                      \
        if (n < 8)                                                                         \
            return block_##T(s, n, 1);                                                     \
        const int64_t end = n - n % 8;                                                     \
        NAME##_vec r, next;                                                                \
        memcpy(&r, s, sizeof r);                                                           \
        for (int64_t i = 8; i < end; i += 8) {                                             \
            memcpy(&next, s + i, sizeof next);                                             \
            r += next;                                                                     \
        }                                                                                  \
        const NAME##_vec pairs = r + __builtin_shuffle(r, (NAME##_lanes){1, 0, 3, 2, 5, 4, 7, 6}); \
        const NAME##_vec quads =                                                           \
            pairs + __builtin_shuffle(pairs, (NAME##_lanes){2, 3, 0, 1, 6, 7, 4, 5});      \
        const NAME##_vec halves =                                                          \
            quads + __builtin_shuffle(quads, (NAME##_lanes){4, 5, 6, 7, 0, 1, 2, 3});      \
        TYPE total = halves[0];                                                            \
        for (int64_t i = end; i < n; i++)                                                  \
            total += s[i];                                                                 \
        return total;                                                                      \
    }
DEFINE_VECTOR_BLOCK(f8_avx512_block, f8, double, int64_t, ISA_AVX512)
DEFINE_VECTOR_BLOCK(f8_avx2_block, f8, double, int64_t, ISA_AVX2)
DEFINE_VECTOR_BLOCK(f4_avx2_block, f4, float, int32_t, ISA_AVX2)
#endif

/* The leaves of a run of n elements, or 0 where n is none: NumPy's recursion halves a run
 * exactly, level by level, into 2^k leaves (k >= 1) of one length, *leaf, a multiple of
 * 8 of at most BLOCK (128 x 2^k, or 96 x 2^k, ...). */
static inline int64_t run_leaves(int64_t n, int64_t *leaf)
{
    int64_t leaves = 1;
    while (n / leaves > BLOCK)
        leaves *= 2;
    *leaf = n / leaves;
    return leaves > 1 && n % leaves == 0 && *leaf % 8 == 0 ? leaves : 0;
}

/* Ask for the lines AHEAD_BYTES past the `bytes` from s into L2 (a constant `bytes`: the
 * requests unrolled). */
static inline __attribute__((always_inline)) void ask_ahead(const void *s, int64_t bytes)
{
    for (int64_t line = 0; line < bytes; line += 64)
        __builtin_prefetch((const char *)s + AHEAD_BYTES + line, 0, 2);
}

/* Ask into L1 for the elements of `task`'s piece where it is one block of at most BLOCK
 * elements, each in a line of its own (a short strided row, such as a matrix's diagonal:
 * the hardware fetches ahead within a page only). Asked one task ahead, a 4096 x 64^2
 * 'bii->b' float64 on 2 threads took 351-354 us a call against 360-364 (best of 200,
 * medians 362-375 against 366-371; 2-core AVX-512 host, stop69-probes); into L2 it ran
 * slower in a loop outside gpu_tc. */
static inline void ask_for_piece(const char *src, const Program *p, int64_t task, int64_t size)
{
    const int64_t row = task / p->pieces, piece = task % p->pieces, e = p->entries[piece];
    const int64_t bytes = p->step * size;
    if (bytes < 64 || p->entries[piece + 1] - e != 1 || p->lengths[e] > BLOCK)
        return;
    const char *s = src + (p->row_src[row] + p->offsets[piece] * p->step) * size;
    for (int64_t i = 0; i < p->lengths[e]; i++)
        __builtin_prefetch(s + i * bytes, 0, 3);
}

/* Tasks first .. last - 1 (piece task % pieces of row task / pieces), compiled with ISA,
 * contiguous blocks summed by CONTIGUOUS (a whole block's loop unrolled): each the row's
 * sum when a row is one piece, else partials[task]. 1 if a program overflows STACK. */
#define DEFINE_PIECES(NAME, T, TYPE, ISA, CONTIGUOUS)                                      \
    /* One leaf of n <= BLOCK elements from s on, `step` apart (`ahead`: see Program). */  \
    static inline __attribute__((always_inline)) ISA TYPE NAME##_leaf(                     \
        const TYPE *s, int64_t n, int64_t step, int ahead)                                 \
    {                                                                                      \
        if (step != 1)                                                                     \
            return block_##T(s, n, step);                                                  \
        if (ahead)                                                                         \
            ask_ahead(s, n * (int64_t)sizeof(TYPE));                                       \
        return CONTIGUOUS(s, n);                                                           \
    }                                                                                      \
                                                                                           \
    /* A run of `leaves` leaves (a power of two) of `leaf` elements each from s on:        \
     * NumPy's recursion over it, a perfect tree, its partial sums held from `stack` up    \
     * (after leaf i, ctz(i + 1) additions; the last one leaves the run's sum). Called     \
     * with leaf BLOCK, a constant, the full blocks' loop is unrolled. */                  \
    static inline __attribute__((always_inline)) ISA TYPE NAME##_run(                      \
        const TYPE *s, int64_t leaves, int64_t leaf, int64_t step, int ahead, TYPE *stack) \
    {                                                                                      \
        int64_t top = 0;                                                                   \
        for (int64_t i = 0; i < leaves; i++, s += leaf * step) {                           \
            TYPE sum = NAME##_leaf(s, leaf, step, ahead);                                  \
            for (int a = __builtin_ctzll((uint64_t)i + 1); a > 0; a--)                     \
                sum = stack[--top] + sum;                                                  \
            stack[top++] = sum;                                                            \
        }                                                                                  \
        return stack[0];                                                                   \
    }                                                                                      \
                                                                                           \
    /* Blocks and runs [0, count) of a piece from s on (lengths[i] elements `step` apart,  \
     * then adds[i] partial sums added): the piece's sum, into *sum; 1 where the program   \
     * overflows STACK. The contiguous loop apart, so that few values are live in it. */   \
    static inline __attribute__((always_inline)) ISA int NAME##_piece(                     \
        const TYPE *s, const int64_t *restrict lengths, const int64_t *restrict adds,      \
        int64_t count, int64_t step, int ahead, TYPE *sum)                                 \
    {                                                                                      \
        TYPE stack[STACK];                                                                 \
        int64_t top = 0;                                                                   \
        stack[0] = 0;                                                                      \
        for (int64_t i = 0; i < count; i++) {                                              \
            const int64_t n = lengths[i];                                                  \
            int64_t a = adds[i];                                                           \
            if (top == STACK || a > top)                                                   \
                return 1;                                                                  \
            TYPE block;                                                                    \
            if (n == BLOCK) {                                                              \
                block = NAME##_leaf(s, BLOCK, step, ahead);                                \
            } else if (n > BLOCK) { /* a run, as program_in_bounds checked */             \
                int64_t leaf;                                                              \
                const int64_t leaves = run_leaves(n, &leaf);                               \
                /* a run holds ctz(leaves) partial sums; one slot kept spare, as the        \
                 * leaves one by one would */                                              \
                if (top + __builtin_ctzll((uint64_t)leaves) >= STACK)                      \
                    return 1;                                                              \
                block = leaf == BLOCK ? NAME##_run(s, leaves, BLOCK, step, ahead, stack + top) \
                                      : NAME##_run(s, leaves, leaf, step, ahead, stack + top); \
            } else {                                                                       \
                block = step != 1 ? block_##T(s, n, step) : CONTIGUOUS(s, n);              \
            }                                                                              \
            s += n * step;                                                                 \
            for (; a > 0; a--)                                                             \
                block = stack[--top] + block;                                              \
            stack[top++] = block;                                                          \
        }                                                                                  \
        *sum = stack[0];                                                                   \
        return 0;                                                                          \
    }                                                                                      \
                                                                                           \
    ISA static int NAME(const void *source, void *destination, const Program *p,          \
                        void *partials, int64_t first, int64_t last)                       \
    {                                                                                      \
        const TYPE *src = source;                                                          \
        TYPE *dst = destination, *partial = partials;                                      \
        const int64_t step = p->step;                                                      \
        for (int64_t task = first; task < last; task++) {                                  \
            const int64_t row = task / p->pieces, piece = task % p->pieces;                \
            const int64_t e = p->entries[piece], count = p->entries[piece + 1] - e;        \
            const TYPE *s = src + p->row_src[row] + p->offsets[piece] * step;              \
            TYPE *out = p->pieces == 1 ? dst + p->row_dst[row] : partial + task;           \
            if (step != 1 && task + 1 < last)                                              \
                ask_for_piece(source, p, task + 1, sizeof(TYPE));                          \
            const int64_t *lengths = p->lengths + e, *adds = p->adds + e;                  \
            /* a loop for each case, its step and `ahead` constants in it */               \
            if (step != 1  ? NAME##_piece(s, lengths, adds, count, step, 0, out)           \
                : p->ahead ? NAME##_piece(s, lengths, adds, count, 1, 1, out)              \
                           : NAME##_piece(s, lengths, adds, count, 1, 0, out))             \
                return 1;                                                                  \
        }                                                                                  \
        return 0;                                                                          \
    }

#endif
