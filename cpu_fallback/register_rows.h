/* Narrow contiguous rows of float or double summed with the sums in vector registers
 * (included by sums.c): rows of 64 to 512 bytes, a whole number of 64-byte vectors,
 * row r at src + r * step, each element summed over the rows in order (the bits of
 * adding the rows into D one at a time). Adding each row into D in memory instead
 * kept one store and reload of D per row or four in flight; in registers, 'xd->d' of
 * 2^18 x 64 float32 on one thread ran 2.2 ms a call against 3.6-4.1 adding four rows
 * a pass, 2^16 x 64 float64 4.8-5.0 against 11.5-13.3 (the 2-core EPYC). */
#ifndef GPU_TC_REGISTER_ROWS_H
#define GPU_TC_REGISTER_ROWS_H

#include <stdint.h>
#include <string.h>

typedef float floats_64 __attribute__((vector_size(64)));
typedef double doubles_64 __attribute__((vector_size(64)));

/* The m rows' sum into d, NV vectors of type V a row, each loaded by memcpy (any
 * alignment, and no access through a pointer of the vector type). */
#define ROWS_IN_REGISTERS(V, NV)                                                           \
    {                                                                                      \
        V sums[NV];                                                                        \
        for (int v = 0; v < NV; v++)                                                       \
            sums[v] = (V){0};                                                              \
        for (int64_t r = 0; r < m; r++) {                                                  \
            const char *row = (const char *)(src + r * step);                              \
            for (int v = 0; v < NV; v++) {                                                 \
                V part;                                                                    \
                memcpy(&part, row + v * sizeof(V), sizeof part);                           \
                sums[v] += part;                                                           \
            }                                                                              \
        }                                                                                  \
        memcpy(d, sums, sizeof sums);                                                      \
    }

/* NAME(src, d, step, m, n): 1 with the sum of m rows of n elements written into d, or
 * 0 (nothing written) where the rows are not a whole number of vectors up to 512 bytes. */
#define DEFINE_REGISTER_ROWS(NAME, S, V)                                                   \
    CLONES static int NAME(const S *restrict src, S *restrict d, int64_t step, int64_t m,  \
                           int64_t n)                                                      \
    {                                                                                      \
        const int64_t lanes = (int64_t)(sizeof(V) / sizeof(S));                            \
        if (n % lanes != 0 || n > 8 * lanes)                                               \
            return 0;                                                                      \
        switch (n / lanes) {                                                               \
        case 1: ROWS_IN_REGISTERS(V, 1) break;                                             \
        case 2: ROWS_IN_REGISTERS(V, 2) break;                                             \
        case 3: ROWS_IN_REGISTERS(V, 3) break;                                             \
        case 4: ROWS_IN_REGISTERS(V, 4) break;                                             \
        case 5: ROWS_IN_REGISTERS(V, 5) break;                                             \
        case 6: ROWS_IN_REGISTERS(V, 6) break;                                             \
        case 7: ROWS_IN_REGISTERS(V, 7) break;                                             \
        default: ROWS_IN_REGISTERS(V, 8) break;                                            \
        }                                                                                  \
        return 1;                                                                          \
    }

DEFINE_REGISTER_ROWS(float_rows_in_registers, float, floats_64)
DEFINE_REGISTER_ROWS(double_rows_in_registers, double, doubles_64)

/* The other types add their rows into D (DEFINE_STRIDED's IN_REGISTERS for them). */
#define NO_REGISTER_ROWS(src, d, step, m, n) 0

#endif
