"""Helpers any layer may use, which use nothing of the product: atomic files, task hygiene, stall
detection, the replay mark, one-line errors, text made safe for where it is shown."""
