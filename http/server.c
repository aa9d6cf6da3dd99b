/* The HTTP server on libmicrohttpd: listening, routing, authentication and
 * the answers that need no generation (/health, /metrics, /v1/models, errors). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "server_impl.h"

/* Connection threads run the handlers, the JSON formatting and a blocking
 * wait; a small stack keeps a thousand of them cheap. */
#define GP_HTTP_STACK_BYTES (512u << 10)
#define GP_HTTP_DROP_FACTOR 16
/* Files a serving process holds besides its connections: the model's,
 * standard streams, the listening socket, libraries'. */
#define GP_HTTP_SPARE_FILES 64

gp_http_params gp_http_default_params(void)
{
    return (gp_http_params){
        .host = "127.0.0.1",
        .port = 8000,
        .api_key = NULL,
        .max_body = 4u << 20,
        .timeout_s = 30,
        .max_connections = 1024,
    };
}

static const char *error_type(unsigned status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

enum MHD_Result gp_http_respond(struct MHD_Connection *mc, unsigned status, const char *ctype, char *body,
                                const char *hname, const char *hval)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hname)
        MHD_add_response_header(r, hname, hval);
    enum MHD_Result q = MHD_queue_response(mc, status, r);
    MHD_destroy_response(r);
    return q;
}

enum MHD_Result gp_http_respond_error(struct MHD_Connection *mc, unsigned status, const char *param,
                                      const char *message)
{
    gp_api_error e;
    gp_api_error_set(&e, (int)status, error_type(status), param, "%s", message);
    const char *hname = NULL, *hval = NULL;
    if (status == 401)
        hname = MHD_HTTP_HEADER_WWW_AUTHENTICATE, hval = "Bearer";
    else if (status == 429 || status == 503)
        hname = MHD_HTTP_HEADER_RETRY_AFTER, hval = "1";
    return gp_http_respond(mc, status, "application/json", gp_api_error_json(&e), hname, hval);
}

/* "Bearer KEY" against the key, in time independent of where they differ. */
static bool authorized(const gp_http *h, struct MHD_Connection *mc)
{
    if (!h->api_key)
        return true;
    const char *v = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    v += 7;
    while (*v == ' ')
        v++;
    size_t n = strlen(v), m = strlen(h->api_key);
    unsigned char d = n != m;
    for (size_t i = 0; i < m; i++)
        d |= (unsigned char)h->api_key[i] ^ (unsigned char)(i < n ? v[i] : 0);
    return d == 0;
}

typedef enum route {
    ROUTE_NONE, ROUTE_COMPLETIONS, ROUTE_CHAT, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_METRICS
} route;

static route route_of(const char *url)
{
    static const struct { const char *path; route r; } table[] = {
        {"/v1/completions", ROUTE_COMPLETIONS}, {"/v1/chat/completions", ROUTE_CHAT},
        {"/v1/models", ROUTE_MODELS},           {"/health", ROUTE_HEALTH},
        {"/metrics", ROUTE_METRICS},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(url, table[i].path) == 0)
            return table[i].r;
    return ROUTE_NONE;
}

