/* The group of ranks: the rendezvous over TCP (or a file naming rank 0's
 * port), the blob handed from rank 0 to the others, and the thread that
 * keeps the links alive and fails the group when a rank exits, falls
 * silent or stays in a step too long. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gp_comm.h"

#define MAGIC 0x31475047u /* "GPG1" */
#define FILE_TAG "greenpipe-rendezvous"
#define POLL_MS 50

enum { M_HELLO = 1, M_BLOB, M_BEAT, M_FAIL, M_BYE, M_DATA };

/* One fixed-size message; the ranks run one build on one architecture. */
typedef struct msg {
    uint32_t magic, type;
    int32_t rank, n_ranks;
    uint64_t nonce;
    uint64_t step; /* M_BEAT: the step begun last */
    uint32_t busy; /* M_BEAT: inside it */
    uint32_t len;  /* M_BLOB, M_DATA: bytes of data; M_FAIL: its text's */
    char data[GP_COMM_BLOB_MAX];
} msg;

typedef struct peer {
    int fd;              /* rank 0: the link to this rank; others: only peers[0], the link to rank 0 */
    bool joined, left;
    uint64_t last_ns;    /* when something last came from it */
    uint64_t step;
    bool busy;
    uint64_t busy_since; /* rank 0's clock: when it first reported being in this step */
} peer;

struct gp_group {
    gp_group_params p;
    char where[1100];    /* the address as given, for messages */
    peer peers[GP_COMM_MAX_RANKS];
    pthread_t thread;
    bool thread_on;
    pthread_mutex_t mu;  /* everything below, and writes to the links */
    bool stop, failed, notified; /* notified: on_fail was called */
    char why[512];
    uint64_t fail_ns;
    uint64_t step;       /* this rank's */
    bool busy;
    uint64_t busy_since;
    /* ranks other than 0: rank 0's data (gp_group_send) not yet taken by gp_group_recv */
    char *inbox;
    size_t in_off, in_len, in_cap;
    pthread_cond_t cv;   /* data came, the group failed or rank 0 left */
};

static double secs(uint64_t ns) { return (double)ns / 1e9; }

/* ------------------------------------------------------------ parsing */

gp_status gp_rdv_parse(const char *spec, gp_rdv_addr *out)
{
    if (!spec || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "rendezvous: spec or out is NULL");
    memset(out, 0, sizeof *out);
    if (!strncmp(spec, "file:", 5)) {
        const char *path = spec + 5;
        if (!*path || strlen(path) >= sizeof out->path - 16)
            GP_FAIL(GP_ERR_INVALID_ARG, "rendezvous '%s': file:PATH needs a path of 1..%zu bytes", spec,
                    sizeof out->path - 17);
        out->kind = GP_RDV_FILE;
        snprintf(out->path, sizeof out->path, "%s", path);
        return GP_OK;
    }
    if (!strncmp(spec, "tcp:", 4)) {
        const char *hp = spec + 4, *colon = strrchr(hp, ':');
        if (!colon || colon == hp || (size_t)(colon - hp) >= sizeof out->host)
            GP_FAIL(GP_ERR_INVALID_ARG, "rendezvous '%s': tcp:HOST:PORT needs a host before the last ':' "
                    "(at most %zu bytes)", spec, sizeof out->host - 1);
        char *end = NULL;
        errno = 0;
        long port = strtol(colon + 1, &end, 10);
        if (errno || end == colon + 1 || *end || port < 1 || port > 65535)
            GP_FAIL(GP_ERR_INVALID_ARG, "rendezvous '%s': port '%s': allowed 1..65535", spec, colon + 1);
        out->kind = GP_RDV_TCP;
        memcpy(out->host, hp, (size_t)(colon - hp));
        out->port = (int)port;
        return GP_OK;
    }
    GP_FAIL(GP_ERR_INVALID_ARG, "rendezvous '%s': allowed tcp:HOST:PORT or file:PATH", spec);
}

