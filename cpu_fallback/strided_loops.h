/* The loops of cpu_fallback._sums's strided sums (included by sums.c, which says what
 * they compute): the Nest a call runs and DEFINE_STRIDED, one function's five inner
 * loops (KIND_*) for a source, accumulator and destination type. */
#ifndef GPU_TC_STRIDED_LOOPS_H
#define GPU_TC_STRIDED_LOOPS_H

#include "register_rows.h"

#include <stdint.h>

enum { KIND_REGISTERS, KIND_UNIT_ROWS, KIND_ROWS, KIND_COLUMNS, KIND_COLUMNS_BY_FOURS };

/* Middle row r starts at summed_src[r], or at first + r * step where step is not 0:
 * reading the table for rows one step apart made narrow rows 1.5-2x slower (an int64
 * load ahead of each row's loads; 'xd->d' of 2^18 x 64 float32 on one thread: 4.2 ms a
 * call against 2.2 on the 2-core EPYC), and the bounds check then scans no table. */
typedef struct {
    int kind;
    const int64_t *kept_src, *kept_dst, *summed_src;
    int64_t n_kept, n_summed, n, ss, ds, first, step;
} Nest;

#define MIDDLE(r) (step ? first + (r) * step : summed[(r)])

/* Rows r.. of D's row d (n elements, the rows' elements STEP apart) added four a pass,
 * in order, each step rounded to A: D's row read and written a quarter as often, the
 * same bits as a row at a time (a 64^4 'ijkj->ik' in C, 2 threads: 142 us against 172).
 * Leaves r at the first row of the remainder. */
#define FOUR_ROWS(S, A, D, STEP)                                                           \
    for (; r + 4 <= m; r += 4) {                                                           \
        const S *restrict s_0 = src + s0 + MIDDLE(r);                                      \
        const S *restrict s_1 = src + s0 + MIDDLE(r + 1);                                  \
        const S *restrict s_2 = src + s0 + MIDDLE(r + 2);                                  \
        const S *restrict s_3 = src + s0 + MIDDLE(r + 3);                                  \
        _Pragma("GCC ivdep") for (int64_t j = 0; j < n; j++) {                             \
            A t = (A)d[j] + (A)s_0[j * (STEP)];                                            \
            t = t + (A)s_1[j * (STEP)];                                                    \
            t = t + (A)s_2[j * (STEP)];                                                    \
            d[j] = (D)(t + (A)s_3[j * (STEP)]);                                            \
        }                                                                                  \
    }

/* out[j] = sum over r of row r, for every outer index k in [k0, k1). Integer sums
 * accumulate in unsigned 64-bit words (wrapping, as NumPy's do), then are stored in
 * the destination's type. A sum in a register (REGISTERS, COLUMNS_BY_FOURS) adds four
 * elements a pass, in order (the same bits): fewer instructions to each load, so more
 * loads in flight where each element is a cache line of its own (2 threads on the
 * 2-core Xeon, medians: 'bii->b' of 4096 x 64 x 64 float64 in 385-397 us against
 * 437-446; a 64^4 'ijkj->ik' by fours in 304-305 against 328-347). Where the lines come
 * from nearer caches, columns by fours are slower (a 32 x 64 x 32 x 64 'ijkj->ik' in 67
 * us against 59, 16 x 128 x 16 x 128 in 30 against 27), and so is the 64^4 one in
 * float32 (358-361 against 310-311), so the columns are summed both ways and timed
 * (cpu_fallback.strided_sum). */
#define DEFINE_STRIDED(NAME, S, A, D, IN_REGISTERS)                                       \
    CLONES static void NAME(const S *restrict src, D *restrict dst, const Nest *g,          \
                            int64_t k0, int64_t k1)                                        \
    {                                                                                      \
        const int64_t n = g->n, ss = g->ss, ds = g->ds, m = g->n_summed;                   \
        const int64_t *summed = g->summed_src, first = g->first, step = g->step;           \
        for (int64_t k = k0; k < k1; k++) {                                                \
            const int64_t s0 = g->kept_src[k], d0 = g->kept_dst[k];                        \
            if (g->kind == KIND_REGISTERS) {                                               \
                A total = 0;                                                               \
                for (int64_t r = 0; r < m; r++) {                                          \
                    const S *s = src + s0 + MIDDLE(r);                                     \
                    int64_t j = 0;                                                         \
                    for (; j + 4 <= n; j += 4, s += 4 * ss) {                              \
                        total += (A)s[0];                                                  \
                        total += (A)s[ss];                                                 \
                        total += (A)s[2 * ss];                                             \
                        total += (A)s[3 * ss];                                             \
                    }                                                                      \
                    for (; j < n; j++, s += ss)                                            \
                        total += (A)s[0];                                                  \
                }                                                                          \
                dst[d0] = (D)total;                                                        \
            } else if (g->kind == KIND_UNIT_ROWS) {                                        \
                D *restrict d = dst + d0;                                                  \
                if (ss == 1 && step && IN_REGISTERS(src + s0 + first, d, step, m, n))      \
                    continue;                                                              \
                for (int64_t j = 0; j < n; j++)                                            \
                    d[j] = 0;                                                              \
                int64_t r = 0;                                                             \
                if (ss == 1) /* a literal step: contiguous rows added as vectors */        \
                    FOUR_ROWS(S, A, D, 1)                                                  \
                else                                                                       \
                    FOUR_ROWS(S, A, D, ss)                                                 \
                for (; r < m; r++) {                                                       \
                    const S *s = src + s0 + MIDDLE(r);                                     \
                    for (int64_t j = 0; j < n; j++)                                        \
                        d[j] = (D)((A)d[j] + (A)s[j * ss]);                                \
                }                                                                          \
            } else if (g->kind >= KIND_COLUMNS) {                                          \
                const int64_t fours = g->kind == KIND_COLUMNS_BY_FOURS ? m / 4 * 4 : 0;     \
                for (int64_t j = 0; j < n; j++) {                                          \
                    const S *s = src + s0 + j * ss;                                        \
                    A total = 0;                                                           \
                    int64_t r = 0;                                                         \
                    for (; r < fours; r += 4) {                                            \
                        total += (A)s[MIDDLE(r)];                                          \
                        total += (A)s[MIDDLE(r + 1)];                                      \
                        total += (A)s[MIDDLE(r + 2)];                                      \
                        total += (A)s[MIDDLE(r + 3)];                                      \
                    }                                                                      \
                    for (; r < m; r++)                                                     \
                        total += (A)s[MIDDLE(r)];                                          \
                    dst[d0 + j * ds] = (D)total;                                           \
                }                                                                          \
            } else {                                                                       \
                for (int64_t j = 0; j < n; j++)                                            \
                    dst[d0 + j * ds] = 0;                                                  \
                for (int64_t r = 0; r < m; r++) {                                          \
                    const S *s = src + s0 + MIDDLE(r);                                     \
                    for (int64_t j = 0; j < n; j++)                                        \
                        dst[d0 + j * ds] = (D)((A)dst[d0 + j * ds] + (A)s[j * ss]);        \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
    }

#endif
