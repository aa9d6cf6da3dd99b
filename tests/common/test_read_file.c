/* gp_read_file and gp_read_input on what has no size to trust: pipes read to
 * their end, the cap refusing more, standard input through "-". */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gp_common.h"

/* A pipe fed n bytes of 'a' by a child; returns its read end. */
static int fed_pipe(size_t n)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        char buf[4096];
        memset(buf, 'a', sizeof buf);
        for (size_t done = 0; done < n;) {
            size_t k = n - done < sizeof buf ? n - done : sizeof buf;
            ssize_t w = write(fd[1], buf, k);
            if (w <= 0)
                _exit(0); /* the reader stopped at the cap */
            done += (size_t)w;
        }
        _exit(0);
    }
    close(fd[1]);
    return fd[0];
}

static void read_pipe(size_t n, size_t cap, gp_status want)
{
    int fd = fed_pipe(n);
    char path[64];
    snprintf(path, sizeof path, "/dev/fd/%d", fd);
    char *out = NULL;
    size_t len = 0;
    gp_status st = gp_read_file(path, cap, &out, &len);
    assert_int_equal(st, want);
    if (want == GP_OK) {
        assert_int_equal(len, n);
        assert_int_equal(out[len], '\0');
        for (size_t i = 0; i < len; i++)
            assert_int_equal(out[i], 'a');
    } else {
        assert_null(out);
        assert_non_null(strstr(gp_last_error(), "cap"));
    }
    free(out);
    close(fd);
    while (wait(NULL) > 0) {
    }
}

static void test_pipe_sizes(void **state)
{
    (void)state;
    read_pipe(0, 100, GP_OK);        /* an empty pipe: 0 bytes, not an error */
    read_pipe(3, 100, GP_OK);
    read_pipe(100, 100, GP_OK);      /* exactly the cap */
    read_pipe(101, 100, GP_ERR_FORMAT);
    read_pipe(200000, 1 << 20, GP_OK); /* past the first buffers and a pipe's 64 KiB */
    read_pipe(300000, 100000, GP_ERR_FORMAT);
}

static void test_stdin_dash(void **state)
{
    (void)state;
    int fd = fed_pipe(5000);
    int saved = dup(STDIN_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, STDIN_FILENO), STDIN_FILENO);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(gp_read_input("-", 1 << 20, &out, &len), GP_OK);
    assert_int_equal(len, 5000);
    free(out);
    assert_int_equal(dup2(saved, STDIN_FILENO), STDIN_FILENO);
    close(saved);
    close(fd);
    while (wait(NULL) > 0) {
    }
    /* anything but "-" is a path */
    assert_int_equal(gp_read_input("/nonexistent-gp-dir/x", 10, &out, &len), GP_ERR_NOT_FOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipe_sizes),
        cmocka_unit_test(test_stdin_dash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