gp_group_params gp_group_default_params(void)
{
    return (gp_group_params){.join_timeout_s = 120, .heartbeat_s = 1, .step_timeout_s = 300, .exit_after_s = 30};
}

/* ------------------------------------------------------------ sockets */

static gp_status resolve(const char *host, int port, struct sockaddr_in *sa, const char *where)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0 || !res)
        GP_FAIL(GP_ERR_IO, "rendezvous %s: cannot resolve host '%s': %s", where, host, gai_strerror(rc));
    memcpy(sa, res->ai_addr, sizeof *sa);
    freeaddrinfo(res);
    return GP_OK;
}

/* Writes m whole (MSG_NOSIGNAL: a closed link is an error, not a signal). */
static bool send_msg(int fd, const msg *m)
{
    const char *p = (const char *)m;
    size_t left = sizeof *m;
    while (left) {
        ssize_t k = send(fd, p, left, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        left -= (size_t)k;
    }
    return true;
}

/* Reads m whole by deadline_ns: 1, 0 at end of stream, -1 on error, -2 on
 * timeout. */
static int recv_msg(int fd, msg *m, uint64_t deadline_ns)
{
    char *p = (char *)m;
    size_t left = sizeof *m;
    while (left) {
        uint64_t now = gp_now_ns();
        if (now >= deadline_ns)
            return -2;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int ms = (int)((deadline_ns - now) / 1000000) + 1;
        int r = poll(&pf, 1, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            continue;
        ssize_t k = recv(fd, p, left, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            return 0;
        p += k;
        left -= (size_t)k;
    }
    return m->magic == MAGIC ? 1 : -1;
}

static msg make_msg(const gp_group *g, uint32_t type)
{
    msg m;
    memset(&m, 0, sizeof m);
    m.magic = MAGIC;
    m.type = type;
    m.rank = g->p.rank;
    m.n_ranks = g->p.n_ranks;
    return m;
}

static void nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ------------------------------------------------------------ join */

static uint64_t make_nonce(void)
{
    uint64_t x = gp_now_ns() ^ ((uint64_t)getpid() << 32);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return x ^ (x >> 33);
}

/* Rank 0's listening socket and, for file:, the file naming its port. */
static gp_status listen_on(gp_group *g, uint64_t nonce, int *out)
{
    const gp_rdv_addr *a = &g->p.addr;
    struct sockaddr_in sa;
    if (a->kind == GP_RDV_TCP) {
        GP_TRY(resolve(a->host, a->port, &sa, g->where));
    } else {
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = 0;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        GP_FAIL(GP_ERR_IO, "rendezvous %s: socket: %s", g->where, strerror(errno));
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, GP_COMM_MAX_RANKS) != 0) {
        int e = errno;
        close(fd);
        GP_FAIL(GP_ERR_IO, "rendezvous %s: rank 0 cannot listen: %s", g->where, strerror(e));
    }
    if (a->kind == GP_RDV_FILE) {
        socklen_t len = sizeof sa;
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", a->path, (int)getpid());
        FILE *f = getsockname(fd, (struct sockaddr *)&sa, &len) == 0 ? fopen(tmp, "w") : NULL;
        bool ok = f && fprintf(f, FILE_TAG " %d %llu\n", ntohs(sa.sin_port), (unsigned long long)nonce) > 0;
        if (f)
            ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp, a->path) != 0) {
            int e = errno;
            unlink(tmp);
            close(fd);
            GP_FAIL(GP_ERR_IO, "rendezvous %s: rank 0 cannot write the file: %s", g->where, strerror(e));
        }
    }
    *out = fd;
    return GP_OK;
}

static void missing_ranks(const gp_group *g, char *s, size_t n)
{
    size_t k = 0;
    s[0] = '\0';
    for (int r = 1; r < g->p.n_ranks && k < n; r++)
        if (!g->peers[r].joined)
            k += (size_t)snprintf(s + k, n - k, "%s%d", k ? ", " : "", r);
}

