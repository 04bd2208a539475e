"""Instrumented training: the context manager, profiler events -> tables, publishing, running scripts."""
