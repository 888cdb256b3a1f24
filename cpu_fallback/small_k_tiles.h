/* The loops of cpu_fallback._small_k (included by small_k.c, which says what they
 * compute): how a product is cut into pieces (panels of B, runs of D's rows), and
 * DEFINE_SMALL_K, the packing of a panel, the tiles kept in registers over its terms
 * and the threads' sweep over the pieces, for one element type and vector width. It is
 * compiled under small_k.c's pragmas, set before the include: multiply-adds as FMA
 * instructions, short copies as moves. */
#ifndef GPU_TC_SMALL_K_TILES_H
#define GPU_TC_SMALL_K_TILES_H

#include "kernel_common.h"

/* The K terms one panel holds: a larger K is summed in blocks of at most this many,
 * each block's products added into D (the first one's written). */
#define K_BLOCK 512
/* Bytes of B one packed panel may take: with the tile of D, it stays in L2. */
#define PANEL_BYTES (512 * 1024)
/* Rows of D a piece takes at least, so that packing its panel costs little beside it. */
#define MIN_CHUNK_ROWS 64

/* Where the positions 0, 1, ... of one index group lie (in elements): table[i], or
 * i * stride where table is NULL. */
typedef struct {
    const int64_t *table;
    int64_t stride;
} Index;

static inline int64_t at(const Index *x, int64_t i)
{
    return x->table != NULL ? x->table[i] : i * x->stride;
}

/* D[i, j] (at d_rows[i] + d_cols[j]) = alpha * sum over p of A[i, p] (at a_rows[i] +
 * a_k[p]) * B[p, j] (at b_k[p] + b_cols[j]), for each of `batches` triples of
 * operands starting at a_batch[t], b_batch[t], d_batch[t]. */
typedef struct {
    int64_t m, n, k, batches;
    Index a_rows, a_k, b_k, b_cols, d_rows, d_cols, a_batch, b_batch, d_batch;
} Shape;

/* How the product is cut: blocks of kc terms (K in blocks of about equal size, each at
 * most K_BLOCK), panels of nc columns of B (a multiple of the tile's cb, at most
 * PANEL_BYTES of kc terms packed), chunks of rc rows of D (a multiple of the tile's rb,
 * two per thread, at least MIN_CHUNK_ROWS: each piece packs its panels), and the pieces
 * (batch, panel, chunk) the threads share: at least two per thread where the columns
 * allow. A piece sums every block of its part of D, so no two threads write an element. */
typedef struct {
    int64_t kc, nc, rc, chunks, panels, pieces;
} Split;

static Split split(const Shape *s, int64_t cb, int64_t rb, int64_t size, int threads)
{
    Split w;
    const int64_t n_round = (s->n + cb - 1) / cb * cb;
    const int64_t blocks = (s->k + K_BLOCK - 1) / K_BLOCK;
    w.kc = (s->k + blocks - 1) / blocks;
    w.nc = PANEL_BYTES / (w.kc * size) / cb * cb;
    w.nc = w.nc < cb ? cb : w.nc > n_round ? n_round : w.nc;
    const int64_t parts = threads > 1 ? threads : 1;
    w.rc = (s->m + 2 * parts - 1) / (2 * parts);
    if (w.rc < MIN_CHUNK_ROWS) /* few rows: pieces of whole panels, packed once */
        w.rc = s->m < MIN_CHUNK_ROWS ? s->m : MIN_CHUNK_ROWS;
    w.rc = (w.rc + rb - 1) / rb * rb;
    w.chunks = (s->m + w.rc - 1) / w.rc;
    const int64_t others = w.chunks * s->batches;
    if (others * ((s->n + w.nc - 1) / w.nc) < 2 * parts) { /* narrower panels */
        const int64_t panels = (2 * parts + others - 1) / others;
        const int64_t nc = ((s->n + panels - 1) / panels + cb - 1) / cb * cb;
        w.nc = nc < w.nc ? nc : w.nc;
    }
    w.panels = (s->n + w.nc - 1) / w.nc;
    w.pieces = w.panels * w.chunks * s->batches;
    return w;
}