static gp_status join_root(gp_group *g, const void *blob, size_t n)
{
    const uint64_t nonce = make_nonce(), deadline = gp_now_ns() + (uint64_t)(g->p.join_timeout_s * 1e9);
    int lfd = -1;
    GP_TRY(listen_on(g, nonce, &lfd));
    int joined = 1;
    gp_status st = GP_OK;
    while (joined < g->p.n_ranks && st == GP_OK) {
        uint64_t now = gp_now_ns();
        if (now >= deadline) {
            char miss[256];
            missing_ranks(g, miss, sizeof miss);
            gp_set_error("rendezvous %s: rank%s %s of %d did not join within %.0f s", g->where,
                         strchr(miss, ',') ? "s" : "", miss, g->p.n_ranks, g->p.join_timeout_s);
            st = GP_ERR_STATE;
            break;
        }
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        if (poll(&pf, 1, POLL_MS) <= 0)
            continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        nodelay(fd);
        msg m;
        int r = recv_msg(fd, &m, deadline);
        const char *bad = NULL;
        char why[256];
        if (r != 1 || m.type != M_HELLO) {
            bad = "a connection that did not greet as a rank";
        } else if (g->p.addr.kind == GP_RDV_FILE && m.nonce != nonce) {
            bad = "a rank that read another run's rendezvous file";
        } else if (m.n_ranks != g->p.n_ranks) {
            snprintf(why, sizeof why, "rank %d joined a group of %d ranks; this one has %d", m.rank, m.n_ranks,
                     g->p.n_ranks);
            bad = why;
            st = GP_ERR_STATE;
        } else if (m.rank < 1 || m.rank >= g->p.n_ranks || g->peers[m.rank].joined) {
            snprintf(why, sizeof why, "rank %d joined %s (allowed 1..%d, each once)", m.rank,
                     m.rank >= 1 && m.rank < g->p.n_ranks ? "twice" : "out of range", g->p.n_ranks - 1);
            bad = why;
            st = GP_ERR_STATE;
        }
        if (bad) {
            msg f = make_msg(g, M_FAIL);
            f.len = (uint32_t)snprintf(f.data, sizeof f.data, "rendezvous %s: %s", g->where, bad);
            (void)send_msg(fd, &f);
            close(fd);
            if (st != GP_OK)
                gp_set_error("rendezvous %s: %s", g->where, bad);
            continue;
        }
        peer *p = &g->peers[m.rank];
        p->fd = fd;
        p->joined = true;
        p->last_ns = gp_now_ns();
        joined++;
    }
    close(lfd);
    for (int r = 1; r < g->p.n_ranks && st == GP_OK; r++) {
        msg b = make_msg(g, M_BLOB);
        b.len = (uint32_t)n;
        memcpy(b.data, blob, n);
        if (!send_msg(g->peers[r].fd, &b)) {
            gp_set_error("rendezvous %s: rank 0 cannot send the group's blob to rank %d: %s", g->where, r,
                         strerror(errno));
            st = GP_ERR_IO;
        }
    }
    return st;
}

/* The file's port and nonce, once rank 0 has written it. */
static bool read_file(const char *path, int *port, uint64_t *nonce)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    unsigned long long nn = 0;
    int pt = 0;
    bool ok = fscanf(f, FILE_TAG " %d %llu", &pt, &nn) == 2 && pt > 0 && pt < 65536;
    fclose(f);
    *port = pt;
    *nonce = nn;
    return ok;
}

