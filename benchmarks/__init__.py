"""Development benches, run from a checkout: `python -m benchmarks.NAME` (see README.md here)."""
