# Tests of queues/ (ring validation, stress, TSan build).
