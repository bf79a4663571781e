"""Read SQL and the batch functions behind every DataLoader; nothing else in the project sends a SELECT."""
