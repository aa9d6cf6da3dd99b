/* Element types and activation views: names, sizes, byte counts and the
 * shape check every stage applies to the views it is handed. */
#include "gp_common.h"

#include <string.h>
#include <strings.h>

#include <stdio.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[GP_DTYPE_COUNT] = {
    [GP_DTYPE_F32] = {"F32", 4},     [GP_DTYPE_F16] = {"F16", 2},
    [GP_DTYPE_BF16] = {"BF16", 2},   [GP_DTYPE_F64] = {"F64", 8},
    [GP_DTYPE_I64] = {"I64", 8},     [GP_DTYPE_I32] = {"I32", 4},
    [GP_DTYPE_I16] = {"I16", 2},     [GP_DTYPE_I8] = {"I8", 1},
    [GP_DTYPE_U8] = {"U8", 1},       [GP_DTYPE_BOOL] = {"BOOL", 1},
    [GP_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [GP_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};

const char *gp_dtype_name(gp_dtype d)
{
    return (unsigned)d < GP_DTYPE_COUNT ? dtypes[d].name : "unknown";
}

size_t gp_dtype_size(gp_dtype d)
{
    return (unsigned)d < GP_DTYPE_COUNT ? dtypes[d].size : 0;
}

const char *gp_dtype_flag_name(gp_dtype d)
{
    switch (d) {
    case GP_DTYPE_BF16: return "bf16";
    case GP_DTYPE_F16: return "fp16";
    case GP_DTYPE_F32: return "fp32";
    default: return gp_dtype_name(d);
    }
}

gp_status gp_dtype_check_half(gp_dtype dt, const char *who)
{
    if (!gp_dtype_is_half(dt))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: dtype %s, allowed bf16 (BF16) or fp16 (F16)", who ? who : "?",
                gp_dtype_name(dt));
    return GP_OK;
}

gp_status gp_dtype_parse(const char *text, unsigned allow, gp_dtype *out)
{
    static const gp_dtype known[] = {GP_DTYPE_BF16, GP_DTYPE_F16, GP_DTYPE_F32};
    /* any case: "BF16" is how safetensors and HF's configs spell it */
    if (text && (allow & GP_DTYPE_ALLOW_AUTO) && strcasecmp(text, "auto") == 0) {
        *out = GP_DTYPE_AUTO;
        return GP_OK;
    }
    for (size_t i = 0; text && i < sizeof known / sizeof known[0]; i++)
        if (((allow & GP_DTYPE_ALLOW_F32) || known[i] != GP_DTYPE_F32) &&
            strcasecmp(text, gp_dtype_flag_name(known[i])) == 0) {
            *out = known[i];
            return GP_OK;
        }
    GP_FAIL(GP_ERR_INVALID_ARG, "dtype '%s' is not known; allowed (any case): %sbf16, fp16%s", text ? text : "(null)",
            allow & GP_DTYPE_ALLOW_AUTO ? "auto, " : "", allow & GP_DTYPE_ALLOW_F32 ? ", fp32" : "");
}

gp_status gp_dtype_resolve_auto(gp_dtype checkpoint_dtype, gp_dtype *out)
{
    switch (checkpoint_dtype) {
    case GP_DTYPE_F16: *out = GP_DTYPE_F16; return GP_OK;
    case GP_DTYPE_BF16:
    case GP_DTYPE_F32: *out = GP_DTYPE_BF16; return GP_OK; /* fp32: bf16 keeps its range */
    default:
        GP_FAIL(GP_ERR_INVALID_ARG, "--dtype auto: weights of dtype %s; allowed F32, BF16 or F16",
                gp_dtype_name(checkpoint_dtype));
    }
}

uint64_t gp_view_bytes(const gp_tensor_view *v)
{
    if (!v || v->rows <= 0 || v->cols <= 0)
        return 0;
    return (uint64_t)v->rows * (uint64_t)v->cols * gp_dtype_size(v->dtype);
}

bool gp_view_same(const gp_tensor_view *a, const gp_tensor_view *b)
{
    return a->data == b->data && a->rows == b->rows && a->cols == b->cols && a->row_stride == b->row_stride &&
           a->dtype == b->dtype && a->device == b->device;
}

static const char *where(int device, char *buf, size_t n)
{
    if (device == GP_DEVICE_HOST)
        return "host";
    snprintf(buf, n, "device %d", device);
    return buf;
}

gp_status gp_view_check(const gp_tensor_view *v, const char *who, const char *what, int n, int cols, gp_dtype dt,
                        int device, bool contiguous)
{
    if (v->rows != n || v->cols != cols || v->dtype != dt || v->device != device || (n > 0 && !v->data) ||
        v->row_stride < v->cols || (contiguous && v->row_stride != v->cols)) {
        char got[24], want[24];
        GP_FAIL(GP_ERR_INVALID_ARG,
                "%s: %s view is [%d][%d] %s on %s, row stride %lld, data %p; expected [%d][%d] %s on %s with a "
                "non-NULL pointer and a row stride %s %d",
                who, what, (int)v->rows, (int)v->cols, gp_dtype_name(v->dtype), where(v->device, got, sizeof got),
                (long long)v->row_stride, v->data, n, cols, gp_dtype_name(dt), where(device, want, sizeof want),
                contiguous ? "equal to" : "of at least", cols);
    }
    return GP_OK;
}
