/* Register transposes for the copy kernel (tile_copy.c): a tile of one-word elements
 * whose rows are contiguous in the destination and whose columns are contiguous in the
 * source, moved in square blocks transposed inside vector registers, without the pass
 * through the tile buffer and the column-wise reads from it that the plain loops make.
 * Blocks are 8 x 8 8-byte words in AVX-512, 4 x 4 8-byte words and 8 x 8 4-byte words in
 * AVX2; tile_copy.c takes them for tiles whose sides are whole blocks, the widest build
 * this CPU runs chosen when the module loads (kernel_common.h's widest_build).
 *
 * Element (i, j) of a tile lies at src[row_src[i] + j] and goes to dst[col_dst[j] + i],
 * by plain stores: a streamed copy transposes into scratch rows and streams those
 * (tile_copy.c), since rows that start inside a line would be written a part of a line
 * at a time (a 128 MiB 'abcd->badc' took 28 ms so, against 16 by the loops). */
#ifndef GPU_TC_TRANSPOSE_BLOCKS_H
#define GPU_TC_TRANSPOSE_BLOCKS_H

#include "kernel_common.h"

typedef void (*TransposeTile)(const void *src, const int64_t *row_src, void *dst,
                              const int64_t *col_dst, int64_t mr, int64_t mc);

#if HAVE_ISAS
#include <immintrin.h>
#define HAVE_TRANSPOSE_BLOCKS 1

/* The walk each transpose makes: blocks of `side` columns, down the tile's rows `side`
 * at a time (so each destination row is written in order); a block's rows are loaded
 * into r[] and its transposed rows stored from col[]. */
#define EACH_BLOCK(T, side)                                                                \
    const T *src = src_;                                                                   \
    T *dst = dst_;                                                                         \
    for (int64_t j = 0; j < mc; j += (side))                                               \
        for (int64_t i = 0; i < mr; i += (side))
#define LOAD_ROWS(r, side, load)                                                           \
    for (int k = 0; k < (side); k++)                                                       \
        r[k] = load(src + row_src[i + k] + j)
#define INTERLEAVE_PAIRS(t, r, side, unpacklo, unpackhi)                                   \
    for (int k = 0; k < (side); k += 2) {                                                  \
        t[k] = unpacklo(r[k], r[k + 1]);                                                   \
        t[k + 1] = unpackhi(r[k], r[k + 1]);                                               \
    }
#define STORE_COLUMNS(col, side, store)                                                    \
    for (int c = 0; c < (side); c++)                                                       \
        store(dst + col_dst[j + c] + i, col[c])

ISA_AVX512 static void transpose_u8_avx512(const void *src_, const int64_t *row_src,
                                           void *dst_, const int64_t *col_dst, int64_t mr,
                                           int64_t mc)
{
    /* Pairs of rows interleaved, then pairs of pairs, then halves. */
    const __m512i lo2 = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi2 = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    const __m512i lo4 = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
    const __m512i hi4 = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
    EACH_BLOCK(double, 8) {
        __m512d r[8], t[8], u[8], col[8];
        LOAD_ROWS(r, 8, _mm512_loadu_pd);
        INTERLEAVE_PAIRS(t, r, 8, _mm512_unpacklo_pd, _mm512_unpackhi_pd);
        for (int h = 0; h < 8; h += 4) { /* rows h .. h + 3: columns c and c + 4 */
            u[h] = _mm512_permutex2var_pd(t[h], lo2, t[h + 2]);
            u[h + 1] = _mm512_permutex2var_pd(t[h + 1], lo2, t[h + 3]);
            u[h + 2] = _mm512_permutex2var_pd(t[h], hi2, t[h + 2]);
            u[h + 3] = _mm512_permutex2var_pd(t[h + 1], hi2, t[h + 3]);
        }
        for (int c = 0; c < 4; c++) {
            col[c] = _mm512_permutex2var_pd(u[c], lo4, u[c + 4]);
            col[c + 4] = _mm512_permutex2var_pd(u[c], hi4, u[c + 4]);
        }
        STORE_COLUMNS(col, 8, _mm512_storeu_pd);
    }
}

ISA_AVX2 static void transpose_u8_avx2(const void *src_, const int64_t *row_src, void *dst_,
                                       const int64_t *col_dst, int64_t mr, int64_t mc)
{
    EACH_BLOCK(double, 4) {
        __m256d r[4], t[4], col[4];
        LOAD_ROWS(r, 4, _mm256_loadu_pd);
        t[0] = _mm256_unpacklo_pd(r[0], r[1]);
        t[1] = _mm256_unpackhi_pd(r[0], r[1]);
        t[2] = _mm256_unpacklo_pd(r[2], r[3]);
        t[3] = _mm256_unpackhi_pd(r[2], r[3]);
        col[0] = _mm256_permute2f128_pd(t[0], t[2], 0x20);
        col[1] = _mm256_permute2f128_pd(t[1], t[3], 0x20);
        col[2] = _mm256_permute2f128_pd(t[0], t[2], 0x31);
        col[3] = _mm256_permute2f128_pd(t[1], t[3], 0x31);
        STORE_COLUMNS(col, 4, _mm256_storeu_pd);
    }
}

ISA_AVX2 static void transpose_u4_avx2(const void *src_, const int64_t *row_src, void *dst_,
                                       const int64_t *col_dst, int64_t mr, int64_t mc)
{
    EACH_BLOCK(float, 8) {
        __m256 r[8], t[8], s[8], col[8];
        LOAD_ROWS(r, 8, _mm256_loadu_ps);
        INTERLEAVE_PAIRS(t, r, 8, _mm256_unpacklo_ps, _mm256_unpackhi_ps);
        for (int h = 0; h < 8; h += 4) { /* rows h .. h + 3, columns c and c + 4 */
            s[h] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
            s[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
            s[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
            s[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        for (int c = 0; c < 4; c++) {
            col[c] = _mm256_permute2f128_ps(s[c], s[c + 4], 0x20);
            col[c + 4] = _mm256_permute2f128_ps(s[c], s[c + 4], 0x31);
        }
        STORE_COLUMNS(col, 8, _mm256_storeu_ps);
    }
}
#else
#define HAVE_TRANSPOSE_BLOCKS 0
#endif

/* The transpose this build and CPU run for words of `word` bytes (4 or 8), its block
 * side in *side; NULL (side 0) where there is none (another word, or the baseline). */
static inline TransposeTile transpose_for(int build, int word, int64_t *side)
{
    *side = 0;
#if HAVE_TRANSPOSE_BLOCKS
    if (word == 8 && build == BUILD_AVX512)
        return *side = 8, transpose_u8_avx512;
    if (word == 8 && build >= BUILD_AVX2)
        return *side = 4, transpose_u8_avx2;
    if (word == 4 && build >= BUILD_AVX2)
        return *side = 8, transpose_u4_avx2;
#else
    (void)build;
    (void)word;
#endif
    return NULL;
}

#endif
