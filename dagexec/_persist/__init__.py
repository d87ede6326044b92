"""Checkpoints: what a task's identity is, and how values are stored and found again."""
