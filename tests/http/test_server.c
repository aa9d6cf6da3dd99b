/* The HTTP server over a fake serving core (tests/support/serve_fake.c),
 * driven by libcurl and raw sockets on an ephemeral port of 127.0.0.1:
 * every route and refusal, whole and streamed answers, disconnects, slow
 * clients, shutdown with requests in flight and 64 concurrent streams. */
#define _GNU_SOURCE /* strcasestr */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gp_http.h"
#include "gp_test.h"
#include "serve_fake.h"

#define MODEL "fake-model"
#define CTX 256

typedef struct fixture {
    gp_http *h;
    gp_serve *core;
    int port;
} fixture;

/* The idle timeout of most servers here: long enough that a loaded machine
 * never cuts a client that is merely slow to be scheduled. */
#define TIMEOUT_S 10

static int start(fixture *f, int step_us, const char *api_key, bool set_core, int timeout_s)
{
    f->core = gp_serve_fake_create(MODEL, CTX, step_us, true);
    gp_http_params p = gp_http_default_params();
    p.port = 0;
    p.max_body = 1024;
    p.timeout_s = timeout_s;
    p.api_key = api_key;
    if (gp_http_start(&p, &f->h) != GP_OK)
        return -1;
    f->port = gp_http_port(f->h);
    if (set_core)
        gp_http_set_core(f->h, f->core);
    return 0;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    return start(f, 1000, NULL, true, TIMEOUT_S);
}

/* A server whose idle timeout (1 s) the tests of timeouts wait out. */
static int setup_short(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    return start(f, 1000, NULL, true, 1);
}

static int teardown(void **state)
{
    fixture *f = *state;
    gp_http_stop(f->h);
    gp_serve_fake_destroy(f->core);
    free(f);
    return 0;
}

/* ------------------------------------------------------------ a client */

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t buf_write(char *p, size_t sz, size_t n, void *u)
{
    buf *b = u;
    b->p = realloc(b->p, b->n + sz * n + 1);
    memcpy(b->p + b->n, p, sz * n);
    b->n += sz * n;
    b->p[b->n] = 0;
    return sz * n;
}

typedef struct reply {
    long status;
    CURLcode rc;
    buf body, head;
} reply;

static void reply_free(reply *r)
{
    free(r->body.p);
    free(r->head.p);
}

static CURL *request_new(int port, const char *method, const char *path, const char *body, const char *header,
                         reply *r, struct curl_slist **hl)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, buf_write);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &r->head);
    *hl = curl_slist_append(NULL, "Content-Type: application/json");
    if (header)
        *hl = curl_slist_append(*hl, header);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, *hl);
    if (body)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    return e;
}

static reply request(int port, const char *method, const char *path, const char *body, const char *header)
{
    reply r = {0};
    struct curl_slist *hl;
    CURL *e = request_new(port, method, path, body, header, &r, &hl);
    r.rc = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(e);
    return r;
}

static bool has_header(const reply *r, const char *line)
{
    return r->head.p && strcasestr(r->head.p, line) != NULL;
}

/* An OpenAI error object with the status as its code. */
static void check_error(const reply *r, long status, const char *needle)
{
    assert_int_equal(r->rc, CURLE_OK);
    assert_int_equal(r->status, status);
    json_t *j = json_loads(r->body.p ? r->body.p : "", 0, NULL);
    assert_non_null(j);
    json_t *e = json_object_get(j, "error");
    assert_non_null(e);
    const char *msg = json_string_value(json_object_get(e, "message"));
    assert_non_null(msg);
    if (needle && !strstr(msg, needle))
        fail_msg("status %ld: message '%s' lacks '%s'", status, msg, needle);
    json_decref(j);
}

/* A stream's events: its text, the finish_reason and usage, whether the
 * usage came on the finish chunk or on a chunk of its own after it, whether
 * [DONE] came last and the chat role first. */
typedef struct stream {
    char text[4096];
    char finish[32];
    int prompt_tokens, completion_tokens;
    bool done, role, usage_on_finish, usage_chunk;
    int events;
} stream;

static void take_usage(stream *s, const json_t *u)
{
    assert_true(json_is_object(u));
    s->prompt_tokens = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
    s->completion_tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
}

