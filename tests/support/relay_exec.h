/* A test double of an executor: it wraps another one and hands every FFN
 * stage a copy of its payload's views in buffers of its own (strided, in
 * host memory), poisoning the rows it copied from with NaN. An executor whose
 * stages read exactly what they are handed, and follow the views from stage
 * to stage, gives the same logits through it as without it. */
#ifndef GP_TEST_RELAY_EXEC_H
#define GP_TEST_RELAY_EXEC_H

#include "gp_pipeline.h"

typedef struct relay_exec relay_exec;

/* inner is borrowed; max_rows bounds the step's batch. Host views only. */
gp_status relay_exec_create(gp_exec inner, int max_rows, relay_exec **out);
void relay_exec_destroy(relay_exec *r);
gp_exec relay_exec_get(relay_exec *r);
/* FFN stages handed a relayed copy so far. */
long relay_exec_relayed(const relay_exec *r);

#endif