static enum MHD_Result answer_get(gp_http *h, struct MHD_Connection *mc, route r, gp_serve *core)
{
    if (r == ROUTE_HEALTH)
        return core ? gp_http_respond(mc, 200, "application/json", strdup("{\"status\":\"ok\"}"), NULL, NULL)
                    : gp_http_respond(mc, 503, "application/json", strdup("{\"status\":\"loading\"}"),
                                      MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (!core)
        return gp_http_respond_error(mc, 503, NULL, "the model is still loading");
    if (r == ROUTE_MODELS)
        return gp_http_respond(mc, 200, "application/json",
                               gp_api_models_json(gp_serve_model_name(core), h->started,
                                                  gp_serve_max_context(core), gp_serve_vocab(core)),
                               NULL, NULL);
    gp_serve_stats st;
    gp_serve_get_stats(core, &st);
    return gp_http_respond(mc, 200, "text/plain; version=0.0.4; charset=utf-8",
                           gp_api_metrics_text(&st, gp_serve_model_name(core)), NULL, NULL);
}

/* A body over the cap is read and dropped up to this many bytes, so a
 * client that sends it all before it reads sees the 413 instead of a reset. */
static size_t drop_limit(const gp_http *h)
{
    return h->p.max_body > SIZE_MAX / GP_HTTP_DROP_FACTOR ? SIZE_MAX : h->p.max_body * GP_HTTP_DROP_FACTOR;
}

static enum MHD_Result respond_too_big(const gp_http *h, struct MHD_Connection *mc, unsigned long long length)
{
    char msg[256];
    snprintf(msg, sizeof msg, "request body of %llu bytes is over the limit of %zu bytes", length, h->p.max_body);
    return gp_http_respond_error(mc, 413, NULL, msg);
}

/* The first call of a request has its headers only: everything that can
 * be refused from them is refused here, before any of the body is read. */
static enum MHD_Result first_call(gp_http *h, struct MHD_Connection *mc, const char *url, const char *method,
                                  void **con_cls)
{
    route r = route_of(url);
    if (strncmp(url, "/v1/", 4) == 0 && !authorized(h, mc))
        return gp_http_respond_error(mc, 401, NULL,
                                     "missing or wrong API key: send the header 'Authorization: Bearer <key>'");
    if (r == ROUTE_NONE) {
        char msg[512];
        snprintf(msg, sizeof msg, "no route %.200s: the routes are POST /v1/completions, "
                 "POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics", url);
        return gp_http_respond_error(mc, 404, NULL, msg);
    }
    bool post = r == ROUTE_COMPLETIONS || r == ROUTE_CHAT;
    const char *allow = post ? "POST" : "GET";
    if (strcmp(method, allow) != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "method %.32s is not allowed on %s: use %s", method, url, allow);
        gp_api_error e;
        gp_api_error_set(&e, 405, "invalid_request_error", NULL, "%s", msg);
        return gp_http_respond(mc, 405, "application/json", gp_api_error_json(&e), MHD_HTTP_HEADER_ALLOW, allow);
    }
    gp_serve *core = atomic_load(&h->core);
    if (atomic_load(&h->stopping))
        return gp_http_respond_error(mc, 503, NULL, "the server is shutting down");
    if (!post)
        return answer_get(h, mc, r, core);
    if (!core)
        return gp_http_respond_error(mc, 503, NULL, "the model is still loading");
    /* A body known to be over the cap is refused now when the client waits
     * for "100 Continue" (it sends none of it) or when it is too long to
     * drop; any other is dropped as it arrives and refused at its end. */
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *expect = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    unsigned long long length = cl ? strtoull(cl, NULL, 10) : 0;
    bool over = length > h->p.max_body;
    if (over && ((expect && strcasecmp(expect, "100-continue") == 0) || length > drop_limit(h)))
        return respond_too_big(h, mc, length);
    gp_http_conn *c = gp_http_conn_new(h, mc, r == ROUTE_CHAT ? GP_API_CHAT : GP_API_COMPLETION);
    if (!c)
        return MHD_NO;
    c->too_big = over;
    *con_cls = c;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    gp_http *h = cls;
    gp_http_conn *c = *con_cls;
    if (!c)
        return first_call(h, mc, url, method, con_cls);
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (c->too_big || n > h->p.max_body - c->len) {
            c->too_big = true;
            c->len += n;
            return c->len <= drop_limit(h) ? MHD_YES : MHD_NO;
        }
        char *b = gp_grow(c->body, &c->cap, c->len + n);
        if (!b)
            return MHD_NO;
        c->body = b;
        memcpy(c->body + c->len, upload, n);
        c->len += n;
        return MHD_YES;
    }
    if (c->too_big)
        return respond_too_big(h, mc, c->len);
    return gp_http_generate(h, c);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    if (*con_cls)
        gp_http_conn_end(*con_cls);
    *con_cls = NULL;
}

static gp_status check_params(const gp_http_params *p, struct sockaddr_storage *sa)
{
    memset(sa, 0, sizeof *sa);
    struct sockaddr_in *a4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;
    if (!p->host)
        GP_FAIL(GP_ERR_INVALID_ARG, "http host is NULL: give an IPv4 or IPv6 address such as 127.0.0.1");
    if (p->port < 0 || p->port > 65535)
        GP_FAIL(GP_ERR_INVALID_ARG, "http port %d is outside 0..65535 (0: an ephemeral port)", p->port);
    if (inet_pton(AF_INET, p->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)p->port);
    } else if (inet_pton(AF_INET6, p->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)p->port);
    } else {
        GP_FAIL(GP_ERR_INVALID_ARG, "http host '%s' is not an IPv4 or IPv6 address (e.g. 127.0.0.1, ::1, 0.0.0.0)",
                p->host);
    }
    if (p->api_key && !p->api_key[0])
        GP_FAIL(GP_ERR_INVALID_ARG, "api key is empty: give a non-empty key, or none for no authentication");
    if (p->max_body < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "http max_body %zu must be at least 1 byte", p->max_body);
    if (p->timeout_s < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "http timeout_s %d must be at least 1 second", p->timeout_s);
    if (p->max_connections < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "http max_connections %d must be at least 1", p->max_connections);
    return GP_OK;
}