static stream parse_stream(const char *body, bool chat)
{
    stream s = {0};
    const char *p = body ? body : "";
    while (*p) {
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        assert_memory_equal(p, "data: ", 6);
        assert_false(s.done);
        p += 6;
        if (strncmp(p, "[DONE]", 6) == 0) {
            s.done = true;
            p = end + 2;
            continue;
        }
        assert_false(s.usage_chunk);
        json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
        assert_non_null(j);
        json_t *choices = json_object_get(j, "choices"), *u = json_object_get(j, "usage");
        if (json_array_size(choices) == 0) {
            assert_true(s.finish[0] != 0);
            take_usage(&s, u);
            s.usage_chunk = true;
        } else {
            assert_true(s.finish[0] == 0);
            json_t *c = json_array_get(choices, 0);
            json_t *d = chat ? json_object_get(c, "delta") : c;
            const char *t = json_string_value(json_object_get(d, chat ? "content" : "text"));
            if (t)
                strncat(s.text, t, sizeof s.text - strlen(s.text) - 1);
            if (chat && s.events == 0)
                s.role = json_string_value(json_object_get(d, "role")) != NULL;
            const char *fin = json_string_value(json_object_get(c, "finish_reason"));
            if (fin)
                snprintf(s.finish, sizeof s.finish, "%s", fin);
            if (json_is_object(u)) {
                assert_non_null(fin);
                take_usage(&s, u);
                s.usage_on_finish = true;
            }
        }
        s.events++;
        json_decref(j);
        p = end + 2;
    }
    return s;
}

