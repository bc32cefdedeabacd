"""The wiring: the settings (`config.py`) and the sidecar that builds each stage from them."""
