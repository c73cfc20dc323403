"""The streaming daemon: wire formats, ingest, batching, pipeline, publishing, control, sd_notify."""