static gp_status join_rank(gp_group *g, void *blob, size_t n)
{
    const uint64_t deadline = gp_now_ns() + (uint64_t)(g->p.join_timeout_s * 1e9);
    const gp_rdv_addr *a = &g->p.addr;
    uint64_t nonce = 0;
    int fd = -1, err = 0;
    while (fd < 0) {
        if (gp_now_ns() >= deadline)
            GP_FAIL(GP_ERR_STATE, "rendezvous %s: rank %d could not reach rank 0 within %.0f s%s%s", g->where,
                    g->p.rank, g->p.join_timeout_s, err ? ": " : "", err ? strerror(err) : "");
        struct sockaddr_in sa;
        int port = a->port;
        if (a->kind == GP_RDV_FILE && !read_file(a->path, &port, &nonce)) {
            usleep(POLL_MS * 1000);
            continue;
        }
        GP_TRY(resolve(a->kind == GP_RDV_FILE ? "127.0.0.1" : a->host, port, &sa, g->where));
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            GP_FAIL(GP_ERR_IO, "rendezvous %s: socket: %s", g->where, strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            err = errno;
            close(fd);
            fd = -1;
            usleep(POLL_MS * 1000);
        }
    }
    nodelay(fd);
    g->peers[0].fd = fd;
    msg h = make_msg(g, M_HELLO);
    h.nonce = nonce;
    if (!send_msg(fd, &h))
        GP_FAIL(GP_ERR_IO, "rendezvous %s: rank %d cannot greet rank 0: %s", g->where, g->p.rank, strerror(errno));
    msg m;
    int r = recv_msg(fd, &m, deadline);
    if (r == 1 && m.type == M_FAIL)
        GP_FAIL(GP_ERR_STATE, "%.*s", (int)(m.len < sizeof m.data ? m.len : sizeof m.data - 1), m.data);
    if (r == -2)
        GP_FAIL(GP_ERR_STATE, "rendezvous %s: rank %d joined, but the group was not complete within %.0f s",
                g->where, g->p.rank, g->p.join_timeout_s);
    if (r != 1 || m.type != M_BLOB)
        GP_FAIL(GP_ERR_IO, "rendezvous %s: rank %d lost rank 0 before the group's blob came", g->where,
                g->p.rank);
    if (m.len != n)
        GP_FAIL(GP_ERR_STATE, "rendezvous %s: rank 0 sent a blob of %u bytes, rank %d expects %zu", g->where, m.len,
                g->p.rank, n);
    memcpy(blob, m.data, n);
    g->peers[0].joined = true;
    g->peers[0].last_ns = gp_now_ns();
    return GP_OK;
}

/* ------------------------------------------------------------ the watch */

/* Under mu: the first failure wins; rank 0 tells every rank still there. */
static void fail_locked(gp_group *g, const char *why)
{
    if (g->failed)
        return;
    g->failed = true;
    g->fail_ns = gp_now_ns();
    snprintf(g->why, sizeof g->why, "%s", why);
    pthread_cond_broadcast(&g->cv);
    if (g->p.rank == 0) {
        msg f = make_msg(g, M_FAIL);
        f.len = (uint32_t)snprintf(f.data, sizeof f.data, "%s", why);
        for (int r = 1; r < g->p.n_ranks; r++)
            if (g->peers[r].fd >= 0 && !g->peers[r].left)
                (void)send_msg(g->peers[r].fd, &f);
    }
}

static void heartbeat_locked(gp_group *g)
{
    msg b = make_msg(g, M_BEAT);
    b.step = g->step;
    b.busy = g->busy;
    for (int r = 0; r < g->p.n_ranks; r++)
        if (r != g->p.rank && g->peers[r].fd >= 0 && !g->peers[r].left)
            (void)send_msg(g->peers[r].fd, &b);
}

/* Rank 0: a rank in one step beyond the limit; why names it and which
 * ranks are done with that step. */
