"""Sensors of the iceberg-exec provider."""
