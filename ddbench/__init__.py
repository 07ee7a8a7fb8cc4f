"""ddbench: the benchmark CLI for DDTree speculative decoding (datasets, servers, sweeps, reports)."""
