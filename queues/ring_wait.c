/* Blocking push/pop: a bounded spin, then a futex sleep with the waiting-flag
 * handshake that cannot lose a wakeup; the wait is timed only on this path. */
#include "gp_ring_impl.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps unless the word no longer holds `seen` (the kernel compares and
 * sleeps atomically). EAGAIN, EINTR and spurious returns are all fine: the
 * caller re-checks the ring. */
static void gp_ring_futex_wait(gp_ring_waiter *w, uint32_t seen)
{
    syscall(SYS_futex, (uint32_t *)&w->seq, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

void gp_ring_wake(gp_ring_waiter *w, int all)
{
    /* Release: a waiter that reads the new word (acquire in the wait loops)
     * also sees what preceded the wake, e.g. the closed flag. */
    atomic_fetch_add_explicit(&w->seq, 1, memory_order_release);
    syscall(SYS_futex, (uint32_t *)&w->seq, FUTEX_WAKE_PRIVATE, all ? INT_MAX : 1, NULL, NULL, 0);
}

/* The slow path shared by push and pop: `attempt` retries the operation and
 * returns its soft status (`soft`) while it must keep waiting. */
typedef gp_status (*gp_ring_attempt_fn)(gp_ring *r, void *arg);

static gp_status gp_ring_wait_until(gp_ring *r, gp_ring_waiter *w, gp_ring_side_stats *st,
                                    gp_status soft, gp_ring_attempt_fn attempt, void *arg)
{
    uint64_t t0 = gp_now_ns(), sleeps = 0;
    gp_status s = soft;
    for (unsigned i = 0; i < r->spin && s == soft; i++) {
        ck_pr_stall();
        s = attempt(r, arg);
    }
    while (s == soft) {
        /* Read the word before the re-check (acquire pairs with the release
         * in gp_ring_wake). A wake that comes after this read changes the
         * word, so the futex below returns at once instead of sleeping. */
        uint32_t seen = atomic_load_explicit(&w->seq, memory_order_acquire);
        atomic_store_explicit(&w->waiting, 1, memory_order_relaxed);
        /* StoreLoad: waiting = 1 must be visible before the re-check reads
         * the other side's ck counter. Pairs with the fence after the other
         * side's ck store in push_once/pop_once: either we see its progress
         * here, or it sees waiting == 1 and bumps the word. */
        ck_pr_fence_memory();
        s = attempt(r, arg);
        if (s != soft)
            break;
        gp_ring_futex_wait(w, seen);
        sleeps++;
    }
    /* Only the owner clears its flag. Relaxed: if the other side still reads
     * a stale 1 it only makes one spurious wake, which we never wait for. */
    atomic_store_explicit(&w->waiting, 0, memory_order_relaxed);
    gp_ring_stat_add(&st->wait_ns, gp_now_ns() - t0);
    gp_ring_stat_add(&st->waits, 1);
    gp_ring_stat_add(&st->sleeps, sleeps);
    return s;
}

typedef struct {
    const gp_payload *p;
    unsigned occ;
} gp_ring_push_arg;

static gp_status gp_ring_push_attempt(gp_ring *r, void *arg)
{
    gp_ring_push_arg *a = arg;
    unsigned occ;
    return gp_ring_push_once(r, a->p, &occ);
}

static gp_status gp_ring_pop_attempt(gp_ring *r, void *arg)
{
    return gp_ring_pop_once(r, arg);
}

gp_status gp_ring_push(gp_ring *r, const gp_payload *p)
{
    if (!r || !p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ring_push: %s is NULL", r ? "payload" : "ring");
    gp_ring_push_arg a = { p, 0 };
    gp_status s = gp_ring_push_once(r, p, &a.occ);
    if (s == GP_SOFT_FULL)
        s = gp_ring_wait_until(r, &r->prod_wait, &r->push_stats, GP_SOFT_FULL, gp_ring_push_attempt, &a);
    /* The occupancy found on arrival: capacity when we had to wait. */
    if (s == GP_OK)
        gp_ring_record_push(r, a.occ);
    return s;
}

gp_status gp_ring_pop(gp_ring *r, gp_payload *p)
{
    if (!r || !p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ring_pop: %s is NULL", r ? "payload" : "ring");
    gp_status s = gp_ring_pop_once(r, p);
    if (s == GP_SOFT_EMPTY)
        s = gp_ring_wait_until(r, &r->cons_wait, &r->pop_stats, GP_SOFT_EMPTY, gp_ring_pop_attempt, p);
    if (s == GP_OK)
        gp_ring_stat_add(&r->pop_stats.ops, 1);
    return s;
}
