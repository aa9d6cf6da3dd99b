/* The group of ranks, one process each (fork), on this host: rendezvous
 * specs and their refusals; three ranks meeting through a file and through
 * TCP with rank 0's blob delivered; steps and an orderly leave that fails
 * nothing; and every failure the others must see, naming the rank, within
 * a bounded time: a rank that never joins, one that exits, one that stops
 * (SIGSTOP), one stuck in a step, a rank twice, a rank of another group
 * size; the failure callback called once; the exit of a process that does
 * not stop after a failure; one process per rank (gp_ranks_run, _fork,
 * _wait); rank 0's data to the others (gp_group_send / _recv), in order,
 * across the links' message size, and the wait that ends when rank 0
 * leaves. No GPU: the NCCL calls of a build without NCCL say multi-GPU runs
 * are off. */
#include "gp_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gp_comm.h"

#define BLOB 128

static char g_path[256];

static void fill_blob(unsigned char *b)
{
    for (int i = 0; i < BLOB; i++)
        b[i] = (unsigned char)(i * 37 + 11);
}

/* Rank 0's join, handing the others the test's blob. */
static gp_status root_join(const gp_group_params *p, gp_group **g)
{
    unsigned char b[BLOB];
    fill_blob(b);
    return gp_group_join(p, b, BLOB, g);
}

static gp_group_params params(const char *spec, int rank, int n)
{
    gp_group_params p = gp_group_default_params();
    if (gp_rdv_parse(spec, &p.addr) != GP_OK)
        fail_msg("%s: %s", spec, gp_last_error());
    p.rank = rank;
    p.n_ranks = n;
    p.join_timeout_s = 10;
    p.heartbeat_s = 0.2;
    p.step_timeout_s = 0;
    p.exit_after_s = 0;
    return p;
}

/* Polls g for a failure for up to s seconds; its message into why. */
static bool wait_failed(gp_group *g, double s, char *why, size_t n)
{
    for (int i = 0; i < (int)(s * 20); i++) {
        if (gp_group_failed(g, why, n))
            return true;
        usleep(50000);
    }
    return false;
}

/* What a child rank does once joined. */
enum { KID_LEAVE, KID_EXIT, KID_WAIT_FAIL, KID_STUCK, KID_DONE_STEP, KID_LINGER, KID_DATA };

/* The data rank 0 sends in test_data: buffers of these sizes, byte i of
 * buffer k (i * 31 + k * 7) & 0xff. */
static const size_t g_data_sizes[] = {1, 256, 257, 100000, 3};
static unsigned char data_byte(size_t i, size_t k) { return (unsigned char)((i * 31 + k * 7) & 0xff); }

/* A child: joins (expect_join: whether it should), checks the blob, acts;
 * its exit status says whether all went as expected (0), else 1. needle:
 * for KID_WAIT_FAIL and KID_DONE_STEP, what the failure must say. */