static bool stuck_locked(gp_group *g, uint64_t now, char *why, size_t n)
{
    if (!(g->p.step_timeout_s > 0))
        return false;
    const uint64_t lim = (uint64_t)(g->p.step_timeout_s * 1e9);
    for (int r = 0; r < g->p.n_ranks; r++) {
        const bool busy = r == 0 ? g->busy : g->peers[r].busy;
        const uint64_t since = r == 0 ? g->busy_since : g->peers[r].busy_since;
        const uint64_t step = r == 0 ? g->step : g->peers[r].step;
        if (!busy || now - since <= lim)
            continue;
        char done[256] = "";
        size_t k = 0;
        for (int q = 0; q < g->p.n_ranks && k < sizeof done; q++) {
            const bool qb = q == 0 ? g->busy : g->peers[q].busy;
            const uint64_t qs = q == 0 ? g->step : g->peers[q].step;
            if (qs > step || (qs == step && !qb))
                k += (size_t)snprintf(done + k, sizeof done - k, "%s%d", k ? ", " : "", q);
        }
        snprintf(why, n, "rank %d has been in step %llu for %.1f s (the step timeout is %.0f s); ranks done with "
                 "it: %s", r, (unsigned long long)step, secs(now - since), g->p.step_timeout_s, k ? done : "none");
        return true;
    }
    return false;
}

/* A message from rank r (rank 0 reads every rank, the others rank 0). */
static void on_msg_locked(gp_group *g, int r, const msg *m, uint64_t now)
{
    peer *p = &g->peers[r];
    p->last_ns = now;
    if (m->type == M_BEAT) {
        if (m->busy && (!p->busy || m->step != p->step))
            p->busy_since = now;
        p->busy = m->busy != 0;
        p->step = m->step;
    } else if (m->type == M_BYE) {
        p->left = true;
        pthread_cond_broadcast(&g->cv);
    } else if (m->type == M_DATA && r == 0 && m->len <= sizeof m->data) {
        if (g->in_len + m->len > g->in_cap) {
            size_t cap = g->in_cap ? 2 * g->in_cap : 4096;
            while (cap < g->in_len + m->len)
                cap *= 2;
            char *q = realloc(g->inbox, cap);
            if (!q) {
                fail_locked(g, "out of host memory for rank 0's data");
                return;
            }
            g->inbox = q;
            g->in_cap = cap;
        }
        memcpy(g->inbox + g->in_len, m->data, m->len);
        g->in_len += m->len;
        pthread_cond_broadcast(&g->cv);
    } else if (m->type == M_FAIL) {
        char why[300];
        snprintf(why, sizeof why, "%.*s", (int)(m->len < sizeof m->data ? m->len : sizeof m->data - 1), m->data);
        fail_locked(g, why);
    }
}

