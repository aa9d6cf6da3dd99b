# tests for this part are registered here