static pid_t kid(const char *spec, int rank, int n, int act, const char *needle, double exit_after)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    gp_group_params p = params(spec, rank, n);
    p.exit_after_s = exit_after;
    unsigned char b[BLOB], want[BLOB];
    memset(b, 0, sizeof b);
    fill_blob(want);
    gp_group *g = NULL;
    if (gp_group_join(&p, b, BLOB, &g) != GP_OK) {
        fprintf(stderr, "rank %d: join: %s\n", rank, gp_last_error());
        _exit(act == KID_LINGER ? 0 : 1);
    }
    if (memcmp(b, want, BLOB) != 0)
        _exit(1);
    char why[512];
    switch (act) {
    case KID_LEAVE:
        for (uint64_t s = 1; s <= 5; s++) {
            gp_group_step_begin(g, s);
            usleep(20000);
            gp_group_step_end(g);
        }
        gp_group_leave(g);
        _exit(0);
    case KID_EXIT:
        usleep(300000);
        _exit(0); /* no leave: the others must notice */
    case KID_STUCK:     /* stuck in step 5: waits for the failure it causes */
    case KID_DONE_STEP: /* done with step 5 */
    case KID_WAIT_FAIL:
        if (act != KID_WAIT_FAIL)
            gp_group_step_begin(g, 5);
        if (act == KID_DONE_STEP)
            gp_group_step_end(g);
        if (!wait_failed(g, 10, why, sizeof why)) {
            fprintf(stderr, "rank %d: no failure seen\n", rank);
            _exit(1);
        }
        fprintf(stderr, "rank %d saw: %s\n", rank, why);
        if (needle && !strstr(why, needle))
            _exit(1);
        gp_group_leave(g);
        _exit(0);
    case KID_DATA: { /* rank 0's buffers in order, then the wait that rank 0's leave ends */
        for (size_t k = 0; k < sizeof g_data_sizes / sizeof g_data_sizes[0]; k++) {
            unsigned char *d = malloc(g_data_sizes[k]);
            if (!d || gp_group_recv(g, d, g_data_sizes[k]) != GP_OK) {
                fprintf(stderr, "rank %d: recv %zu: %s\n", rank, k, gp_last_error());
                _exit(1);
            }
            for (size_t i = 0; i < g_data_sizes[k]; i++)
                if (d[i] != data_byte(i, k)) {
                    fprintf(stderr, "rank %d: buffer %zu byte %zu is %d\n", rank, k, i, d[i]);
                    _exit(1);
                }
            free(d);
        }
        unsigned char more[8];
        gp_status st = gp_group_recv(g, more, sizeof more);
        fprintf(stderr, "rank %d after rank 0 left: %s\n", rank, gp_last_error());
        if (st != GP_ERR_STATE || !strstr(gp_last_error(), "rank 0 left"))
            _exit(1);
        gp_group_leave(g);
        _exit(0);
    }
    case KID_LINGER: /* never leaves: exit_after must end it */
        for (;;)
            pause();
    }
    _exit(1);
}