static void *watch(void *arg)
{
    gp_group *g = arg;
    const int n = g->p.n_ranks, me = g->p.rank;
    const uint64_t hb = (uint64_t)(g->p.heartbeat_s * 1e9), silent = 3 * hb + 1000000000ull;
    uint64_t next_beat = 0;
    for (;;) {
        struct pollfd pf[GP_COMM_MAX_RANKS];
        int who[GP_COMM_MAX_RANKS], np = 0;
        pthread_mutex_lock(&g->mu);
        if (g->stop) {
            pthread_mutex_unlock(&g->mu);
            break;
        }
        uint64_t now = gp_now_ns();
        if (g->failed) {
            if (g->p.exit_after_s > 0 && now - g->fail_ns > (uint64_t)(g->p.exit_after_s * 1e9)) {
                fprintf(stderr, "greenpipe: rank %d: %s; the process did not stop within %g s, exiting\n", me,
                        g->why, g->p.exit_after_s);
                fflush(stderr);
                _exit(3);
            }
        } else {
            if (now >= next_beat) {
                heartbeat_locked(g);
                next_beat = now + hb;
            }
            char why[512];
            for (int r = 0; r < n && !g->failed; r++) {
                const peer *p = &g->peers[r];
                if (r == me || p->fd < 0 || p->left)
                    continue;
                if (now - p->last_ns > silent) {
                    snprintf(why, sizeof why, "rank %d sent nothing for %.1f s (its process is stopped or its host "
                             "or link is gone)", r, secs(now - p->last_ns));
                    fail_locked(g, why);
                }
            }
            if (!g->failed && me == 0 && stuck_locked(g, now, why, sizeof why))
                fail_locked(g, why);
            for (int r = 0; r < n && !g->failed; r++)
                if (r != me && g->peers[r].fd >= 0 && !g->peers[r].left) {
                    pf[np] = (struct pollfd){.fd = g->peers[r].fd, .events = POLLIN};
                    who[np++] = r;
                }
        }
        char told[512];
        const bool notify = g->failed && !g->notified;
        if (notify) {
            g->notified = true;
            snprintf(told, sizeof told, "%s", g->why);
        }
        pthread_mutex_unlock(&g->mu);
        if (notify && g->p.on_fail) /* outside mu: it may block (an NCCL abort) */
            g->p.on_fail(g->p.on_fail_ctx, told);
        if (np == 0) {
            usleep(POLL_MS * 1000);
            continue;
        }
        if (poll(pf, (nfds_t)np, POLL_MS) <= 0)
            continue;
        for (int i = 0; i < np; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            msg m;
            int rc = recv_msg(pf[i].fd, &m, gp_now_ns() + 2 * hb + 1000000000ull);
            pthread_mutex_lock(&g->mu);
            if (rc == 1) {
                on_msg_locked(g, who[i], &m, gp_now_ns());
            } else if (!g->peers[who[i]].left && !g->stop) {
                char why[256];
                snprintf(why, sizeof why, "rank %d %s", who[i],
                         rc == -2 ? "sent half a message and fell silent"
                                  : "exited or lost its link without leaving the group");
                fail_locked(g, why);
            }
            pthread_mutex_unlock(&g->mu);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ API */

static void close_all(gp_group *g)
{
    for (int r = 0; r < GP_COMM_MAX_RANKS; r++)
        if (g->peers[r].fd >= 0) {
            close(g->peers[r].fd);
            g->peers[r].fd = -1;
        }
}

gp_status gp_group_join(const gp_group_params *p, void *blob, size_t n, gp_group **out)
{
    if (!p || !blob || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_group_join: params, blob or out is NULL");
    *out = NULL;
    if (p->n_ranks < 1 || p->n_ranks > GP_COMM_MAX_RANKS || p->rank < 0 || p->rank >= p->n_ranks)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_group_join: rank %d of %d: allowed 0 <= rank < ranks <= %d", p->rank,
                p->n_ranks, GP_COMM_MAX_RANKS);
    if (n < 1 || n > GP_COMM_BLOB_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_group_join: blob of %zu bytes: allowed 1..%d", n, GP_COMM_BLOB_MAX);
    if (!(p->join_timeout_s > 0) || !(p->heartbeat_s > 0) || !(p->step_timeout_s >= 0) || !(p->exit_after_s >= 0))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_group_join: join timeout %g s and heartbeat %g s must be > 0, step timeout "
                "%g s and exit after %g s >= 0", p->join_timeout_s, p->heartbeat_s, p->step_timeout_s,
                p->exit_after_s);
    gp_group *g = calloc(1, sizeof *g);
    if (!g)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_group_join: out of memory");
    g->p = *p;
    for (int r = 0; r < GP_COMM_MAX_RANKS; r++)
        g->peers[r].fd = -1;
    if (p->addr.kind == GP_RDV_TCP)
        snprintf(g->where, sizeof g->where, "tcp:%s:%d", p->addr.host, p->addr.port);
    else
        snprintf(g->where, sizeof g->where, "file:%s", p->addr.path);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    gp_status st = p->n_ranks == 1 ? GP_OK : p->rank == 0 ? join_root(g, blob, n) : join_rank(g, blob, n);
    if (st == GP_OK && p->n_ranks > 1) {
        if (pthread_create(&g->thread, NULL, watch, g) != 0) {
            gp_set_error("gp_group_join: cannot start the group's thread");
            st = GP_ERR_NO_MEMORY;
        } else {
            g->thread_on = true;
        }
    }
    if (st != GP_OK) {
        close_all(g);
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return st;
    }
    *out = g;
    return GP_OK;
}

gp_status gp_group_send(gp_group *g, const void *data, size_t n)
{
    if (!g || (!data && n) || g->p.rank != 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_group_send: group %p, data %p: rank 0 sends (this is rank %d)", (void *)g,
                data, g ? g->p.rank : -1);
    pthread_mutex_lock(&g->mu);
    const char *p = data;
    for (size_t off = 0; off < n && !g->failed; off += GP_COMM_BLOB_MAX) {
        msg m = make_msg(g, M_DATA);
        m.len = (uint32_t)(n - off < GP_COMM_BLOB_MAX ? n - off : GP_COMM_BLOB_MAX);
        memcpy(m.data, p + off, m.len);
        for (int r = 1; r < g->p.n_ranks; r++)
            if (g->peers[r].fd >= 0 && !g->peers[r].left && !send_msg(g->peers[r].fd, &m)) {
                char why[128];
                snprintf(why, sizeof why, "rank %d exited or lost its link without leaving the group", r);
                fail_locked(g, why);
            }
    }
    gp_status st = GP_OK;
    if (g->failed) {
        gp_set_error("gp_group_send: the group failed: %s", g->why);
        st = GP_ERR_STATE;
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

gp_status gp_group_recv(gp_group *g, void *data, size_t n)
{
    if (!g || (!data && n) || g->p.rank == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_group_recv: group %p, data %p: the ranks other than 0 receive", (void *)g,
                data);
    pthread_mutex_lock(&g->mu);
    while (g->in_len - g->in_off < n && !g->failed && !g->peers[0].left)
        pthread_cond_wait(&g->cv, &g->mu);
    gp_status st = GP_OK;
    if (g->in_len - g->in_off >= n) {
        memcpy(data, g->inbox + g->in_off, n);
        g->in_off += n;
        if (g->in_off == g->in_len)
            g->in_off = g->in_len = 0;
    } else if (g->failed) {
        gp_set_error("gp_group_recv: the group failed: %s", g->why);
        st = GP_ERR_STATE;
    } else {
        gp_set_error("gp_group_recv: rank 0 left the group before sending the %zu bytes awaited", n);
        st = GP_ERR_STATE;
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

int gp_group_rank(const gp_group *g) { return g ? g->p.rank : -1; }
int gp_group_size(const gp_group *g) { return g ? g->p.n_ranks : 0; }

void gp_group_step_begin(gp_group *g, uint64_t step)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->step = step;
    g->busy = true;
    g->busy_since = gp_now_ns();
    pthread_mutex_unlock(&g->mu);
}

void gp_group_step_end(gp_group *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->busy = false;
    pthread_mutex_unlock(&g->mu);
}

bool gp_group_failed(gp_group *g, char *why, size_t n)
{
    if (!g)
        return false;
    pthread_mutex_lock(&g->mu);
    bool f = g->failed;
    if (f && why && n)
        snprintf(why, n, "%s", g->why);
    pthread_mutex_unlock(&g->mu);
    return f;
}

void gp_group_leave(gp_group *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    if (!g->failed) {
        msg b = make_msg(g, M_BYE);
        for (int r = 0; r < g->p.n_ranks; r++)
            if (r != g->p.rank && g->peers[r].fd >= 0 && !g->peers[r].left)
                (void)send_msg(g->peers[r].fd, &b);
    }
    g->stop = true;
    pthread_mutex_unlock(&g->mu);
    if (g->thread_on)
        pthread_join(g->thread, NULL);
    close_all(g);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->inbox);
    free(g);
}
