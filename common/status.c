/* Status names, the thread-local error message, and fp16 decoding. */
#include "gp_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char gp_error_text[1024];

const char *gp_status_str(gp_status s)
{
    switch (s) {
    case GP_OK: return "ok";
    case GP_ERR_INVALID_ARG: return "invalid argument";
    case GP_ERR_NO_MEMORY: return "out of host memory";
    case GP_ERR_IO: return "I/O error";
    case GP_ERR_FORMAT: return "format error";
    case GP_ERR_UNSUPPORTED: return "unsupported";
    case GP_ERR_NOT_FOUND: return "not found";
    case GP_ERR_SHAPE: return "shape mismatch";
    case GP_ERR_OVERFLOW: return "size overflow";
    case GP_ERR_NO_DEVICE: return "no usable GPU";
    case GP_ERR_CUDA: return "CUDA error";
    case GP_ERR_DEVICE_MEMORY: return "out of device memory";
    case GP_ERR_STATE: return "invalid state";
    case GP_ERR_DEVICE_FAULT: return "device fault (sticky CUDA error)";
    case GP_SOFT_FULL: return "full";
    case GP_SOFT_EMPTY: return "empty";
    }
    return "unknown status";
}

void gp_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gp_error_text, sizeof gp_error_text, fmt, ap);
    va_end(ap);
}

const char *gp_last_error(void)
{
    return gp_error_text;
}

void gp_clear_error(void)
{
    gp_error_text[0] = '\0';
}

float gp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v;
    v.u = bits;
    return v.f;
}

uint16_t gp_f32_to_f16(float f)
{
    union { float f; uint32_t u; } v = {.f = f};
    uint32_t sign = (v.u >> 16) & 0x8000u;
    uint32_t a = v.u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf stays inf, NaN stays a quiet NaN */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
    if (a >= 0x477ff000u) /* rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below fp16's smallest normal: a subnormal or zero */
        if (a < 0x33000000u) /* under half the smallest subnormal: rounds to zero */
            return (uint16_t)sign;
        uint32_t e = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24: the bits below fp16's subnormal unit */
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
