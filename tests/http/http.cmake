# The HTTP front: request parsing, responses, the server.

# The OpenAI request parser and response formatter: every bad-request class,
# good requests of both kinds, responses, chunks and metrics parsed back.
gp_add_test(http_api SOURCES http/test_api.c LIBS gp_http_api gp_dep_jansson)

# The server on libmicrohttpd over a fake serving core compiled into the test
# (so the real core's objects stay out), driven by libcurl on 127.0.0.1.
gp_add_test(http_server SOURCES http/test_server.c support/serve_fake.c
            LIBS gp_http gp_dep_curl gp_dep_jansson Threads::Threads)
set_tests_properties(http_server PROPERTIES TIMEOUT 180)

# The same server as a process, driven by the official openai Python client.
add_executable(http_fake_server http/fake_server_main.c support/serve_fake.c)
target_link_libraries(http_fake_server PRIVATE gp_http gp_test_support Threads::Threads)
add_dependencies(gp_cpu_tests http_fake_server)
add_test(NAME http_server_openai
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/http/test_openai_fake.py $<TARGET_FILE:http_fake_server>)
set_tests_properties(http_server_openai PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