/* A raw connection, for clients no library would be. */
static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void raw_send(int fd, const char *s)
{
    assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* Read until the server closes fd; false if it is still open after timeout_ms. */
static bool raw_wait_closed(int fd, int timeout_ms)
{
    char b[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            return false;
        ssize_t n = recv(fd, b, sizeof b, 0);
        if (n <= 0)
            return true;
    }
}

static void raw_post(int fd, const char *path, const char *body)
{
    char req[4096];
    snprintf(req, sizeof req,
             "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", path,
             strlen(body), body);
    raw_send(fd, req);
}

/* ------------------------------------------------------------ tests */

static void test_health_before_and_after_core(void **state)
{
    fixture f = {0};
    assert_int_equal(start(&f, 1000, NULL, false, TIMEOUT_S), 0);
    reply r = request(f.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body.p, "\"loading\""));
    reply_free(&r);
    r = request(f.port, "POST", "/v1/completions", "{\"prompt\": \"hi\"}", NULL);
    check_error(&r, 503, "loading");
    assert_true(has_header(&r, "Retry-After: 1"));
    reply_free(&r);
    r = request(f.port, "GET", "/v1/models", NULL, NULL);
    check_error(&r, 503, "loading");
    reply_free(&r);

    gp_http_set_core(f.h, f.core);
    r = request(f.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    gp_http_stop(f.h);
    gp_serve_fake_destroy(f.core);
}

static void test_routes(void **state)
{
    fixture *f = *state;
    reply r = request(f->port, "GET", "/nope", NULL, NULL);
    check_error(&r, 404, "/nope");
    reply_free(&r);
    r = request(f->port, "GET", "/v1/completions", NULL, NULL);
    check_error(&r, 405, "POST");
    assert_true(has_header(&r, "Allow: POST"));
    reply_free(&r);
    r = request(f->port, "POST", "/health", "{}", NULL);
    check_error(&r, 405, "GET");
    assert_true(has_header(&r, "Allow: GET"));
    reply_free(&r);

    r = request(f->port, "GET", "/v1/models", NULL, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body.p, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")), MODEL);
    json_decref(j);
    reply_free(&r);

    r = request(f->port, "GET", "/metrics", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "Content-Type: text/plain; version=0.0.4"));
    assert_non_null(strstr(r.body.p, MODEL));
    reply_free(&r);
}

static void test_api_key(void **state)
{
    fixture f = {0};
    assert_int_equal(start(&f, 1000, "sekret", true, TIMEOUT_S), 0);
    const char *body = "{\"prompt\": \"hi\"}";
    reply r = request(f.port, "GET", "/v1/models", NULL, NULL);
    check_error(&r, 401, "Bearer");
    reply_free(&r);
    r = request(f.port, "GET", "/v1/models", NULL, "Authorization: Bearer sekreT");
    check_error(&r, 401, NULL);
    reply_free(&r);
    r = request(f.port, "GET", "/v1/models", NULL, "Authorization: Bearer sekret2");
    check_error(&r, 401, NULL);
    reply_free(&r);
    r = request(f.port, "POST", "/v1/completions", body, "Authorization: Basic sekret");
    check_error(&r, 401, NULL);
    reply_free(&r);
    r = request(f.port, "POST", "/v1/completions", body, "Authorization: Bearer sekret");
    assert_int_equal(r.status, 200);
    reply_free(&r);
    r = request(f.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    r = request(f.port, "GET", "/metrics", NULL, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    assert_int_equal(gp_serve_fake_counts_get(f.core).submitted, 1);
    gp_http_stop(f.h);
    gp_serve_fake_destroy(f.core);
}

static void test_refusals(void **state)
{
    fixture *f = *state;
    char big[2048];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    memcpy(big, "{\"prompt\": \"", 12);
    strcpy(big + sizeof big - 3, "\"}");
    /* a body over the cap: dropped and refused at its end; refused at once
     * when the client waits for 100 Continue; chunked (no length up front) */
    static const char *const ways[] = {NULL, "Expect: 100-continue", "Transfer-Encoding: chunked"};
    for (int i = 0; i < 3; i++) {
        reply r = request(f->port, "POST", "/v1/completions", big, ways[i]);
        check_error(&r, 413, "1024");
        reply_free(&r);
    }
    /* a client that sends it all before it reads still gets the answer */
    int fd = raw_connect(f->port);
    raw_post(fd, "/v1/completions", big);
    char got[1024] = "";
    size_t n = 0;
    for (ssize_t k; n < 12 && (k = recv(fd, got + n, sizeof got - 1 - n, 0)) > 0;)
        n += (size_t)k;
    close(fd);
    assert_memory_equal(got, "HTTP/1.1 413", 12);
    /* beyond what is worth dropping, refused at once */
    char *huge = malloc(20000);
    memset(huge, ' ', 20000);
    memcpy(huge + 20000 - 3, "{}", 3);
    reply r = request(f->port, "POST", "/v1/completions", huge, NULL);
    assert_int_not_equal(r.status, 200);
    reply_free(&r);
    free(huge);

    /* the core's refusals: a prompt beyond the context, a full queue, a dead backend */
    char longp[CTX + 64];
    snprintf(longp, sizeof longp, "{\"prompt\": \"%0*d\"}", CTX, 0);
    r = request(f->port, "POST", "/v1/completions", longp, NULL);
    check_error(&r, 400, "context");
    reply_free(&r);
    r = request(f->port, "POST", "/v1/completions", "{\"prompt\": ", NULL);
    check_error(&r, 400, NULL);
    reply_free(&r);
    gp_serve_fake_set_mode(f->core, GP_SERVE_FAKE_FULL);
    r = request(f->port, "POST", "/v1/completions", "{\"prompt\": \"hi\"}", NULL);
    check_error(&r, 429, "full");
    assert_true(has_header(&r, "Retry-After: 1"));
    reply_free(&r);
    gp_serve_fake_set_mode(f->core, GP_SERVE_FAKE_DEAD);
    r = request(f->port, "POST", "/v1/chat/completions",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stream\": true}", NULL);
    check_error(&r, 503, "backend");
    reply_free(&r);
    assert_int_equal(gp_serve_fake_counts_get(f->core).submitted, 0);
}

static void test_completion_whole(void **state)
{
    fixture *f = *state;
    static const struct { const char *body, *text, *finish; int prompt, completion; } cases[] = {
        {"{\"model\": \"" MODEL "\", \"prompt\": \"hi\"}", "1 104 105 ", "stop", 3, 3},
        {"{\"prompt\": \"hi\", \"max_tokens\": 2}", "1 104 ", "length", 3, 2},
        {"{\"prompt\": [5, 6, 7]}", "5 6 7 ", "stop", 3, 3},
        {"{\"prompt\": [5, 6], \"max_tokens\": 5, \"ignore_eos\": true}", "5 6 5 6 5 ", "length", 2, 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply r = request(f->port, "POST", "/v1/completions", cases[i].body, NULL);
        assert_int_equal(r.status, 200);
        assert_true(has_header(&r, "Content-Type: application/json"));
        json_t *j = json_loads(r.body.p, 0, NULL);
        assert_non_null(j);
        assert_memory_equal(json_string_value(json_object_get(j, "id")), "cmpl-", 5);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(c, "text")), cases[i].text);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), cases[i].finish);
        json_t *u = json_object_get(j, "usage");
        assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), cases[i].prompt);
        assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), cases[i].completion);
        json_decref(j);
        reply_free(&r);
    }
}

