"""A stand-in for sglang in the GPU checks' CPU tests: only its serving benchmark (see benchmark/serving.py)."""
