# The serving core on the CPU reference (no GPU).