/* The end of the run of columns that starts at c: the next bit set in `starts` (a bit
 * for each column that starts a run), or cols. */
static inline int64_t run_end(uint64_t starts, int64_t c, int64_t cols)
{
    const uint64_t later = starts >> (c + 1) << (c + 1);
    const int64_t stop = later ? __builtin_ctzll(later) : cols;
    return stop < cols ? stop : cols;
}


/* A tile's function kept out of line (OUTLINED 1) or inlined into the piece's loops (0).
 * Inlined, the AVX-512 tile's loop over K kept one of B's three vectors on the stack,
 * stored and reloaded at every term (GCC moved the piece's loop variables into vector
 * registers; 24 accumulators, 3 vectors of B and A's broadcast need 28 of 32): out of
 * line, none live beside it, and on the 2-core AVX-512 test host the 1200 x 1200 x 12
 * float32 product went from 0.21-0.24 to 0.18-0.20 ms, 1200 x 1200 x 148 float64 from
 * 3.6-4.0 to 2.9 ms. The AVX2 build's loop kept its registers inlined, and run there
 * out of line it lost up to 10% at K = 12 (a call per tile), so it stays inlined. */
#define BLOCK_CALL_1 __attribute__((noinline))
#define BLOCK_CALL_0

/* The loops for element type T, vectors of BYTES, tiles of at most RB rows by NV
 * vectors, in functions named NAME_* compiled with ISA (the tile's OUTLINED as above).
 * A tile of fewer columns than NV vectors takes fewer, one of at most RB / 2 rows half
 * the rows (no terms computed for nothing). PART(to, x, n, add) writes (or adds) the
 * first n lanes of a vector x where a run of D's columns ends inside it (a masked
 * store), or is NULL where the build has none: such a tile is then staged. NAME_run
 * returns 0, or -1 where a panel buffer could not be allocated. */
