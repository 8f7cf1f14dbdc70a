/*
 * fc_endian.h - explicit little-endian loads and stores.
 *
 * File formats here are little-endian regardless of the host; reading byte by
 * byte keeps the code independent of alignment and host order.  Callers check
 * bounds before calling.
 */
#ifndef FC_ENDIAN_H
#define FC_ENDIAN_H

#include <stdint.h>

static inline uint16_t fc_read_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t fc_read_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t fc_read_le64(const unsigned char *p)
{
    return (uint64_t)fc_read_le32(p) | ((uint64_t)fc_read_le32(p + 4) << 32);
}

static inline void fc_write_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static inline void fc_write_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline void fc_write_le64(unsigned char *p, uint64_t v)
{
    fc_write_le32(p, (uint32_t)v);
    fc_write_le32(p + 4, (uint32_t)(v >> 32));
}

#endif
