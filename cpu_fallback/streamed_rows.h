/* Streamed rows for the copy kernel (tile_copy.c): a tile's destination rows gathered
 * into scratch, then written with non-temporal stores (nontemporal.h), from the tile
 * buffer (stream_tile) or by register transposes straight from the source
 * (stream_blocks, transpose_blocks.h). DEFINE_STREAM_TILE defines its function for one
 * word type. */
#ifndef GPU_TC_STREAMED_ROWS_H
#define GPU_TC_STREAMED_ROWS_H

#include "nontemporal.h"
#include "transpose_blocks.h"

/* The most rows a register transpose writes at once. */
#define BLOCK_ROWS 8

/* Bytes of scratch a streamed row needs beyond its own length (see stream_tile). */
#define ROW_SLACK 4096

/* Write a tile's mr x mc elements of ev words, read along the source's rows into `buf`
 * (rows `width` words apart), to the destination's rows (column j at dst + col_dst[j])
 * with non-temporal stores, each row gathered first into `scratch` (its length plus
 * ROW_SLACK bytes), where its address differs from the row's by about 2 KiB modulo
 * 4 KiB: a load whose address matched a pending non-temporal store's in its low 12 bits
 * waited for it (a 128 MiB 'abcd->badc' on one Zen 4 core: 24 ms, or 17.5 so placed). */
#define DEFINE_STREAM_TILE(T)                                                              \
    static void stream_tile_##T(T *dst, const int64_t *restrict col_dst,                   \
                                const T *restrict buf, char *scratch, int64_t mr,          \
                                int64_t mc, int64_t width, int64_t ev)                     \
    {                                                                                      \
        for (int64_t j = 0; j < mc; j++) {                                                 \
            char *row = (char *)(dst + col_dst[j]);                                        \
            T *restrict out = (T *)(scratch + (((uintptr_t)row + 2048 - (uintptr_t)scratch) \
                                               & (ROW_SLACK - 64)));                         \
            if (ev == 1)                                                                   \
                for (int64_t i = 0; i < mr; i++)                                           \
                    out[i] = buf[i * width + j];                                           \
            else                                                                           \
                for (int64_t i = 0; i < mr; i++)                                           \
                    for (int64_t v = 0; v < ev; v++)                                       \
                        out[i * ev + v] = buf[i * width + j * ev + v];                     \
            stream_bytes(row, (const char *)out, (size_t)(mr * ev) * sizeof(T));           \
        }                                                                                  \
    }

/* A tile of whole blocks of `word`-byte elements, streamed: `side` destination rows at a
 * time transposed in registers into scratch rows (`rows`: room for BLOCK_ROWS rows of
 * mr words and ROW_SLACK bytes each), each placed about 2 KiB off its destination row
 * modulo 4 KiB (see stream_tile), then written with non-temporal stores. Offsets are in
 * words, as the transposes take them. */
static void stream_blocks(const char *src, const int64_t *row_src, char *dst,
                          const int64_t *col_dst, int64_t mr, int64_t mc,
                          TransposeTile transpose, int64_t side, char *rows, size_t word)
{
    const uintptr_t slot = (uintptr_t)mr * word + ROW_SLACK;
    int64_t at[BLOCK_ROWS];
    for (int64_t j = 0; j < mc; j += side) {
        for (int64_t c = 0; c < side; c++) {
            const uintptr_t row = (uintptr_t)(dst + col_dst[j + c] * (int64_t)word);
            const uintptr_t base = (uintptr_t)rows + (uintptr_t)c * slot;
            at[c] = (int64_t)((base - (uintptr_t)rows + ((row + 2048 - base) & (ROW_SLACK - 64)))
                              / word);
        }
        transpose(src + j * (int64_t)word, row_src, rows, at, mr, side);
        for (int64_t c = 0; c < side; c++)
            stream_bytes(dst + col_dst[j + c] * (int64_t)word, rows + at[c] * (int64_t)word,
                         (size_t)mr * word);
    }
}

DEFINE_STREAM_TILE(uint8_t)
DEFINE_STREAM_TILE(uint16_t)
DEFINE_STREAM_TILE(uint32_t)
DEFINE_STREAM_TILE(uint64_t)

#endif
