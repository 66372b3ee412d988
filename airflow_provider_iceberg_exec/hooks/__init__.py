"""hooks of the iceberg-exec provider."""
