"""triggers of the iceberg-exec provider."""
