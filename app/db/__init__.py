"""Migrations, connection pools and the embedded PostgreSQL default."""
