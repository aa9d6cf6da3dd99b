# The HTTP front: request parsing, responses, the server.

# The OpenAI request parser and response formatter: every bad-request class,
# good requests of both kinds, responses, chunks and metrics parsed back.
gp_add_test(http_api SOURCES http/test_api.c LIBS gp_http_api gp_dep_jansson)
