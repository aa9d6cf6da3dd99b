/* Before any request is sent: the server answers GET /health with 200
 * (waited for while it loads) and names its model in GET /v1/models. */
#include "lg_http_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

gp_status gp_lg_init(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        GP_FAIL(GP_ERR_IO, "libcurl failed to initialize");
    return GP_OK;
}

void gp_lg_cleanup(void) { curl_global_cleanup(); }

char *gp_lg_url(const char *base_url, const char *path)
{
    size_t b = strlen(base_url);
    while (b && base_url[b - 1] == '/')
        b--;
    size_t n = b + strlen(path) + 1;
    char *u = malloc(n);
    if (u)
        snprintf(u, n, "%.*s%s", (int)b, base_url, path);
    return u;
}

struct curl_slist *gp_lg_auth_header(struct curl_slist *headers, const char *api_key)
{
    if (!api_key)
        return headers;
    size_t n = strlen(api_key) + 32;
    char *h = malloc(n);
    if (!h)
        return NULL;
    snprintf(h, n, "Authorization: Bearer %s", api_key);
    struct curl_slist *r = curl_slist_append(headers, h);
    free(h);
    return r;
}

/* A body kept up to its cap: enough to name what a server said. */
typedef struct body {
    char buf[64 * 1024];
    size_t len;
} body;

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    body *b = ctx;
    size_t got = size * n, room = sizeof b->buf - 1 - b->len, take = got < room ? got : room;
    memcpy(b->buf + b->len, p, take);
    b->len += take;
    b->buf[b->len] = '\0';
    return got;
}

/* GET url: *code the status (0 when there was no answer), the body in b;
 * on a transfer failure the reason in why. */
static CURLcode get(const char *url, const char *api_key, body *b, long *code, char why[CURL_ERROR_SIZE])
{
    b->len = 0;
    b->buf[0] = '\0';
    why[0] = '\0';
    *code = 0;
    CURL *c = curl_easy_init();
    struct curl_slist *h = gp_lg_auth_header(NULL, api_key);
    if (!c || (api_key && !h)) {
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        snprintf(why, CURL_ERROR_SIZE, "out of memory");
        return CURLE_OUT_OF_MEMORY;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, why);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
    else if (!why[0])
        snprintf(why, CURL_ERROR_SIZE, "%s", curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}

static gp_status wait_healthy(const char *base_url, double ready_timeout_s, body *b)
{
    char *url = gp_lg_url(base_url, "/health");
    if (!url)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory");
    double deadline = gp_now_s() + ready_timeout_s;
    char why[CURL_ERROR_SIZE];
    long code;
    for (;;) {
        CURLcode rc = get(url, NULL, b, &code, why);
        if (rc == CURLE_OK && code == 200)
            break;
        if (gp_now_s() >= deadline) {
            if (rc != CURLE_OK)
                gp_set_error("the server at %s cannot be reached: GET %s: %s%s", base_url, url, why,
                             ready_timeout_s > 0 ? " (waited --ready-timeout)" : "; start it first, or wait for it "
                                                                               "with --ready-timeout S");
            else
                gp_set_error("the server at %s is not ready: GET %s answered %ld%s%s%s", base_url, url, code,
                             b->len ? ": " : "", b->buf,
                             code == 503 ? (ready_timeout_s > 0 ? " (still loading after --ready-timeout)"
                                                                : " (loading; wait for it with --ready-timeout S)")
                                         : "");
            free(url);
            return GP_ERR_IO;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(url);
    return GP_OK;
}

static int int_field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= INT32_MAX
               ? (int)json_integer_value(v)
               : 0;
}

static gp_status read_models(const char *url, const char *api_key, body *b, gp_lg_server_info *out)
{
    char why[CURL_ERROR_SIZE];
    long code;
    if (get(url, api_key, b, &code, why) != CURLE_OK)
        GP_FAIL(GP_ERR_IO, "GET %s: %s", url, why);
    if (code != 200)
        GP_FAIL(GP_ERR_IO, "GET %s answered %ld%s%s%s", url, code, b->len ? ": " : "", b->buf,
                code == 401 ? (api_key ? " (check --api-key)" : " (the server wants --api-key)") : "");
    json_t *j = json_loadb(b->buf, b->len, 0, NULL);
    json_t *first = json_array_get(json_object_get(j, "data"), 0);
    if (!json_is_object(first) || !json_is_string(json_object_get(first, "id"))) {
        json_decref(j);
        GP_FAIL(GP_ERR_IO, "GET %s: not a model list ({\"data\": [{\"id\": ...}]}): %.200s", url, b->buf);
    }
    snprintf(out->model, sizeof out->model, "%s", json_string_value(json_object_get(first, "id")));
    out->max_model_len = int_field(first, "max_model_len");
    out->vocab = int_field(first, "vocab_size");
    json_decref(j);
    return GP_OK;
}

gp_status gp_lg_server_probe(const char *base_url, const char *api_key, double ready_timeout_s,
                             gp_lg_server_info *out)
{
    memset(out, 0, sizeof *out);
    body *b = malloc(sizeof *b);
    char *url = gp_lg_url(base_url, "/v1/models");
    gp_status st = GP_ERR_NO_MEMORY;
    if (!b || !url)
        gp_set_error("out of memory");
    else if ((st = wait_healthy(base_url, ready_timeout_s, b)) == GP_OK)
        st = read_models(url, api_key, b, out);
    free(url);
    free(b);
    return st;
}
