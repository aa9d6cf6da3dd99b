# The HTTP front: request parsing, responses, the server.

# The server on libmicrohttpd over a fake serving core compiled into the test
# (so the real core's objects stay out), driven by libcurl on 127.0.0.1.
gp_add_test(http_server SOURCES http/test_server.c support/serve_fake.c
            LIBS gp_http gp_dep_curl gp_dep_jansson Threads::Threads)
set_tests_properties(http_server PROPERTIES TIMEOUT 180)