static void free_server(gp_http *h)
{
    pthread_cond_destroy(&h->wake_cv);
    pthread_cond_destroy(&h->wake_done_cv);
    pthread_mutex_destroy(&h->wake_mu);
    pthread_mutex_destroy(&h->lock);
    free(h->host);
    free(h->api_key);
    free(h);
}

static void stop_waker(gp_http *h)
{
    pthread_mutex_lock(&h->wake_mu);
    h->wake_stop = true;
    pthread_cond_signal(&h->wake_cv);
    pthread_mutex_unlock(&h->wake_mu);
    pthread_join(h->waker, NULL);
}

/* Every connection holds a socket: the open-file limit must have room for
 * max_connections beside the process's other files. The soft limit is
 * raised as far as the hard one allows; short of that the start is refused. */
static gp_status fit_open_files(int max_connections)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return GP_OK;
    rlim_t need = (rlim_t)max_connections + GP_HTTP_SPARE_FILES;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        rlim_t cur = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = cur;
        if (rl.rlim_cur < need)
            GP_FAIL(GP_ERR_INVALID_ARG, "http max_connections %d needs %llu open files, the limit is %llu (ulimit -n): "
                    "allowed up to %lld connections, or raise the limit", max_connections, (unsigned long long)need,
                    (unsigned long long)rl.rlim_cur, (long long)rl.rlim_cur - GP_HTTP_SPARE_FILES);
    }
    return GP_OK;
}

gp_status gp_http_start(const gp_http_params *p, gp_http **out)
{
    *out = NULL;
    struct sockaddr_storage sa;
    GP_TRY(check_params(p, &sa));
    GP_TRY(fit_open_files(p->max_connections));
    gp_http *h = calloc(1, sizeof *h);
    if (!h)
        GP_FAIL(GP_ERR_NO_MEMORY, "http server: out of host memory");
    h->p = *p;
    h->host = strdup(p->host);
    h->api_key = p->api_key ? strdup(p->api_key) : NULL;
    if (!h->host || (p->api_key && !h->api_key)) {
        free(h->host), free(h->api_key), free(h);
        GP_FAIL(GP_ERR_NO_MEMORY, "http server: out of host memory");
    }
    h->p.host = h->host, h->p.api_key = h->api_key;
    h->started = (long long)time(NULL);
    h->seed_base = gp_now_ns() ^ ((uint64_t)h->started << 32);
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_init(&h->wake_mu, NULL);
    pthread_cond_init(&h->wake_cv, NULL);
    pthread_cond_init(&h->wake_done_cv, NULL);
    if (pthread_create(&h->waker, NULL, gp_http_waker, h) != 0) {
        free_server(h);
        GP_FAIL(GP_ERR_NO_MEMORY, "http server: cannot start its waker thread");
    }

    /* A thread per connection: a generation blocks on its own condition
     * variable, so neither the engine thread nor other connections wait. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD;
    if (sa.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->daemon = MHD_start_daemon(
        flags, (uint16_t)p->port, NULL, NULL, on_request, h,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)GP_HTTP_STACK_BYTES,
        MHD_OPTION_END);
    if (!h->daemon) {
        int e = errno;
        stop_waker(h);
        free_server(h);
        GP_FAIL(GP_ERR_IO, "cannot listen on %s port %d: %s", p->host, p->port, e ? strerror(e) : "libmicrohttpd failed");
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : p->port;
    *out = h;
    return GP_OK;
}

int gp_http_port(const gp_http *h)
{
    return h->port;
}

void gp_http_set_core(gp_http *h, gp_serve *core)
{
    atomic_store(&h->core, core);
}

void gp_http_stop(gp_http *h)
{
    if (!h)
        return;
    /* Waiting connections see stopping, cancel their requests and end, so
     * the daemon can join their threads. */
    atomic_store(&h->stopping, true);
    pthread_mutex_lock(&h->lock);
    for (gp_http_conn *c = h->conns; c; c = c->next) {
        pthread_mutex_lock(&c->mu);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&h->lock);
    MHD_stop_daemon(h->daemon);
    stop_waker(h);
    free_server(h);
}
