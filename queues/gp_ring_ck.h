/* Includes concurrencykit's ck_ring for the queues, with the one adjustment a
 * ThreadSanitizer build needs to see ck_ring's hand-off (private header). */
#ifndef GP_RING_CK_H
#define GP_RING_CK_H

#include <ck_pr.h>

#if defined(GP_RING_TSAN)
/* What CK_USE_CC_BUILTINS does (checked in /usr/include/ck_pr.h, ck 0.7.1):
 * with it set to 1, ck_pr.h skips the architecture header gcc/x86_64/ck_pr.h,
 * whose loads, stores, fences and `pause` are inline asm that TSan cannot see,
 * and uses only the generic gcc/ck_pr.h: __sync_* builtins for CAS, fetch-add
 * and the fences (__sync_synchronize). But that generic header still loads and
 * stores through plain volatile accesses, which TSan treats as ordinary
 * accesses, and TSan does not model fences, so ck_ring's "fence_store; store
 * p_tail" / "load p_tail; fence_load" hand-off is reported as a data race on
 * the counters and on the slots (tried: it is). ck_ring reaches those accesses
 * through the ck_pr_md_load_uint / ck_pr_md_store_uint names, expanded where
 * ck_ring.h uses them, so in the TSan build we route them to gcc's __atomic
 * builtins with acquire/release, the ordering ck's fences give ck_ring. On
 * x86-64 both forms are plain movs; the product build keeps ck's own code. */
#if !defined(CK_USE_CC_BUILTINS) || !CK_USE_CC_BUILTINS
#error "GP_RING_TSAN needs CK_USE_CC_BUILTINS=1 so that ck_pr uses compiler builtins TSan can see"
#endif
#define ck_pr_md_load_uint(p) __atomic_load_n((const unsigned int *)(p), __ATOMIC_ACQUIRE)
#define ck_pr_md_store_uint(p, v) __atomic_store_n((unsigned int *)(p), (unsigned int)(v), __ATOMIC_RELEASE)
#endif

#include <ck_ring.h>

#endif
