"""Benchmarks, run by hand with `make bench`. Each measures tokenstep against a bare llama.cpp
loop in the same run, alternating, and reports medians and ratios. No test asserts a speed."""
