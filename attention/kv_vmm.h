/* The offloaded KV pools' virtual memory (kv_vmm.c), private to attention/:
 * n_parts consecutive ranges of own + win bytes, part i's first own bytes
 * its own device memory, its last win bytes a window onto staging buffer
 * [(i / 2) % 2][i % 2] (parts are layer-major K, V: part i is layer i / 2),
 * so layers of one parity share a staging buffer. own and win are
 * multiples of gp_kv_vmm_granularity (either may be 0). */
#ifndef GP_KV_VMM_H
#define GP_KV_VMM_H

#include <stddef.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_kv_vmm gp_kv_vmm;
/* The mapping granularity of device memory on device, in bytes. */
gp_status gp_kv_vmm_granularity(int device, size_t *g);
/* Reserves, allocates, maps and opens for read/write; *base is the first
 * part. Nothing is left behind on failure. */
gp_status gp_kv_vmm_create(int device, int n_parts, size_t own, size_t win, gp_kv_vmm **out, void **base);
/* Unmaps and frees (the caller synchronised the device). NULL is fine. */
void gp_kv_vmm_destroy(gp_kv_vmm *v);

#ifdef __cplusplus
}
#endif
#endif