#define DEFINE_SMALL_K(NAME, T, BYTES, RB, NV, ISA, OUTLINED, PART)                        \
    typedef T NAME##_vec __attribute__((vector_size(BYTES)));                              \
    enum { NAME##_LANES = BYTES / sizeof(T), NAME##_CB = NV * (BYTES / sizeof(T)) };       \
    _Static_assert(NAME##_CB <= 63, "a tile's column runs are bits of a uint64_t");        \
                                                                                           \
    /* A panel's columns: D's offset of each, and per tile a bit for each column that      \
     * starts a run of consecutive offsets in D (1: one run, the tile's columns dense). */ \
    typedef struct {                                                                       \
        int64_t *d_cols;                                                                   \
        uint64_t *starts;                                                                  \
    } NAME##_cols;                                                                         \
                                                                                           \
    /* n elements from `from` to `to`: whole vectors, then halves, quarters, ... of one. */ \
    static inline __attribute__((always_inline)) ISA void NAME##_copy(T *to, const T *from, \
                                                                      int64_t n)           \
    {                                                                                      \
        int64_t e = 0;                                                                     \
        for (; e + NAME##_LANES <= n; e += NAME##_LANES)                                   \
            memcpy(to + e, from + e, sizeof(NAME##_vec));                                  \
        for (int part = NAME##_LANES / 2; part > 1; part /= 2)                             \
            if (e + part <= n) {                                                           \
                memcpy(to + e, from + e, sizeof(T) * part);                                \
                e += part;                                                                 \
            }                                                                              \
        if (e < n)                                                                         \
            to[e] = from[e];                                                               \
    }                                                                                      \
                                                                                           \
    /* PART, or NULL: see above. */                                                        \
    static void (*const NAME##_part)(T *, NAME##_vec, int64_t, int) = PART;                \
                                                                                           \
    static inline __attribute__((always_inline)) ISA void NAME##_tile(                     \
        const int rb, const int nv, int64_t k, const T *const *a_rows, const int64_t *a_k, \
        const T *panel, T *const *d_rows, int64_t rows, const int64_t *d_cols,             \
        int64_t cols, uint64_t starts, T alpha, int add)                                   \
    {                                                                                      \
        NAME##_vec acc[RB][NV];                                                            \
        for (int r = 0; r < rb; r++)                                                       \
            for (int v = 0; v < nv; v++)                                                   \
                acc[r][v] = (NAME##_vec){0};                                               \
        for (int64_t p = 0; p < k; p++) {                                                  \
            const int64_t q = a_k[p];                                                      \
            NAME##_vec b[NV];                                                              \
            for (int v = 0; v < nv; v++)                                                   \
                b[v] = *(const NAME##_vec *)(panel + p * NAME##_CB + v * NAME##_LANES);    \
            for (int r = 0; r < rb; r++) {                                                 \
                const T x = a_rows[r][q];                                                  \
                for (int v = 0; v < nv; v++)                                               \
                    acc[r][v] += x * b[v];                                                 \
            }                                                                              \
        }                                                                                  \
        /* acc indexed by constants only (loops unrolled): a row known at run time kept    \
         * acc in memory, stored and reloaded around every tile (a third of the time       \
         * where K is 12). A tile whose columns are one run in D is written from the       \
         * registers, the vector where the run ends by PART; any other is staged (staging  \
         * them too, on the 2-core Zen 4, four rounds: float64 8000 x 36 x 36, its second  \
         * tile of 12 columns, 71-79 GFLOP/s against 82-85, 46656 x 36 x 36 55-62 against  \
         * 63-70; float32 8000 x 12 x 12 42-51 against 62-87). With `add` (a later block   \
         * of K terms) the tile is added into D. */                                        \
        const int direct = starts == 1 && (cols == nv * NAME##_LANES || NAME##_part);      \
        T staged[RB][NAME##_CB];                                                           \
        _Pragma("GCC unroll 16")                                                           \
        for (int r = 0; r < rb; r++) {                                                     \
            if (r >= rows)                                                                 \
                break;                                                                     \
            _Pragma("GCC unroll 4")                                                        \
            for (int v = 0; v < nv; v++) {                                                 \
                NAME##_vec x = alpha * acc[r][v];                                          \
                if (!direct) {                                                             \
                    memcpy(&staged[r][v * NAME##_LANES], &x, sizeof x);                    \
                    continue;                                                              \
                }                                                                          \
                T *to = d_rows[r] + d_cols[0] + v * NAME##_LANES;                          \
                const int64_t left = cols - v * NAME##_LANES; /* D's columns from here */  \
                if (left < NAME##_LANES) {                                                 \
                    NAME##_part(to, x, left, add);                                         \
                    continue;                                                              \
                }                                                                          \
                if (add) {                                                                 \
                    NAME##_vec y;                                                          \
                    memcpy(&y, to, sizeof y);                                              \
                    x += y;                                                                \
                }                                                                          \
                memcpy(to, &x, sizeof x);                                                  \
            }                                                                              \
        }                                                                                  \
        if (direct)                                                                        \
            return;                                                                        \
        for (int r = 0; r < rb && r < rows; r++)                                           \
            for (int64_t c = 0, stop; c < cols; c = stop) { /* each run of D's columns */  \
                stop = run_end(starts, c, cols);                                           \
                T *to = d_rows[r] + d_cols[c];                                             \
                if (add)                                                                   \
                    for (int64_t e = 0; e < stop - c; e++)                                 \
                        to[e] += staged[r][c + e];                                         \
                else                                                                       \
                    NAME##_copy(to, staged[r] + c, stop - c);                              \
            }                                                                              \
    }                                                                                      \
                                                                                           \
    /* One tile of up to RB rows and CB columns, its loops sized to the tile. */           \
    static BLOCK_CALL_##OUTLINED ISA void NAME##_block(                                    \
        int64_t k, const T *const *a_rows, const int64_t *a_k, const T *panel,             \
        T *const *d_rows, int64_t rows, const int64_t *d_cols, int64_t cols,               \
        uint64_t starts, T alpha, int add)                                                 \
    {                                                                                      \
        const int nv = (int)((cols + NAME##_LANES - 1) / NAME##_LANES);                    \
        if (rows > RB / 2) {                                                               \
            if (nv >= NV)                                                                  \
                NAME##_tile(RB, NV, k, a_rows, a_k, panel, d_rows, rows, d_cols, cols,     \
                            starts, alpha, add);                                           \
            else if (nv == 1)                                                              \
                NAME##_tile(RB, 1, k, a_rows, a_k, panel, d_rows, rows, d_cols, cols,      \
                            starts, alpha, add);                                           \
            else                                                                           \
                NAME##_tile(RB, NV - 1, k, a_rows, a_k, panel, d_rows, rows, d_cols,       \
                            cols, starts, alpha, add);                                     \
        } else {                                                                           \
            if (nv >= NV)                                                                  \
                NAME##_tile(RB / 2, NV, k, a_rows, a_k, panel, d_rows, rows, d_cols, cols, \
                            starts, alpha, add);                                           \
            else if (nv == 1)                                                              \
                NAME##_tile(RB / 2, 1, k, a_rows, a_k, panel, d_rows, rows, d_cols, cols,  \
                            starts, alpha, add);                                           \
            else                                                                           \
                NAME##_tile(RB / 2, NV - 1, k, a_rows, a_k, panel, d_rows, rows, d_cols,   \
                            cols, starts, alpha, add);                                     \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    /* B's columns j0 .. j0 + width - 1, its k terms b_k, as tiles of k x CB,              \
     * zero-padded; D's offset of each column, and which tiles have D's columns            \
     * consecutive. */                                                                     \
    static ISA void NAME##_pack(const T *b, const Shape *s, const int64_t *b_k, int64_t k, \
                                int64_t j0, int64_t width, T *panel, NAME##_cols *info)    \
    {                                                                                      \
        for (int64_t c0 = 0; c0 < width; c0 += NAME##_CB) {                                \
            T *tile = panel + c0 * k;                                                      \
            const int64_t cols = width - c0 < NAME##_CB ? width - c0 : NAME##_CB;          \
            int64_t from[NAME##_CB];                                                       \
            uint64_t starts = 1; /* the runs of D's columns */                             \
            int consecutive = 1; /* B's columns */                                         \
            for (int64_t c = 0; c < cols; c++) {                                           \
                from[c] = at(&s->b_cols, j0 + c0 + c);                                     \
                info->d_cols[c0 + c] = at(&s->d_cols, j0 + c0 + c);                        \
                if (c > 0 && info->d_cols[c0 + c] != info->d_cols[c0 + c - 1] + 1)         \
                    starts |= (uint64_t)1 << c;                                            \
                consecutive &= from[c] == from[0] + c;                                     \
            }                                                                              \
            info->starts[c0 / NAME##_CB] = starts;                                         \
            for (int64_t p = 0; p < k; p++) {                                              \
                const T *src = b + b_k[p];                                                 \
                T *dst = tile + p * NAME##_CB;                                             \
                if (consecutive) /* else element by element (copying B's runs one by */    \
                    NAME##_copy(dst, src + from[0], cols); /* one measured no faster) */   \
                else                                                                       \
                    for (int64_t c = 0; c < cols; c++)                                     \
                        dst[c] = src[from[c]];                                             \
                for (int64_t c = cols; c < NAME##_CB; c++)                                 \
                    dst[c] = 0;                                                            \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    /* Piece `piece` of the product: rows i_start .. of panel j0 .. of one batch, its      \
     * blocks of K terms in order (each after the first added into D). */                  \
    static ISA void NAME##_piece(const T *a, const T *b, T *d, const Shape *s, T alpha,    \
                                 const Split *w, int64_t piece, T *panel,                  \
                                 NAME##_cols *info)                                        \
    {                                                                                      \
        const int64_t cb = NAME##_CB, per_batch = w->panels * w->chunks;                   \
        const int64_t batch = piece / per_batch, rest = piece % per_batch;                 \
        const int64_t j0 = rest / w->chunks * w->nc, i_start = rest % w->chunks * w->rc;   \
        const int64_t width = s->n - j0 < w->nc ? s->n - j0 : w->nc;                       \
        const int64_t i_stop = i_start + w->rc < s->m ? i_start + w->rc : s->m;            \
        a += at(&s->a_batch, batch);                                                       \
        b += at(&s->b_batch, batch);                                                       \
        d += at(&s->d_batch, batch);                                                       \
        for (int64_t k0 = 0; k0 < s->k; k0 += w->kc) {                                     \
            const int64_t k = s->k - k0 < w->kc ? s->k - k0 : w->kc;                       \
            int64_t a_k[K_BLOCK], b_k[K_BLOCK];                                            \
            for (int64_t p = 0; p < k; p++) {                                              \
                a_k[p] = at(&s->a_k, k0 + p);                                              \
                b_k[p] = at(&s->b_k, k0 + p);                                              \
            }                                                                              \
            NAME##_pack(b, s, b_k, k, j0, width, panel, info);                             \
            for (int64_t i = i_start; i < i_stop; i += RB) {                               \
                const int64_t rows = i_stop - i < RB ? i_stop - i : RB;                    \
                const T *a_rows[RB];                                                       \
                T *d_rows[RB];                                                             \
                for (int r = 0; r < RB; r++) { /* rows past the last repeat it, unwritten */ \
                    const int64_t row = i + (r < rows ? r : rows - 1);                     \
                    a_rows[r] = a + at(&s->a_rows, row);                                   \
                    d_rows[r] = d + at(&s->d_rows, row);                                   \
                }                                                                          \
                for (int64_t c0 = 0; c0 < width; c0 += cb)                                 \
                    NAME##_block(k, a_rows, a_k, panel + c0 * k, d_rows, rows,             \
                                 info->d_cols + c0, width - c0 < cb ? width - c0 : cb,     \
                                 info->starts[c0 / cb], alpha, k0 > 0);                    \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    /* A thread's panel of B, with D's column offsets and run bits after it. */            \
    static ISA T *NAME##_buffer(const Shape *s, const Split *w, NAME##_cols *info)         \
    {                                                                                      \
        const size_t panel = (size_t)((w->kc * w->nc * (int64_t)sizeof(T) + 63) / 64 * 64); \
        char *buffer = aligned_alloc(64, panel + (size_t)(w->nc * 16 + 64));               \
        if (buffer != NULL)                                                                \
            *info = (NAME##_cols){(int64_t *)(buffer + panel),                             \
                                  (uint64_t *)(buffer + panel + w->nc * 8)};               \
        return (T *)buffer;                                                                \
    }                                                                                      \
                                                                                           \
    static ISA int NAME##_run(const T *a, const T *b, T *d, const Shape *s, T alpha,       \
                              int threads)                                                 \
    {                                                                                      \
        const Split w = split(s, NAME##_CB, RB, sizeof(T), threads);                       \
        int failed = 0;                                                                    \
        NAME##_cols info;                                                                  \
        if (threads <= 1) {                                                                \
            T *panel = NAME##_buffer(s, &w, &info);                                        \
            if (panel == NULL)                                                             \
                return -1;                                                                 \
            for (int64_t piece = 0; piece < w.pieces; piece++)                             \
                NAME##_piece(a, b, d, s, alpha, &w, piece, panel, &info);                  \
            free(panel);                                                                   \
            return 0;                                                                      \
        }                                                                                  \
        const int caller = launcher_cpu();                                                 \
        _Pragma("omp parallel num_threads(threads) reduction(|:failed) private(info)")     \
        {                                                                                  \
            leave_cpu(caller);                                                             \
            T *panel = NAME##_buffer(s, &w, &info);                                        \
            failed = panel == NULL;                                                        \
            _Pragma("omp for schedule(dynamic, 1)")                                        \
            for (int64_t piece = 0; piece < w.pieces; piece++)                             \
                if (panel != NULL)                                                         \
                    NAME##_piece(a, b, d, s, alpha, &w, piece, panel, &info);              \
            free(panel);                                                                   \
        }                                                                                  \
        return failed ? -1 : 0;                                                            \
    }

#endif
