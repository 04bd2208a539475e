"""Embedded operator benchmark implementations, each an executable that obeys the CSV protocol."""
