/* Non-temporal stores for the copy kernel (tile_copy.c): writes that go to memory
 * without first reading each line into the cache. HAVE_STREAM is 1 where the build is
 * for x86-64 (SSE2), and stream_bytes then writes with them; elsewhere it is a memcpy
 * and HAVE_STREAM 0. STREAM_FENCE orders a thread's streamed stores before what
 * follows. */
#ifndef GPU_TC_NONTEMPORAL_H
#define GPU_TC_NONTEMPORAL_H

#include <stdint.h>
#include <string.h>

#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#define HAVE_STREAM 1
/* Write the widest word (8, 4 or 1 bytes) that dst's alignment and n allow, from src,
 * non-temporally where it is 4 or 8; the bytes written. */
static inline size_t stream_word(char *dst, const char *src, size_t n)
{
    const uintptr_t at = (uintptr_t)dst;
    if ((at & 7) == 0 && n >= 8) {
        long long word;
        memcpy(&word, src, 8);
        _mm_stream_si64((long long *)dst, word);
        return 8;
    }
    if ((at & 3) == 0 && n >= 4) {
        int word;
        memcpy(&word, src, 4);
        _mm_stream_si32((int *)dst, word);
        return 4;
    }
    *dst = *src;
    return 1;
}

/* Write n bytes from src to dst with non-temporal stores: 16 bytes at a time where dst is
 * aligned, the ends in 8 or 4 where it is, plain stores only for bytes of narrower
 * alignment. Rows that meet inside a line fill it together in the write-combining
 * buffers: writing the lines a row fills in part with plain stores instead ran a 128 MiB
 * 'abcd->badc' (rows of 512 bytes, 16 bytes into a line, back to back) 1.25x slower, and
 * a 16^6 reversal 1.7x. */
static inline void stream_bytes(char *restrict dst, const char *restrict src, size_t n)
{
    size_t i = 0;
    while (i < n && ((uintptr_t)(dst + i) & 15) != 0)
        i += stream_word(dst + i, src + i, n - i);
    for (; i + 16 <= n; i += 16)
        _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
    while (i < n)
        i += stream_word(dst + i, src + i, n - i);
}
#define STREAM_FENCE() _mm_sfence()
#else
#define HAVE_STREAM 0
#define stream_bytes(dst, src, n) memcpy((dst), (src), (n))
#define STREAM_FENCE() ((void)0)
#endif

#endif
