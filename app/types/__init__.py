"""Strawberry types: one per file; each wraps loader rows and resolves leaves from them."""
