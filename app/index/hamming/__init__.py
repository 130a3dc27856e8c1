"""Exact Hamming top-k kernels on packed codes (numba): one query, a shared scan of several, a counting select for deep shortlists, and the dispatch between them (topk.py)."""