static int status_of(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static const char *file_spec(void)
{
    static char spec[300];
    snprintf(g_path, sizeof g_path, "/tmp/gp_group_test.%d", (int)getpid());
    unlink(g_path);
    snprintf(spec, sizeof spec, "file:%s", g_path);
    return spec;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static void test_parse(void **state)
{
    (void)state;
    gp_rdv_addr a;
    GP_CHECK_OK(gp_rdv_parse("tcp:127.0.0.1:29500", &a));
    assert_int_equal(a.kind, GP_RDV_TCP);
    assert_string_equal(a.host, "127.0.0.1");
    assert_int_equal(a.port, 29500);
    GP_CHECK_OK(gp_rdv_parse("tcp:node-3.cluster:1", &a));
    assert_string_equal(a.host, "node-3.cluster");
    GP_CHECK_OK(gp_rdv_parse("file:/shared/run.rdv", &a));
    assert_int_equal(a.kind, GP_RDV_FILE);
    assert_string_equal(a.path, "/shared/run.rdv");
    GP_CHECK_FAIL(gp_rdv_parse("", &a), GP_ERR_INVALID_ARG, "allowed tcp:HOST:PORT or file:PATH");
    GP_CHECK_FAIL(gp_rdv_parse("udp:x:1", &a), GP_ERR_INVALID_ARG, "'udp:x:1': allowed tcp:HOST:PORT");
    GP_CHECK_FAIL(gp_rdv_parse("tcp:", &a), GP_ERR_INVALID_ARG, "needs a host");
    GP_CHECK_FAIL(gp_rdv_parse("tcp::5", &a), GP_ERR_INVALID_ARG, "needs a host");
    GP_CHECK_FAIL(gp_rdv_parse("tcp:host", &a), GP_ERR_INVALID_ARG, "needs a host");
    GP_CHECK_FAIL(gp_rdv_parse("tcp:h:0", &a), GP_ERR_INVALID_ARG, "port '0': allowed 1..65535");
    GP_CHECK_FAIL(gp_rdv_parse("tcp:h:70000", &a), GP_ERR_INVALID_ARG, "port '70000'");
    GP_CHECK_FAIL(gp_rdv_parse("tcp:h:12x", &a), GP_ERR_INVALID_ARG, "port '12x'");
    GP_CHECK_FAIL(gp_rdv_parse("file:", &a), GP_ERR_INVALID_ARG, "needs a path");
    /* bad parameters */
    gp_group_params p = params("tcp:127.0.0.1:1", 2, 2);
    unsigned char b[BLOB];
    gp_group *g = NULL;
    GP_CHECK_FAIL(root_join(&p, &g), GP_ERR_INVALID_ARG, "rank 2 of 2");
    p.rank = 0;
    GP_CHECK_FAIL(gp_group_join(&p, b, GP_COMM_BLOB_MAX + 1, &g), GP_ERR_INVALID_ARG, "blob of 257 bytes");
    p.heartbeat_s = 0;
    GP_CHECK_FAIL(root_join(&p, &g), GP_ERR_INVALID_ARG, "heartbeat 0 s must be > 0");
    /* one rank: a group of itself */
    p = params("tcp:127.0.0.1:1", 0, 1);
    GP_CHECK_OK(root_join(&p, &g));
    assert_int_equal(gp_group_size(g), 1);
    gp_group_leave(g);
}

/* Three ranks, orderly: steps, a leave, no failure; through spec. */
static void three_ranks(const char *spec)
{
    pid_t k1 = kid(spec, 1, 3, KID_LEAVE, NULL, 0), k2 = kid(spec, 2, 3, KID_LEAVE, NULL, 0);
    gp_group_params p = params(spec, 0, 3);
    gp_group *g = NULL;
    GP_CHECK_OK(root_join(&p, &g));
    assert_int_equal(gp_group_rank(g), 0);
    assert_int_equal(gp_group_size(g), 3);
    for (uint64_t s = 1; s <= 5; s++) {
        gp_group_step_begin(g, s);
        usleep(20000);
        gp_group_step_end(g);
    }
    assert_int_equal(status_of(k1), 0);
    assert_int_equal(status_of(k2), 0);
    usleep(600000); /* past the silence limit of a rank that left: nothing fails */
    char why[512];
    if (gp_group_failed(g, why, sizeof why))
        fail_msg("%s: the group failed after an orderly leave: %s", spec, why);
    gp_group_leave(g);
}

static void test_data(void **state)
{
    (void)state;
    const char *spec = file_spec();
    pid_t k1 = kid(spec, 1, 3, KID_DATA, NULL, 0), k2 = kid(spec, 2, 3, KID_DATA, NULL, 0);
    gp_group_params p = params(spec, 0, 3);
    gp_group *g = NULL;
    GP_CHECK_OK(root_join(&p, &g));
    for (size_t k = 0; k < sizeof g_data_sizes / sizeof g_data_sizes[0]; k++) {
        unsigned char *d = malloc(g_data_sizes[k]);
        assert_non_null(d);
        for (size_t i = 0; i < g_data_sizes[k]; i++)
            d[i] = data_byte(i, k);
        GP_CHECK_OK(gp_group_send(g, d, g_data_sizes[k]));
        free(d);
    }
    unsigned char x;
    GP_CHECK_FAIL(gp_group_recv(g, &x, 1), GP_ERR_INVALID_ARG, "the ranks other than 0 receive");
    usleep(200000);
    gp_group_leave(g);
    assert_int_equal(status_of(k1), 0);
    assert_int_equal(status_of(k2), 0);
    unlink(g_path);
}

static void test_file(void **state)
{
    (void)state;
    three_ranks(file_spec());
    unlink(g_path);
}

static void test_tcp(void **state)
{
    (void)state;
    char spec[64];
    snprintf(spec, sizeof spec, "tcp:127.0.0.1:%d", free_port());
    three_ranks(spec);
}

static void test_join_timeout(void **state)
{
    (void)state;
    const char *spec = file_spec();
    pid_t k1 = kid(spec, 1, 3, KID_LINGER, NULL, 0); /* its join fails when rank 0 gives up */
    gp_group_params p = params(spec, 0, 3);
    p.join_timeout_s = 1;
    gp_group *g = NULL;
    GP_CHECK_FAIL(root_join(&p, &g), GP_ERR_STATE, "rank 2 of 3 did not join within 1 s");
    assert_null(g);
    assert_int_equal(status_of(k1), 0);
    unlink(g_path);
}

static int g_calls;
static char g_called_why[512];
static void on_fail(void *ctx, const char *why)
{
    (void)ctx;
    g_calls++;
    snprintf(g_called_why, sizeof g_called_why, "%s", why);
}

static void test_rank_exits(void **state)
{
    (void)state;
    const char *spec = file_spec();
    pid_t k1 = kid(spec, 1, 3, KID_WAIT_FAIL, "rank 2 exited", 0), k2 = kid(spec, 2, 3, KID_EXIT, NULL, 0);
    gp_group_params p = params(spec, 0, 3);
    g_calls = 0;
    p.on_fail = on_fail;
    gp_group *g = NULL;
    GP_CHECK_OK(root_join(&p, &g));
    const uint64_t t0 = gp_now_ns();
    char why[512];
    assert_true(wait_failed(g, 5, why, sizeof why));
    printf("rank 0 saw after %.2f s: %s\n", (gp_now_ns() - t0) / 1e9, why);
    assert_non_null(strstr(why, "rank 2 exited or lost its link"));
    assert_int_equal(status_of(k2), 0);
    assert_int_equal(status_of(k1), 0); /* it was told, naming rank 2 */
    usleep(200000);
    assert_int_equal(g_calls, 1);
    assert_string_equal(g_called_why, why);
    gp_group_leave(g);
    unlink(g_path);
}

static void test_rank_stops(void **state)
{
    (void)state;
    const char *spec = file_spec();
    pid_t k1 = kid(spec, 1, 2, KID_LINGER, NULL, 0);
    gp_group_params p = params(spec, 0, 2);
    gp_group *g = NULL;
    GP_CHECK_OK(root_join(&p, &g));
    usleep(300000);
    kill(k1, SIGSTOP); /* alive, linked, silent */
    const uint64_t t0 = gp_now_ns();
    char why[512];
    assert_true(wait_failed(g, 5, why, sizeof why));
    const double s = (gp_now_ns() - t0) / 1e9;
    printf("rank 0 saw after %.2f s: %s\n", s, why);
    assert_non_null(strstr(why, "rank 1 sent nothing for"));
    assert_true(s < 3 * 0.2 + 1 + 1); /* three heartbeats and a second, and a poll */
    kill(k1, SIGKILL);
    assert_int_equal(status_of(k1), 128 + SIGKILL);
    gp_group_leave(g);
    unlink(g_path);
}

static void test_stuck_step(void **state)
{
    (void)state;
    const char *spec = file_spec();
    pid_t k1 = kid(spec, 1, 3, KID_STUCK, "rank 1 has been in step 5", 0);
    pid_t k2 = kid(spec, 2, 3, KID_DONE_STEP, "ranks done with it: 0, 2", 0);
    gp_group_params p = params(spec, 0, 3);
    p.step_timeout_s = 1;
    gp_group *g = NULL;
    GP_CHECK_OK(root_join(&p, &g));
    gp_group_step_begin(g, 5);
    gp_group_step_end(g);
    char why[512];
    assert_true(wait_failed(g, 6, why, sizeof why));
    printf("rank 0 saw: %s\n", why);
    assert_non_null(strstr(why, "rank 1 has been in step 5 for"));
    assert_non_null(strstr(why, "the step timeout is 1 s"));
    assert_int_equal(status_of(k1), 0);
    assert_int_equal(status_of(k2), 0);
    gp_group_leave(g);
    unlink(g_path);
}

static void test_bad_ranks(void **state)
{
    (void)state;
    const char *spec = file_spec();
    /* a rank twice */
    pid_t a = kid(spec, 1, 3, KID_LINGER, NULL, 0), b1 = kid(spec, 1, 3, KID_LINGER, NULL, 0);
    gp_group_params p = params(spec, 0, 3);
    gp_group *g = NULL;
    GP_CHECK_FAIL(root_join(&p, &g), GP_ERR_STATE, "rank 1 joined twice");
    assert_int_equal(status_of(a), 0);
    assert_int_equal(status_of(b1), 0);
    /* a rank of another group size */
    spec = file_spec();
    a = kid(spec, 1, 4, KID_LINGER, NULL, 0);
    GP_CHECK_FAIL(root_join(&p, &g), GP_ERR_STATE, "rank 1 joined a group of 4 ranks; this one has 3");
    assert_int_equal(status_of(a), 0);
    unlink(g_path);
}

static void test_exit_after(void **state)
{
    (void)state;
    const char *spec = file_spec();
    pid_t k1 = kid(spec, 1, 3, KID_LINGER, NULL, 0.5), k2 = kid(spec, 2, 3, KID_EXIT, NULL, 0);
    gp_group_params p = params(spec, 0, 3);
    gp_group *g = NULL;
    GP_CHECK_OK(root_join(&p, &g));
    char why[512];
    assert_true(wait_failed(g, 5, why, sizeof why));
    assert_int_equal(status_of(k2), 0);
    assert_int_equal(status_of(k1), 3); /* it was told, did not leave, and exited by itself */
    gp_group_leave(g);
    unlink(g_path);
}

static int times_three(int rank, void *arg)
{
    (void)arg;
    return rank * 3;
}

/* One process per rank: the caller is rank 0 and the others exit with their
 * results; gp_ranks_fork's children go on from the call. */
static void test_ranks(void **state)
{
    (void)state;
    int codes[4];
    GP_CHECK_OK(gp_ranks_run(4, times_three, NULL, codes));
    for (int r = 0; r < 4; r++)
        assert_int_equal(codes[r], r * 3);
    int rank = -1, pids[3];
    const int me = (int)getpid();
    GP_CHECK_OK(gp_ranks_fork(3, &rank, pids));
    if (rank != 0)
        _exit(getppid() == me ? 10 + rank : 1); /* a child of the caller, knowing its rank */
    assert_int_equal(pids[0], me);
    gp_ranks_wait(3, pids, codes);
    assert_int_equal(codes[1], 11);
    assert_int_equal(codes[2], 12);
    GP_CHECK_FAIL(gp_ranks_fork(0, &rank, pids), GP_ERR_INVALID_ARG, "0 ranks (allowed 1..64)");
}

static void test_nccl_off(void **state)
{
    (void)state;
    if (gp_comm_available()) {
        printf("this build has NCCL: the GPU test covers it\n");
        return;
    }
    gp_group_params p = params("tcp:127.0.0.1:1", 0, 2);
    gp_comm *c = NULL;
    GP_CHECK_FAIL(gp_comm_create(&p, &c), GP_ERR_UNSUPPORTED, "this build has no NCCL, so multi-GPU runs are off");
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),       cmocka_unit_test(test_file),        cmocka_unit_test(test_tcp),
        cmocka_unit_test(test_join_timeout), cmocka_unit_test(test_rank_exits),  cmocka_unit_test(test_rank_stops),
        cmocka_unit_test(test_stuck_step),  cmocka_unit_test(test_bad_ranks),   cmocka_unit_test(test_exit_after),
        cmocka_unit_test(test_ranks),       cmocka_unit_test(test_nccl_off),    cmocka_unit_test(test_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
