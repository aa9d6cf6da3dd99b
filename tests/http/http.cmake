# The HTTP front: request parsing, responses, the server.
