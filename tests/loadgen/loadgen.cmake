# The load generator of greenpipe bench-serve.
