"""Index benchmarks: flat and sublinear binary kinds, float re-rank, memory-mapped floats, memory bandwidth."""
