"""Realistic small training workloads (plain torch, CPU) for the signal tests."""