static void test_chat_whole(void **state)
{
    fixture *f = *state;
    reply r = request(f->port, "POST", "/v1/chat/completions",
                      "{\"messages\": [{\"role\": \"system\", \"content\": \"a\"}, "
                      "{\"role\": \"user\", \"content\": \"bc\"}]}", NULL);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body.p, 0, NULL);
    assert_memory_equal(json_string_value(json_object_get(j, "id")), "chatcmpl-", 9);
    json_t *m = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(m, "content")), "97 98 99 ");
    json_decref(j);
    reply_free(&r);
}

static void test_stream(void **state)
{
    fixture *f = *state;
    reply r = request(f->port, "POST", "/v1/completions", "{\"prompt\": \"abc\", \"stream\": true}", NULL);
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "Content-Type: text/event-stream"));
    stream s = parse_stream(r.body.p, false);
    assert_string_equal(s.text, "1 97 98 99 ");
    assert_string_equal(s.finish, "stop");
    assert_int_equal(s.prompt_tokens, 4);
    assert_int_equal(s.completion_tokens, 4);
    assert_true(s.usage_on_finish && !s.usage_chunk);
    assert_true(s.done);
    reply_free(&r);

    r = request(f->port, "POST", "/v1/completions",
                "{\"prompt\": \"abc\", \"stream\": true, \"stream_options\": {\"include_usage\": true}}", NULL);
    assert_int_equal(r.status, 200);
    s = parse_stream(r.body.p, false);
    assert_string_equal(s.text, "1 97 98 99 ");
    assert_true(!s.usage_on_finish && s.usage_chunk);
    assert_int_equal(s.completion_tokens, 4);
    assert_true(s.done);
    reply_free(&r);

    r = request(f->port, "POST", "/v1/chat/completions",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"xyz\"}], \"stream\": true, \"max_tokens\": 2}",
                NULL);
    assert_int_equal(r.status, 200);
    s = parse_stream(r.body.p, true);
    assert_string_equal(s.text, "120 121 ");
    assert_string_equal(s.finish, "length");
    assert_true(s.role);
    assert_true(s.done);
    reply_free(&r);
}

/* A streaming client that reads one event and hangs up: the core sees a
 * cancel while the request still had ~2 s to run. */
static size_t write_abort(char *p, size_t sz, size_t n, void *u)
{
    return 0;
}

static void test_disconnect_mid_stream(void **state)
{
    fixture f = {0};
    assert_int_equal(start(&f, 10000, NULL, true, TIMEOUT_S), 0);
    reply r = {0};
    struct curl_slist *hl;
    CURL *e = request_new(f.port, "POST", "/v1/completions",
                          "{\"prompt\": [3, 4], \"max_tokens\": 200, \"ignore_eos\": true, \"stream\": true}", NULL, &r,
                          &hl);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_abort);
    assert_int_equal(curl_easy_perform(e), CURLE_WRITE_ERROR);
    curl_slist_free_all(hl);
    curl_easy_cleanup(e);
    assert_true(gp_serve_fake_wait(f.core, 1, 1, 0, 10.0));
    reply_free(&r);
    gp_http_stop(f.h);
    gp_serve_fake_destroy(f.core);
}

/* Hung up while the request waits for its first token (no write to fail):
 * seen by the connection's poll of the socket, streamed or not. */
