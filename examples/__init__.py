"""Examples that use the `monitor` package (not installed with it; run from the repository root)."""
