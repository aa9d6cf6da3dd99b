/* A test double of an executor: it wraps another one and inserts a stage
 * of its own before the inner graph's last stage (attention -> relay -> FFN
 * over a two-stage executor), which hands the next stage a copy of its
 * payload's views in buffers of its own, poisoning the rows it copied from
 * with NaN. An executor whose stages read exactly what they are handed, and
 * follow the views from stage to stage, gives the same logits through it as
 * without it. Every stage call is checked against the runner's ordering
 * (GP_ERR_STATE when one comes out of order), and a stage can be made to
 * fail. Host views by default; a relay_mem serves views on a device. */
#ifndef GP_TEST_RELAY_EXEC_H
#define GP_TEST_RELAY_EXEC_H

#include "gp_pipeline.h"

typedef struct relay_exec relay_exec;

/* Memory of the views relayed: where buffers come from, how rows are
 * copied and poisoned (all bytes 0xff: a NaN in f32, bf16 and f16), and
 * how the copy waits for the payload's event. */
typedef struct relay_mem {
    int device;    /* the views' device (GP_DEVICE_HOST for host memory) */
    int row_pad;   /* elements left between rows of a copy: > 0 makes the copies strided */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    /* rows of width bytes, pitches in bytes; after event (may be NULL) */
    gp_status (*copy_poison)(void *dst, size_t dpitch, void *src, size_t spitch, size_t width, int rows,
                             void *event);
} relay_mem;
extern const relay_mem relay_host_mem; /* malloc, memcpy; 3 elements of padding */

/* inner is borrowed; max_rows bounds the step's batch; mem NULL: host. */
gp_status relay_exec_create(gp_exec inner, int max_rows, const relay_mem *mem, relay_exec **out);
void relay_exec_destroy(relay_exec *r);
gp_exec relay_exec_get(relay_exec *r);
/* Payloads relayed so far. */
long relay_exec_relayed(const relay_exec *r);
/* Stage `stage` of the relay's graph fails (GP_ERR_CUDA, "injected <name>
 * failure") at (layer, micro) from the next step on; stage -1: none. */
void relay_exec_fail_at(relay_exec *r, int stage, int layer, int micro);

#endif