static void test_disconnect_while_waiting(void **state)
{
    fixture *f = *state;
    gp_serve_fake_set_mode(f->core, GP_SERVE_FAKE_PAUSE);
    const char *bodies[] = {"{\"prompt\": \"hi\", \"stream\": true}", "{\"prompt\": \"hi\"}"};
    for (int i = 0; i < 2; i++) {
        int fd = raw_connect(f->port);
        raw_post(fd, "/v1/completions", bodies[i]);
        assert_true(gp_serve_fake_wait(f->core, i + 1, i, 1, 10.0));
        close(fd);
        assert_true(gp_serve_fake_wait(f->core, i + 1, i + 1, 0, 10.0));
    }
}

/* Half a body, then silence: closed after the timeout, never submitted. */
static void test_slow_client(void **state)
{
    fixture *f = *state;
    int fd = raw_connect(f->port);
    raw_send(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Content-Length: 40\r\n\r\n{\"prompt\": \"h");
    double t0 = gp_now_s();
    assert_true(raw_wait_closed(fd, 10000));
    assert_true(gp_now_s() - t0 > 0.5);
    close(fd);
    fd = raw_connect(f->port);
    raw_send(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
    assert_true(raw_wait_closed(fd, 10000));
    close(fd);
    assert_int_equal(gp_serve_fake_counts_get(f->core).submitted, 0);
}

/* A generation longer than the idle timeout is not cut by it. */
typedef struct bg {
    int port;
    const char *body;
    reply r;
    pthread_t t;
} bg;

static void *bg_run(void *arg)
{
    bg *b = arg;
    b->r = request(b->port, "POST", "/v1/completions", b->body, NULL);
    return NULL;
}

static void test_long_generation(void **state)
{
    fixture *f = *state;
    gp_serve_fake_set_mode(f->core, GP_SERVE_FAKE_PAUSE);
    bg b[2] = {{.port = f->port, .body = "{\"prompt\": \"hi\"}"},
              {.port = f->port, .body = "{\"prompt\": \"hi\", \"stream\": true}"}};
    for (int i = 0; i < 2; i++)
        pthread_create(&b[i].t, NULL, bg_run, &b[i]);
    assert_true(gp_serve_fake_wait(f->core, 2, 0, 2, 10.0));
    /* the timeout is 1 s: outlast it */
    struct timespec t = {1, 600000000L};
    nanosleep(&t, NULL);
    gp_serve_fake_set_mode(f->core, GP_SERVE_FAKE_RUN);
    for (int i = 0; i < 2; i++) {
        pthread_join(b[i].t, NULL);
        assert_int_equal(b[i].r.rc, CURLE_OK);
        assert_int_equal(b[i].r.status, 200);
        assert_non_null(b[i].r.body.p);
        assert_non_null(strstr(b[i].r.body.p, i ? "[DONE]" : "1 104 105 "));
        reply_free(&b[i].r);
    }
}

/* gp_http_stop with requests in flight: each is cancelled, the stop returns. */
static void test_stop_in_flight(void **state)
{
    fixture f = {0};
    assert_int_equal(start(&f, 1000, NULL, true, TIMEOUT_S), 0);
    gp_serve_fake_set_mode(f.core, GP_SERVE_FAKE_PAUSE);
    bg b[2] = {{.port = f.port, .body = "{\"prompt\": \"hi\"}"},
              {.port = f.port, .body = "{\"prompt\": \"hi\", \"stream\": true}"}};
    for (int i = 0; i < 2; i++)
        pthread_create(&b[i].t, NULL, bg_run, &b[i]);
    assert_true(gp_serve_fake_wait(f.core, 2, 0, 2, 10.0));
    gp_http_stop(f.h);
    assert_true(gp_serve_fake_wait(f.core, 2, 2, 0, 0.0));
    for (int i = 0; i < 2; i++) {
        pthread_join(b[i].t, NULL);
        reply_free(&b[i].r);
    }
    gp_serve_fake_destroy(f.core);
}

#define N_STREAMS 64

static void test_concurrent_streams(void **state)
{
    fixture *f = *state;
    CURLM *m = curl_multi_init();
    reply r[N_STREAMS] = {0};
    struct curl_slist *hl[N_STREAMS];
    CURL *e[N_STREAMS];
    char body[N_STREAMS][128], want[N_STREAMS][256];
    for (int i = 0; i < N_STREAMS; i++) {
        char prompt[16];
        snprintf(prompt, sizeof prompt, "s%d-%d", i, i * 7);
        snprintf(body[i], sizeof body[i], "{\"prompt\": \"%s\", \"stream\": true}", prompt);
        int w = snprintf(want[i], sizeof want[i], "1 ");
        for (const char *p = prompt; *p; p++)
            w += snprintf(want[i] + w, sizeof want[i] - (size_t)w, "%d ", *p);
        e[i] = request_new(f->port, "POST", "/v1/completions", body[i], NULL, &r[i], &hl[i]);
        curl_multi_add_handle(m, e[i]);
    }
    int running = 1;
    double t0 = gp_now_s();
    while (running && gp_now_s() - t0 < 60.0) {
        curl_multi_perform(m, &running);
        if (running)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    assert_int_equal(running, 0);
    for (int i = 0; i < N_STREAMS; i++) {
        curl_easy_getinfo(e[i], CURLINFO_RESPONSE_CODE, &r[i].status);
        assert_int_equal(r[i].status, 200);
        stream s = parse_stream(r[i].body.p, false);
        assert_string_equal(s.text, want[i]);
        assert_string_equal(s.finish, "stop");
        assert_true(s.done);
        curl_multi_remove_handle(m, e[i]);
        curl_easy_cleanup(e[i]);
        curl_slist_free_all(hl[i]);
        reply_free(&r[i]);
    }
    curl_multi_cleanup(m);
    assert_int_equal(gp_serve_fake_counts_get(f->core).submitted, N_STREAMS);
}

static void test_bad_params(void **state)
{
    gp_http *h = NULL;
    gp_http_params p = gp_http_default_params();
    p.host = "localhost:80";
    GP_CHECK_FAIL(gp_http_start(&p, &h), GP_ERR_INVALID_ARG, "localhost:80");
    p = gp_http_default_params();
    p.port = 70000;
    GP_CHECK_FAIL(gp_http_start(&p, &h), GP_ERR_INVALID_ARG, "70000");
    p = gp_http_default_params();
    p.timeout_s = 0;
    GP_CHECK_FAIL(gp_http_start(&p, &h), GP_ERR_INVALID_ARG, "timeout_s");
    p = gp_http_default_params();
    p.max_connections = INT_MAX - 64;
    GP_CHECK_FAIL(gp_http_start(&p, &h), GP_ERR_INVALID_ARG, "ulimit -n");
    assert_null(h);
    gp_http_stop(NULL);

    /* the port in use: a second server on the first one's port */
    p = gp_http_default_params();
    p.port = 0;
    GP_CHECK_OK(gp_http_start(&p, &h));
    gp_http *h2 = NULL;
    p.port = gp_http_port(h);
    GP_CHECK_FAIL(gp_http_start(&p, &h2), GP_ERR_IO, "127.0.0.1");
    gp_http_stop(h);
}

/* IPv6 where the machine has it (a container may not). */
static void test_ipv6(void **state)
{
    gp_http *h = NULL;
    gp_http_params p = gp_http_default_params();
    p.host = "::1";
    p.port = 0;
    if (gp_http_start(&p, &h) != GP_OK) {
        print_message("no IPv6 loopback here: %s\n", gp_last_error());
        return;
    }
    char url[64];
    snprintf(url, sizeof url, "http://[::1]:%d/health", gp_http_port(h));
    CURL *e = curl_easy_init();
    buf b = {0};
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    assert_int_equal(curl_easy_perform(e), CURLE_OK);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    assert_int_equal(status, 503);
    curl_easy_cleanup(e);
    free(b.p);
    gp_http_stop(h);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_before_and_after_core),
        cmocka_unit_test_setup_teardown(test_routes, setup, teardown),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_completion_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chat_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
        cmocka_unit_test(test_disconnect_mid_stream),
        cmocka_unit_test_setup_teardown(test_disconnect_while_waiting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_client, setup_short, teardown),
        cmocka_unit_test_setup_teardown(test_long_generation, setup_short, teardown),
        cmocka_unit_test(test_stop_in_flight),
        cmocka_unit_test_setup_teardown(test_concurrent_streams, setup, teardown),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_ipv6),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
