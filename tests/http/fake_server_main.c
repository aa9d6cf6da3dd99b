/* The HTTP server over the fake serving core as a process, for clients in
 * other languages (test_openai_fake.py): prints its ephemeral port, serves
 * until its stdin closes. Usage: http_fake_server API_KEY */
#include <stdio.h>

#include "gp_http.h"
#include "serve_fake.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s API_KEY\n", argv[0]);
        return 2;
    }
    gp_serve *core = gp_serve_fake_create("fake-model", 256, 1000, true);
    gp_http_params p = gp_http_default_params();
    p.port = 0;
    p.api_key = argv[1];
    gp_http *h;
    if (gp_http_start(&p, &h) != GP_OK) {
        fprintf(stderr, "http_fake_server: %s\n", gp_last_error());
        gp_serve_fake_destroy(core);
        return 1;
    }
    gp_http_set_core(h, core);
    printf("%d\n", gp_http_port(h));
    fflush(stdout);
    while (getchar() != EOF) {
    }
    gp_http_stop(h);
    gp_serve_fake_destroy(core);
    return 0;
}
